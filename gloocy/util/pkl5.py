"""Pickled messages of any size (mpi4py.util.pkl5's names).

mpi4py's pkl5 exists because MPI counts are 32-bit and its lower-case
methods pickle in band. gloocy's lower-case methods have neither limit:
lengths are 64-bit, pickles are protocol 5 and a bcast moves an object's
large buffers out of band. These classes are therefore gloocy's own
communicators under pkl5's names: ``pkl5.Intracomm(comm)`` is a second
handle on `comm` whose methods are comm's.
"""

from gloocy import MPI

__all__ = ["Comm", "Intracomm", "Intercomm", "Request", "Message", "pickle"]

pickle = MPI.pickle                # the serializer the lower-case methods use
Request = MPI.Request              # test() -> (flag, obj), wait() -> obj, waitall...
Message = MPI.Message              # mprobe/improbe's: recv(), irecv()


class Comm(MPI.Comm):
    """A communicator (a second handle on the one given)."""

    def __new__(cls, comm=None):
        return super().__new__(cls, comm)


class Intracomm(MPI.Intracomm):
    """An intracommunicator (a second handle on the one given)."""

    def __new__(cls, comm=None):
        return super().__new__(cls, comm)


class Intercomm(MPI.Intercomm):
    """An intercommunicator (a second handle on the one given)."""

    def __new__(cls, comm=None):
        return super().__new__(cls, comm)
