"""MPI-4 sessions (``MPI.Session``): a handle on the process sets gloocy
knows, ``mpi://WORLD`` (the job) and ``mpi://SELF`` (this process), with an
error handler of its own. A session's groups make communicators with
``Intracomm.Create_from_group``. The job itself is joined when gloocy.MPI is
imported, as mpi4py's import initializes MPI; a session adds no connections.
"""

import gloocy
from gloocy import errhandler as _errhandlers, handles as _handles
from gloocy import message as _message, requests as _requests
from gloocy.errors import ERR_ARG, ERR_BUFFER, ERR_SESSION, GloocyError
from gloocy.info import Info

__all__ = ["Session", "SESSION_NULL"]

PSETS = ("mpi://WORLD", "mpi://SELF")
THREAD_MULTIPLE = 3


class Session(_handles.Handled):
    """An MPI session (Session.Init()); Session() and SESSION_NULL are the
    null session."""

    __slots__ = ("_state", "__weakref__")

    def __new__(cls, session=None):
        if session is not None and not isinstance(session, Session):
            raise TypeError(f"expected a Session, got {session!r}")
        self = object.__new__(cls)
        # a second handle shares the first one's state (None: null)
        self._state = None if session is None else session._state
        return self

    # -- life ----------------------------------------------------------------------

    @classmethod
    def Init(cls, flags=THREAD_MULTIPLE, errhandler=None):
        """A new session (`errhandler`: what Call_errhandler runs; default
        ERRORS_RETURN)."""
        self = object.__new__(cls)
        self._state = {"errhandler": _errhandlers.checked(
            errhandler or _errhandlers.ERRORS_RETURN)}
        return self

    def Finalize(self):
        self._live()
        _handles.forget(("Session", id(self._state)))
        self._state.clear()
        self._state = None

    def _live(self):
        if not self._state:
            raise GloocyError("session: SESSION_NULL (or finalized)", ERR_SESSION)
        return self._state

    def __bool__(self):
        return bool(self._state)

    def __reduce__(self):
        if self:
            raise ValueError("cannot pickle a live Session")
        return ("SESSION_NULL" if self is SESSION_NULL
                else (type(self), (SESSION_NULL,)))

    def __repr__(self):
        return "<Session>" if self else "<Session SESSION_NULL>"

    # -- handles -------------------------------------------------------------------

    def _key(self):
        return ("Session", id(self._state)) if self else None

    def free(self):
        if self:
            self.Finalize()

    # -- process sets --------------------------------------------------------------

    def Get_num_psets(self, info=None):
        self._live()
        return len(PSETS)

    def Get_nth_pset(self, n, info=None):
        self._live()
        if not 0 <= n < len(PSETS):
            raise GloocyError(f"n: {n} is not a process set number (0 to "
                              f"{len(PSETS) - 1})", ERR_ARG)
        return PSETS[n]

    def Get_pset_info(self, pset_name):
        info = Info.Create()
        info.Set("mpi_size", str(len(self._members(pset_name))))
        return info

    def Get_info(self):
        self._live()
        info = Info.Create()
        info.Set("thread_level", "MPI_THREAD_MULTIPLE")
        return info

    def Create_group(self, pset_name):
        """The group of a process set (mpi://WORLD or mpi://SELF)."""
        world = gloocy._world.Get_group()
        world._session = self._live()
        return world.Incl(self._members(pset_name))

    # -- buffered sends (MPI-4.1): communicators made from this session's
    # groups take their room from its buffer, when they have none of their own

    def _buffer(self):
        state = self._live()
        if "buffer" not in state:
            state["buffer"] = _message.SendBuffer("the session")
        return state["buffer"]

    def Attach_buffer(self, buf):
        """A buffer for the buffered sends of this session's communicators
        (None or BUFFER_AUTOMATIC: no limit)."""
        self._buffer().attach(buf)

    def Detach_buffer(self):
        """Wait for the buffered sends in flight; the buffer detached."""
        pool = self._buffer()
        if not pool.attached:
            raise GloocyError("Detach_buffer: no buffer attached to the "
                              "session", ERR_BUFFER)
        return pool.detach()

    def Flush_buffer(self):
        """Wait for the buffered sends in flight from the session's buffer."""
        self._buffer().flush()

    def Iflush_buffer(self):
        self.Flush_buffer()
        return _requests.CollectiveRequest._finished()

    def _members(self, pset_name):
        self._live()
        if pset_name not in PSETS:
            raise GloocyError(f"pset_name: {pset_name!r} is not a process set "
                              f"here ({', '.join(PSETS)})", ERR_ARG)
        world = gloocy._world
        return list(range(world.size)) if pset_name == PSETS[0] else [world.rank]

    # -- error handlers (gloocy.errhandler) ----------------------------------------

    @classmethod
    def Create_errhandler(cls, errhandler_fn):
        """An error handler running ``errhandler_fn(session, errorcode)``."""
        return _errhandlers.create(errhandler_fn)

    def Set_errhandler(self, errhandler):
        self._live()["errhandler"] = _errhandlers.checked(errhandler)

    def Get_errhandler(self):
        return _errhandlers.Errhandler(self._live()["errhandler"])

    def Call_errhandler(self, errorcode):
        """Run this session's handler for `errorcode` (SUCCESS: nothing)."""
        handler = self._live()["errhandler"]
        if errorcode:
            _errhandlers.call(handler, self, errorcode)


SESSION_NULL = Session()
