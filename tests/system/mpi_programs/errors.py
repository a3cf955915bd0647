"""Errors: what is raised (MPI.Exception with its error class, KeyError,
ValueError, BufferError, TypeError) and the MPI.Exception API. Every error
here is detected on every rank before communicating, so nobody hangs."""
import numpy as np

from _world import MPI, comm, rank, say, size


CLASSES = ["SUCCESS", "ERR_ROOT", "ERR_RANK", "ERR_TAG", "ERR_COUNT", "ERR_TYPE",
           "ERR_OP", "ERR_TRUNCATE", "ERR_BUFFER", "ERR_ARG", "ERR_COMM", "ERR_OTHER"]


def class_name(cls):
    return next((n for n in CLASSES if getattr(MPI, n) == cls), "unknown class")


def attempt(label, fn):
    """Run fn; print what it raised (class, and error class for MPI.Exception)."""
    try:
        fn()
        say(label, "no error")
    except MPI.Exception as e:
        say(label, "MPI.Exception", class_name(e.Get_error_class()))
    except Exception as e:
        say(label, type(e).__name__)


# bad roots, ranks and tags
attempt("Bcast root=size", lambda: comm.Bcast(np.zeros(2), root=size))
attempt("Bcast root=-1", lambda: comm.Bcast(np.zeros(2), root=-1))
attempt("Reduce root=size+2", lambda: comm.Reduce(np.zeros(1), np.zeros(1), root=size + 2))
attempt("Gather root=size", lambda: comm.Gather(np.zeros(1), np.zeros(size), root=size))
attempt("bcast obj root=size", lambda: comm.bcast(1, root=size))
attempt("gather obj root=-1", lambda: comm.gather(1, root=-1))
attempt("reduce obj root=size", lambda: comm.reduce(1, root=size))
attempt("Send dest=size", lambda: comm.Send(np.zeros(1), dest=size))
attempt("Recv source=size+1", lambda: comm.Recv(np.zeros(1), source=size + 1))
attempt("send obj dest=size", lambda: comm.send("x", dest=size))
attempt("Send tag=-5", lambda: comm.Send(np.zeros(1), dest=rank, tag=-5))

# a message longer than the receive buffer
attempt("truncate", lambda: comm.Sendrecv(np.zeros(4), dest=rank, recvbuf=np.zeros(2), source=rank))

# unknown typecodes
attempt("typecode 'z'", lambda: comm.Bcast([np.zeros(2), "z"], root=0))
attempt("typecode 'int32'", lambda: comm.Bcast([np.zeros(2, "i4"), "int32"], root=0))
attempt("typecode '?x'", lambda: comm.Allreduce([np.zeros(2), "?x"], np.zeros(2)))

# mismatched send/receive specs, ops that do not fit the type
attempt("Allreduce count mismatch", lambda: comm.Allreduce(np.zeros(2), np.zeros(3)))
attempt("Allreduce type mismatch", lambda: comm.Allreduce(np.zeros(2), np.zeros(2, "i4")))
attempt("BAND on double", lambda: comm.Allreduce(np.ones(2), np.zeros(2), op=MPI.BAND))
attempt("Reduce_local count mismatch", lambda: MPI.SUM.Reduce_local(np.zeros(3), np.zeros(4)))
attempt("Reduce_local type mismatch", lambda: MPI.SUM.Reduce_local(np.zeros(3), np.zeros(3, "i8")))
vec = MPI.INT.Create_vector(2, 1, 2)  # never committed
attempt("uncommitted type", lambda: comm.Bcast([np.zeros(4, "i4"), 1, vec], root=0))
vec.Free()

# buffers that cannot be used
attempt("read-only receive", lambda: comm.Sendrecv(b"ab", dest=rank, recvbuf=b"cd", source=rank))
attempt("non-contiguous", lambda: comm.Bcast(np.zeros(6)[::2], root=0))
attempt("not a buffer", lambda: comm.Bcast(12, root=0))
attempt("str is not a buffer", lambda: comm.Allreduce("abc", bytearray(3)))
attempt("spec too long", lambda: comm.Bcast([np.zeros(2), 1, 0, MPI.DOUBLE, 5], root=0))
attempt("alltoall obj wrong length", lambda: comm.alltoall(list(range(size + 1))))
if size == 1:  # at a root only; other ranks would wait in the collective
    attempt("scatter obj wrong length", lambda: comm.scatter([1, 2], root=0))

# the exception class API
try:
    comm.Bcast(np.zeros(1), root=size)
except MPI.Exception as e:
    code = e.Get_error_code()
    say("isinstance RuntimeError", isinstance(e, RuntimeError), issubclass(MPI.Exception, RuntimeError))
    say("Get_error_class", class_name(e.Get_error_class()), e.Get_error_class() == MPI.ERR_ROOT)
    say("Get_error_code", isinstance(code, int), MPI.Get_error_class(code) == MPI.ERR_ROOT)
    s = e.Get_error_string()
    say("Get_error_string", isinstance(s, str) and len(s) > 0, len(str(e)) > 0)
    say("properties", e.error_class == e.Get_error_class(), e.error_code == code,
        e.error_string == s)
e = MPI.Exception(MPI.ERR_ROOT)
say("constructed", class_name(e.Get_error_class()), class_name(e.Get_error_code()),
    e.Get_error_class() == MPI.ERR_ROOT, int(e) == MPI.ERR_ROOT, e == MPI.ERR_ROOT)
say("default", class_name(MPI.Exception().Get_error_class()))
s = MPI.Get_error_string(MPI.ERR_ROOT)
say("module Get_error_string", isinstance(s, str) and len(s) > 0)
say("module Get_error_class", class_name(MPI.Get_error_class(MPI.ERR_TRUNCATE)))
try:
    raise MPI.Exception(MPI.ERR_ARG)
except RuntimeError as e:
    say("caught as RuntimeError", class_name(e.Get_error_class()))
say("errhandler", comm.Get_errhandler() == MPI.ERRORS_RETURN)

# the communicator keeps working after all of the above
say("still works", comm.allreduce(rank), comm.bcast("ok", root=size - 1))
