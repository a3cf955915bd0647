"""The one exception hierarchy of gloocy.

Every error gloocy raises on purpose is a ``GloocyError``; the subclasses say
what went wrong and carry the facts a user needs (which peer, which call).
``GloocyError`` is also ``gloocy.MPI.Exception``: each error has an MPI error
class (``Get_error_class()``), with MPICH's numbers.
"""

__all__ = [
    "GloocyError",
    "ArgumentError",
    "OpError",
    "PeerLostError",
    "CollectiveTimeout",
    "MismatchError",
    "RendezvousError",
    "RendezvousTimeout",
    "ProtocolError",
    "ContextPoisoned",
]


# MPI error classes (MPICH's values, as mpi4py on MPICH reports them).
SUCCESS = 0
ERR_BUFFER = 1
ERR_COUNT = 2
ERR_TYPE = 3
ERR_TAG = 4
ERR_COMM = 5
ERR_RANK = 6
ERR_ROOT = 7
ERR_GROUP = 8
ERR_OP = 9
ERR_TOPOLOGY = 10
ERR_DIMS = 11
ERR_ARG = 12
ERR_UNKNOWN = 13
ERR_PROC_FAILED = 13
ERR_TRUNCATE = 14
ERR_OTHER = 15
ERR_INTERN = 16
ERR_IN_STATUS = 17
ERR_PENDING = 18
ERR_REQUEST = 19
ERR_ACCESS = 20
ERR_AMODE = 21
ERR_BAD_FILE = 22
ERR_FILE = 27
ERR_INFO = 28
ERR_INFO_KEY = 29
ERR_INFO_VALUE = 30
ERR_INFO_NOKEY = 31
ERR_IO = 32
ERR_NAME = 33
ERR_NO_MEM = 34
ERR_NOT_SAME = 35
ERR_PORT = 38
ERR_SERVICE = 41
ERR_SPAWN = 42
ERR_UNSUPPORTED_OPERATION = 44
ERR_WIN = 45
ERR_BASE = 46
ERR_KEYVAL = 48
ERR_SIZE = 51
ERR_DISP = 52
ERR_SESSION = 75
ERR_PROC_ABORTED = 76
ERR_VALUE_TOO_LARGE = 77
ERR_ERRHANDLER = 80
ERR_REVOKED = 13
ERR_PROC_FAILED_PENDING = 13
ERR_CONVERSION = 23
ERR_DUP_DATAREP = 24
ERR_FILE_EXISTS = 25
ERR_FILE_IN_USE = 26
ERR_NO_SPACE = 36
ERR_NO_SUCH_FILE = 37
ERR_QUOTA = 39
ERR_READ_ONLY = 40
ERR_UNSUPPORTED_DATAREP = 43
ERR_LOCKTYPE = 47
ERR_RMA_CONFLICT = 49
ERR_RMA_SYNC = 50
ERR_ASSERT = 53
ERR_RMA_RANGE = 55
ERR_RMA_ATTACH = 56
ERR_RMA_SHARED = 57
ERR_RMA_FLAVOR = 58
ERR_LASTCODE = 1073741823
ERR_ABI = 1073741823

