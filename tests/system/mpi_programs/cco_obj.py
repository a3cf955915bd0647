"""Object (lower-case, pickle-based) collectives, every predefined op."""
import numpy as np

from _world import MPI, comm, rank, say, size


comm.barrier()
say("barrier done")

# a mix of picklable objects
obj = {"rank": rank, "list": list(range(rank + 1)), "text": "r" * (rank + 1),
       "tuple": (rank, None, 1.5), "nested": {"set": sorted({rank, 7})}}

for root in range(size):
    got = comm.bcast(obj if rank == root else None, root=root)
    say("bcast root", root, got)

    got = comm.gather(obj["text"], root=root)
    say("gather root", root, got)  # None on non-roots

    items = [("item", root, d) for d in range(size)] if rank == root else None
    got = comm.scatter(items, root=root)
    say("scatter root", root, got)

say("allgather", comm.allgather((rank, str(rank))))
say("alltoall", comm.alltoall([f"{rank}->{d}" for d in range(size)]))

# a NumPy array and a large object travel as objects too
arr = comm.bcast(np.arange(6).reshape(2, 3) * 2 if rank == 0 else None, root=0)
say("bcast ndarray", type(arr).__name__, arr.dtype.str, arr.tolist())
big = comm.bcast(list(range(200_000)) if rank == 0 else None, root=0)
say("bcast big list", len(big), sum(big))

# every predefined op on ints (and objects where the op takes them)
x = rank + 2
for name in ["SUM", "PROD", "MAX", "MIN", "LAND", "BAND", "LOR", "BOR",
             "LXOR", "BXOR", "REPLACE", "NO_OP"]:
    op = getattr(MPI, name)
    say(name, "allreduce", comm.allreduce(x, op=op))
    say(name, "reduce", comm.reduce(x * 3, op=op, root=size - 1))
    say(name, "scan", comm.scan(x, op=op))
    say(name, "exscan", comm.exscan(x, op=op))  # None on rank 0

# the default op is SUM
say("default allreduce", comm.allreduce(rank), comm.reduce(rank, root=0),
    comm.scan(rank), comm.exscan(rank))

# (value, index) pairs; ties resolve to the lower index
pair = (rank % 2, rank)
for name in ["MAXLOC", "MINLOC"]:
    op = getattr(MPI, name)
    say(name, "allreduce", comm.allreduce(pair, op=op))
    say(name, "reduce", comm.reduce((-rank, rank), op=op, root=0))
    say(name, "scan", comm.scan(pair, op=op))

# SUM/MAX on non-numbers: lists concatenate, strings compare
say("SUM lists", comm.allreduce([rank], op=MPI.SUM))
say("SUM strings", comm.allreduce(str(rank), op=MPI.SUM))
say("MAX strings", comm.allreduce("abc"[rank % 3] * (rank + 1), op=MPI.MAX))
say("MIN tuples", comm.allreduce((rank % 2, -rank), op=MPI.MIN))
say("SUM floats", round(comm.allreduce(0.1 * (rank + 1)), 6))
say("SUM ndarray", comm.allreduce(np.arange(3) * rank).tolist())
say("LAND bools", comm.allreduce(rank != 1, op=MPI.LAND), comm.allreduce(rank == 1, op=MPI.LOR))
