"""mpi4py's object model: a subclassed Intracomm built in __new__ (as the
demo/reductions one), its Clone/Split keeping the subclass; MPI.pickle
switched to another serializer for the lower-case calls; a user Op
pickled to another rank; Info as a mapping; error classes, codes and
strings added at run time; null handles: truth, equality, pickling,
fromhandle."""
import pickle

from _world import MPI, comm, rank, say, size


class Ring(MPI.Intracomm):
    """Reductions passed around a ring with point-to-point messages."""

    def __new__(cls, comm=None):
        return super().__new__(cls, comm)

    def ring_sum(self, value):
        total = value
        if self.size > 1:
            right, left = (self.rank + 1) % self.size, (self.rank - 1) % self.size
            token = value
            for _ in range(self.size - 1):
                token = self.sendrecv(token, right, 7, None, left, 7)
                total += token
        return total


ring = Ring(comm.Dup())
say("subclass", type(ring).__name__, isinstance(ring, MPI.Intracomm), ring.size)
say("ring sum", ring.ring_sum(rank + 1), "allreduce", ring.allreduce(rank + 1))
clone = ring.Clone()
half = ring.Split(rank % 2, rank)
say("derived keep the class", type(clone).__name__, type(half).__name__, half.size)
say("compare", ring.Compare(comm) == MPI.CONGRUENT, clone.Compare(ring) == MPI.CONGRUENT)
for c in (half, clone, ring):
    c.Free()
say("freed", ring == MPI.COMM_NULL)


def mymax(a, b, datatype):
    return a if a > b else b


op = MPI.Op.Create(mymax, commute=True)
got = comm.bcast(op if rank == 0 else None, root=0)
say("op travels", type(got).__name__, got.Is_commutative(), comm.allreduce(rank * 3 % 5, op=got))
op.Free()

# MPI.pickle: another serializer for every lower-case call
import json
MPI.pickle.__init__(lambda obj: json.dumps(obj).encode(),
                    lambda data: json.loads(bytes(data).decode()))
say("json bcast", comm.bcast({"root": [1, 2]} if rank == 0 else None, 0))
say("json allgather", comm.allgather(rank))
say("json tuple becomes", comm.bcast((1, 2), 0))
MPI.pickle.__init__()
say("default again", comm.bcast((1, 2), 0))

info = MPI.Info.Create({"b": "2", "a": "1"})
info["c"] = "3"
say("info", len(info), sorted(info.keys()), info.get("a"), info.get("zz", "none"),
    "a" in info, info.pop("b"), sorted(info.items()))
copy = info.copy()
say("info copy", copy == info, sorted(copy.items()) == sorted(info.items()))
for i in (info, copy):
    i.Free()
say("info null", bool(MPI.INFO_NULL), len(MPI.INFO_NULL), MPI.INFO_NULL.get("x", 0))

cls = MPI.Add_error_class()
code = MPI.Add_error_code(cls)
MPI.Add_error_string(code, "my error")
say("errors", cls > MPI.ERR_LASTCODE - 1, MPI.Get_error_class(code) == cls,
    MPI.Get_error_string(code))
exc = MPI.Exception(MPI.ERR_ARG)
say("exception", repr(exc), exc == MPI.ERR_ARG, exc.Get_error_class() == MPI.ERR_ARG)

nulls = [MPI.COMM_NULL, MPI.GROUP_NULL, MPI.INFO_NULL, MPI.OP_NULL, MPI.DATATYPE_NULL,
         MPI.REQUEST_NULL, MPI.ERRHANDLER_NULL, MPI.WIN_NULL, MPI.FILE_NULL,
         MPI.SESSION_NULL, MPI.MESSAGE_NULL]
say("nulls false", [bool(n) for n in nulls])
say("nulls pickle", all(pickle.loads(pickle.dumps(n)) is n for n in nulls))
say("nulls handle", all(type(n).fromhandle(n.handle) == n for n in nulls))
say("copies equal", all(type(n)(n) == n for n in nulls))
comm.Barrier()