ERROR_STRINGS = {
    SUCCESS: "no error",
    ERR_BUFFER: "invalid buffer",
    ERR_COUNT: "invalid count",
    ERR_TYPE: "invalid datatype",
    ERR_TAG: "invalid tag",
    ERR_COMM: "invalid communicator",
    ERR_RANK: "invalid rank",
    ERR_ROOT: "invalid root",
    ERR_GROUP: "invalid group",
    ERR_OP: "invalid operation",
    ERR_TOPOLOGY: "invalid topology",
    ERR_DIMS: "invalid dimensions",
    ERR_ARG: "invalid argument",
    ERR_UNKNOWN: "unknown error or process failure",
    ERR_TRUNCATE: "message truncated",
    ERR_OTHER: "other error",
    ERR_INTERN: "internal error",
    ERR_IN_STATUS: "error code is in status",
    ERR_PENDING: "pending request",
    ERR_REQUEST: "invalid request",
    ERR_NO_MEM: "out of memory",
    ERR_NOT_SAME: "collective arguments differ between processes",
    ERR_INFO: "invalid info",
    ERR_KEYVAL: "invalid keyval",
    ERR_ERRHANDLER: "invalid errhandler",
    ERR_WIN: "invalid window",
    ERR_SESSION: "invalid session",
    ERR_UNSUPPORTED_OPERATION: "unsupported operation",
    # MPI-IO (gloocy.mpiio)
    ERR_FILE: "invalid file handle",
    ERR_ACCESS: "permission denied",
    ERR_AMODE: "invalid access mode",
    ERR_BAD_FILE: "invalid file name",
    ERR_FILE_EXISTS: "file exists",
    ERR_NO_SUCH_FILE: "file does not exist",
    ERR_READ_ONLY: "read-only file or file system",
    ERR_NO_SPACE: "not enough space",
    ERR_QUOTA: "quota exceeded",
    ERR_IO: "I/O error",
    ERR_UNSUPPORTED_DATAREP: "unsupported data representation",
    ERR_DUP_DATAREP: "data representation already registered",
}


# -- error classes and codes added at run time (MPI.Add_error_class...) ------
# Numbers above ERR_LASTCODE, as MPICH's; a class has codes, each may have
# a string. Nothing can be removed while something still refers to it.

_user_classes = {}                # added class -> set of its added codes
_user_codes = {}                  # added code -> its class
_user_strings = {}                # added class or code -> its string
_last_used = [ERR_LASTCODE]       # MPI.LASTUSEDCODE


def _next_number():
    _last_used[0] += 1
    return _last_used[0]


def add_error_class():
    number = _next_number()
    _user_classes[number] = set()
    return number


def add_error_code(errorclass):
    if not (errorclass in _user_classes or 0 <= errorclass in ERROR_STRINGS
            or 0 <= errorclass < ERR_LASTCODE and errorclass not in _user_codes):
        raise GloocyError(f"errorclass: {errorclass} is not an error class", ERR_ARG)
    number = _next_number()
    _user_codes[number] = errorclass
    _user_classes.get(errorclass, set()).add(number)
    return number


def add_error_string(errorcode, string):
    if errorcode not in _user_classes and errorcode not in _user_codes:
        raise GloocyError(f"errorcode: {errorcode} was not added (Add_error_class, "
                          "Add_error_code)", ERR_ARG)
    _user_strings[errorcode] = str(string)


def remove_error_string(errorcode):
    if errorcode not in _user_classes and errorcode not in _user_codes:
        raise GloocyError(f"errorcode: {errorcode} was not added", ERR_ARG)
    _user_strings.pop(errorcode, None)


def remove_error_code(errorcode):
    if errorcode not in _user_codes:
        raise GloocyError(f"errorcode: {errorcode} is not an added error code", ERR_ARG)
    if errorcode in _user_strings:
        raise GloocyError(f"errorcode: {errorcode} still has a string "
                          "(Remove_error_string first)", ERR_ARG)
    _user_classes.get(_user_codes.pop(errorcode), set()).discard(errorcode)


def remove_error_class(errorclass):
    if errorclass not in _user_classes:
        raise GloocyError(f"errorclass: {errorclass} is not an added error class", ERR_ARG)
    if _user_classes[errorclass] or errorclass in _user_strings:
        raise GloocyError(f"errorclass: {errorclass} still has codes or a string",
                          ERR_ARG)
    del _user_classes[errorclass]


def last_used_code():
    """The last error class or code added (MPI.LASTUSEDCODE)."""
    return _last_used[0]


def error_class_of(errorcode):
    """The class of an error code (a predefined class is its own)."""
    return _user_codes.get(errorcode, errorcode)


def error_string(errorcode):
    if errorcode in _user_classes or errorcode in _user_codes:
        return _user_strings.get(errorcode, "")
    return ERROR_STRINGS.get(errorcode, f"error code {errorcode}")


