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
ERR_LASTCODE = 1073741823

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
}


def error_string(error_class):
    return ERROR_STRINGS.get(error_class, f"error code {error_class}")


class GloocyError(RuntimeError):
    """Base class of every error gloocy raises on purpose.

    As ``MPI.Exception`` it may also be made from an error class alone,
    ``GloocyError(ERR_ROOT)``, and compares equal to its class number.
    """

    error_class = ERR_OTHER
    # Set when a peer stopped first and told us why: its rank (the message
    # then quotes its reason and says what this rank was doing).
    origin = None

    def __init__(self, message=None, error_class=None):
        if error_class is None and type(message) is int:
            error_class, message = message, None
        elif message is None and error_class is None:
            error_class = SUCCESS             # MPI.Exception()
        if error_class is not None:
            self.error_class = ERR_UNKNOWN if error_class < 0 else error_class
        super().__init__(error_string(self.error_class) if message is None
                         else message)

    def Get_error_class(self):
        return self.error_class

    def Get_error_code(self):
        return self.error_class

    def Get_error_string(self):
        return error_string(self.error_class)

    error_code = property(Get_error_code)
    error_string = property(Get_error_string)

    def __int__(self):
        return self.error_class

    def __bool__(self):
        return self.error_class != SUCCESS

    def __eq__(self, other):
        if isinstance(other, int):
            return self.error_class == other
        return NotImplemented

    __hash__ = RuntimeError.__hash__


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
