"""Hundreds of communicators created and freed (Dup and Split), a small
collective on each; some held at once, some nested."""
import numpy as np

from _world import MPI, comm as world, rank, say, size


# Dup / use / Free, one at a time
total = 0
for i in range(300):
    c = world.Dup()
    total += c.allreduce(i + rank)
    c.Free()
say("Dup storm", total)

# Split / use / Free with changing colors and keys
total, sizes = 0, 0
for i in range(200):
    c = world.Split(color=(rank + i) % 2, key=(rank * 7 + i) % size)
    out = np.zeros(1, "i8")
    c.Allreduce(np.array([i * (rank + 1)], "i8"), out, op=MPI.SUM)
    total += int(out[0]) * (c.Get_rank() + 1)
    sizes += c.Get_size()
    c.Free()
say("Split storm", total, sizes)

# many alive at once, used in creation order, freed in reverse
held = [world.Dup() if i % 2 else world.Split(color=0, key=-rank) for i in range(64)]
vals = [c.bcast(i * 10 if c.Get_rank() == 0 else None, root=0) for i, c in enumerate(held)]
say("held", sum(vals), sorted({c.Get_rank() for c in held}))
# interleave: a message on each, in reverse order of creation
got = [c.sendrecv(i, dest=(c.Get_rank() + 1) % c.Get_size(), source=MPI.ANY_SOURCE)
       for i, c in reversed(list(enumerate(held)))]
say("held sendrecv", sum(got))
for c in reversed(held):
    c.Free()
say("held freed", all(c == MPI.COMM_NULL for c in held))

# nested: a chain of Dups of Dups, and Splits of Splits
chain, c = [], world
for i in range(20):
    c = c.Dup()
    chain.append(c)
say("chain", c.allreduce(rank), c.Get_size())
for c in chain:
    c.Free()
c, depth = world, 0
while c.Get_size() > 1:
    n = c.Split(color=c.Get_rank() % 2, key=c.Get_rank())
    if c is not world:
        c.Free()
    c, depth = n, depth + 1
say("split down", depth, c.Get_size(), c.allreduce(rank))
if c is not world:
    c.Free()
say("world", world.allreduce(1))
