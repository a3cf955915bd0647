"""Error handlers as mpi4py has them: handles on what happens when a call on
a communicator fails.

gloocy's calls always raise their error as an exception (mpi4py's default,
ERRORS_RETURN, behaves the same). A communicator's handler is what
``Call_errhandler`` runs: a user's function ``fn(comm, errorcode)``
(``Comm.Create_errhandler``), nothing for ERRORS_RETURN, the end of the job
for ERRORS_ARE_FATAL and ERRORS_ABORT.

An Errhandler object is a handle: copies (``Errhandler(eh)``,
``Get_errhandler``) are equal to their original; ``Free`` turns that handle
into ERRHANDLER_NULL and, for a user's handler, gives back its slot (at
most MAX_USER_HANDLERS exist at once, as in mpi4py).
"""

import itertools
import os
import sys

from gloocy.errors import ERR_ARG, ERR_ERRHANDLER, GloocyError

__all__ = ["Errhandler", "ERRHANDLER_NULL", "ERRORS_RETURN", "ERRORS_ARE_FATAL",
           "ERRORS_ABORT", "create", "call", "MAX_USER_HANDLERS"]

MAX_USER_HANDLERS = 32

# handle number -> (name or None, user function or None); 0 is the null one
_handles = {0: ("ERRHANDLER_NULL", None)}
_numbers = itertools.count(64)
_user = set()                     # handle numbers of users' live handlers


class Errhandler:
    """A handle on an error handler; Errhandler() is ERRHANDLER_NULL."""

    __slots__ = ("_handle", "__weakref__")

    def __init__(self, errhandler=None):
        if errhandler is None:
            self._handle = 0
        elif isinstance(errhandler, Errhandler):
            self._handle = errhandler._handle
        else:
            raise TypeError(f"errhandler: expected an Errhandler, got {errhandler!r}")

    def Free(self):
        """This handle becomes ERRHANDLER_NULL; a user's handler is gone
        once freed (communicators that have it keep it)."""
        if self._handle == 0:
            raise GloocyError("errhandler: ERRHANDLER_NULL cannot be freed",
                              ERR_ERRHANDLER)
        if self._handle in _user:
            _user.discard(self._handle)
        self._handle = 0

    def __bool__(self):
        return self._handle != 0

    def __eq__(self, other):
        if not isinstance(other, Errhandler):
            return NotImplemented
        return self._handle == other._handle

    __hash__ = None               # a handle changes when freed (as mpi4py's)

    def toint(self):
        return self._handle

    py2f = toint

    @classmethod
    def fromint(cls, value):
        if value not in _handles:
            raise ValueError(f"errhandler: {value!r} is not a handle")
        eh = cls.__new__(cls)
        eh._handle = value
        return eh

    f2py = fromint

    # mpi4py's object model: handle, fromhandle, free
    handle = property(toint)
    fromhandle = fromint

    def free(self):
        """Free a handle (the predefined handlers themselves stay)."""
        if self._handle and not any(self is c for c in _CONSTANTS):
            self.Free()

    def __reduce__(self):
        """The predefined handles unpickle as themselves, copies of them as
        copies; a user's handler cannot travel."""
        name = _handles.get(self._handle, (None,))[0]
        if name is None:
            raise ValueError(f"cannot pickle {self!r}: a user's error handler")
        predefined = globals()[name]
        return name if self is predefined else (type(self), (predefined,))

    def __repr__(self):
        name = _handles.get(self._handle, (None,))[0] or f"user #{self._handle}"
        return f"<Errhandler {name}>"


def _predefined(name, number):
    _handles[number] = (name, None)
    eh = Errhandler.__new__(Errhandler)
    eh._handle = number
    return eh


ERRHANDLER_NULL = _predefined("ERRHANDLER_NULL", 0)
ERRORS_ARE_FATAL = _predefined("ERRORS_ARE_FATAL", 1)
ERRORS_RETURN = _predefined("ERRORS_RETURN", 2)
ERRORS_ABORT = _predefined("ERRORS_ABORT", 3)
_CONSTANTS = (ERRHANDLER_NULL, ERRORS_ARE_FATAL, ERRORS_RETURN, ERRORS_ABORT)


def create(fn):
    """A new handler running ``fn(obj, errorcode)``."""
    if not callable(fn):
        raise TypeError(f"errhandler_fn: expected a callable, got {fn!r}")
    if len(_user) >= MAX_USER_HANDLERS:
        raise RuntimeError(f"at most {MAX_USER_HANDLERS} user error handlers may "
                           "exist at once: Free some")
    number = next(_numbers)
    _handles[number] = (None, fn)
    _user.add(number)
    return Errhandler.fromint(number)


def checked(errhandler):
    """The handle to set on an object; ERR_ARG for anything but a live one."""
    if not isinstance(errhandler, Errhandler):
        raise TypeError(f"errhandler: expected an Errhandler, got {errhandler!r}")
    if not errhandler:
        raise GloocyError("errhandler: ERRHANDLER_NULL cannot be set", ERR_ERRHANDLER)
    return Errhandler(errhandler)


def call(errhandler, obj, errorcode):
    """What `errhandler` does about `errorcode` on `obj`."""
    name, fn = _handles.get(errhandler._handle, (None, None))
    if fn is not None:
        fn(obj, errorcode)
    elif name in ("ERRORS_ARE_FATAL", "ERRORS_ABORT"):
        print(f"gloocy: {name}: error {errorcode} on {obj!r}: ending the job",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(errorcode & 0xFF or 1)
    elif name is None or name == "ERRHANDLER_NULL":
        raise GloocyError("errhandler: not a live error handler", ERR_ARG)
