"""Nonblocking collectives (I-collectives), several in flight at once."""
import numpy as np

from _world import MPI, comm, rank, say, size


r = comm.Ibarrier()
r.Wait()
say("Ibarrier", r == MPI.REQUEST_NULL)

mine = np.arange(4, dtype="i8") + 10 * rank
root = size - 1

# one of each, all started before any is waited on
bc = mine.copy() if rank == root else np.zeros(4, "i8")
red = np.zeros(4, "i8") if rank == root else None
ared = np.zeros(4, "i8")
gat = np.zeros((size, 4), "i8") if rank == root else None
sca_src = np.arange(size * 2, dtype="i8") * 3 if rank == root else None
sca = np.zeros(2, "i8")
agat = np.zeros((size, 4), "i8")
a2a = np.zeros(size, "i8")
rsb = np.zeros(2, "i8")
scan = np.zeros(4, "i8")
exscan = np.full(4, -1, "i8")
reqs = [
    comm.Ibcast(bc, root=root),
    comm.Ireduce(mine, red, op=MPI.SUM, root=root),
    comm.Iallreduce(mine, ared, op=MPI.MAX),
    comm.Igather(mine, gat, root=root),
    comm.Iscatter(sca_src, sca, root=root),
    comm.Iallgather(mine, agat),
    comm.Ialltoall(np.arange(size, dtype="i8") + 100 * rank, a2a),
    comm.Ireduce_scatter_block(np.arange(2 * size, dtype="i8") * (rank + 1), rsb, op=MPI.SUM),
    comm.Iscan(mine, scan, op=MPI.SUM),
    comm.Iexscan(mine, exscan, op=MPI.SUM),
]
MPI.Request.Waitall(reqs)
say("Ibcast", bc.tolist())
if rank == root:
    say("Ireduce", red.tolist())
    say("Igather", gat.tolist())
say("Iallreduce MAX", ared.tolist())
say("Iscatter", sca.tolist())
say("Iallgather", agat.tolist())
say("Ialltoall", a2a.tolist())
say("Ireduce_scatter_block", rsb.tolist())
say("Iscan", scan.tolist())
if rank > 0:
    say("Iexscan", exscan.tolist())

# v-variants: rank r has r+1 items
counts = [r + 1 for r in range(size)]
displs = [sum(counts[:r]) for r in range(size)]
v = np.arange(rank + 1, dtype="f8") + rank / 2
gv = np.zeros(sum(counts)) if rank == 0 else None
agv = np.zeros(sum(counts))
scv = np.zeros(rank + 1)
scv_src = np.arange(sum(counts), dtype="f8") * 1.5 if rank == 0 else None
# Alltoallv: rank r sends d+1 items to rank d
sc = [d + 1 for d in range(size)]
sd = [sum(sc[:d]) for d in range(size)]
rc = [rank + 1] * size
rd = [s * (rank + 1) for s in range(size)]
a2av = np.zeros(sum(rc), "i4")
rs = np.zeros(rank + 1, "i4")
reqs = [
    comm.Igatherv(v, [gv, counts, displs, MPI.DOUBLE] if rank == 0 else None, root=0),
    comm.Iallgatherv(v, [agv, counts, displs, MPI.DOUBLE]),
    comm.Iscatterv([scv_src, counts, displs, MPI.DOUBLE] if rank == 0 else None, scv, root=0),
    comm.Ialltoallv([np.arange(sum(sc), dtype="i4") + 50 * rank, sc, sd, MPI.INT],
                    [a2av, rc, rd, MPI.INT]),
    comm.Ireduce_scatter(np.arange(sum(counts), dtype="i4") + rank, rs,
                         recvcounts=counts, op=MPI.SUM),
]
# complete them in any order with Waitany
left = len(reqs)
while left:
    MPI.Request.Waitany(reqs)
    left -= 1
if rank == 0:
    say("Igatherv", gv.tolist())
say("Iallgatherv", agv.tolist())
say("Iscatterv", scv.tolist())
say("Ialltoallv", a2av.tolist())
say("Ireduce_scatter", rs.tolist())

# Test-polling a single request, and a few rounds of the same Iallreduce
x = np.full(3, rank + 1.0)
y = np.zeros(3)
r = comm.Iallreduce(x, y, op=MPI.SUM)
while not r.Test():
    pass
say("Iallreduce Test", y.tolist())
total = 0
for i in range(20):
    out = np.zeros(1, "i8")
    comm.Iallreduce(np.array([i * (rank + 1)], "i8"), out, op=MPI.SUM).Wait()
    total += int(out[0])
say("Iallreduce rounds", total)

# in place, nonblocking
buf = np.full(2, rank, "i4")
comm.Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM).Wait()
say("Iallreduce IN_PLACE", buf.tolist())

# a nonblocking collective overlapping point-to-point traffic
src = np.full(4, float(rank))
dst = np.zeros(4)
coll = comm.Iallreduce(src, dst, op=MPI.SUM)
got = comm.sendrecv(rank, dest=(rank + 1) % size, source=(rank - 1) % size)
coll.Wait()
say("overlap", got, dst.tolist())
