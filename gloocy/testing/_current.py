"""The communicator of the rank running this code, for code under test that
does not take it as an argument (the way mpi4py code uses COMM_WORLD)."""

from __future__ import annotations

import contextvars

_comm = contextvars.ContextVar("gloocy.testing.comm")


def use_comm(comm):
    """Make `comm` this thread's (this context's) rank communicator."""
    return _comm.set(comm)


def current_comm():
    """The communicator of the world rank running this code: the argument
    `fn` got from ``World.run`` (in a thread world, per rank thread; in a
    process world, the rank process's)."""
    try:
        return _comm.get()
    except LookupError:
        raise RuntimeError("not running on a rank of a gloocy.testing world "
                           "(call this from a function passed to "
                           "World.run)") from None


class _RankComm:
    """``gloocy.testing.COMM_WORLD``: stands for the running rank's
    communicator; every attribute is looked up on it when used."""

    __slots__ = ()

    def __getattr__(self, name):
        return getattr(current_comm(), name)

    def __repr__(self):
        try:
            return f"<COMM_WORLD of this rank: {current_comm()!r}>"
        except RuntimeError:
            return "<COMM_WORLD of a gloocy.testing rank (none here)>"


COMM_WORLD = _RankComm()