class GloocyError(RuntimeError):
    """Base class of every error gloocy raises on purpose.

    As ``MPI.Exception`` it may also be made from an error class alone,
    ``GloocyError(ERR_ROOT)``, and compares equal to its class number.
    """

    error_class = ERR_OTHER
    # Set when a peer stopped first and told us why: its rank (the message
    # then quotes its reason and says what this rank was doing).
    origin = None

    _code = None                  # an error code that is not its class (added ones)
    _from_code = False            # made from a number alone: MPI.Exception(ierr)

    def __init__(self, message=None, error_class=None):
        if error_class is None and isinstance(message, int):
            error_class, message = int(message), None
        elif message is None and error_class is None:
            error_class = SUCCESS             # MPI.Exception()
        if error_class is not None:
            code = ERR_UNKNOWN if error_class < 0 else error_class
            self.error_class = error_class_of(code)
            if code != self.error_class:
                self._code = code
        self._from_code = message is None
        super().__init__(error_string(self.Get_error_code()) if message is None
                         else message)

    def Get_error_class(self):
        return self.error_class

    def Get_error_code(self):
        return self.error_class if self._code is None else self._code

    def Get_error_string(self):
        return error_string(self.Get_error_code())

    error_code = property(Get_error_code)
    error_string = property(Get_error_string)

    def __int__(self):
        return self.Get_error_code()

    def __bool__(self):
        return self.Get_error_code() != SUCCESS

    def __repr__(self):
        if self._from_code:
            return f"MPI.Exception({self.Get_error_code()})"
        return super().__repr__()

    # compared (and hashed) as its error code, as mpi4py's
    def _other(self, other):
        if isinstance(other, GloocyError):
            return other.Get_error_code()
        if isinstance(other, int):
            return other
        return None

    def __eq__(self, other):
        value = self._other(other)
        return NotImplemented if value is None else self.Get_error_code() == value

    def __ne__(self, other):
        value = self._other(other)
        return NotImplemented if value is None else self.Get_error_code() != value

    def __lt__(self, other):
        value = self._other(other)
        return NotImplemented if value is None else self.Get_error_code() < value

    def __le__(self, other):
        value = self._other(other)
        return NotImplemented if value is None else self.Get_error_code() <= value

    def __gt__(self, other):
        value = self._other(other)
        return NotImplemented if value is None else self.Get_error_code() > value

    def __ge__(self, other):
        value = self._other(other)
        return NotImplemented if value is None else self.Get_error_code() >= value

    def __hash__(self):
        return hash(self.Get_error_code())


class ArgumentError(GloocyError, ValueError):
    """A bad argument (root, rank, tag, count, buffer, op...), found before
    anything was sent; ``error_class`` says which (ERR_ROOT, ERR_COUNT...)."""

    error_class = ERR_ARG


class OpError(GloocyError, TypeError):
    """An operation that is not defined for the data (e.g. BAND on floats)."""

    error_class = ERR_OP


class PeerLostError(GloocyError, ConnectionError):
    """A peer went away (crashed, was killed, closed its end) mid-job.

    ``rank`` is the lost peer's rank in the world (the first communicator
    over the connections).
    """

    error_class = ERR_PROC_FAILED

    def __init__(self, message, rank=None):
        super().__init__(message)
        self.rank = rank


class CollectiveTimeout(GloocyError, TimeoutError):
    """A collective or point-to-point call did not finish before its deadline.

    ``ranks``: the ranks of the communicator it was still waiting for;
    ``culprit``: the world rank at the end of the chain of waits (the one
    that never came), when the other ranks' reasons told it, else None."""

    ranks = ()
    culprit = None


class MismatchError(GloocyError):
    """Ranks called different collectives, or the same one with different
    counts, dtypes, ops or roots; or a message did not fit its receive."""

    error_class = ERR_NOT_SAME


class RendezvousError(GloocyError):
    """Ranks could not find each other through the store."""


class RendezvousTimeout(RendezvousError, TimeoutError):
    """A store operation did not finish before its deadline."""


class ProtocolError(GloocyError):
    """A peer sent bytes that are not a valid gloocy frame or handshake."""


class ContextPoisoned(GloocyError):
    """The communicator saw a fatal error earlier and refuses further work."""
