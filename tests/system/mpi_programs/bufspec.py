"""Every buffer-specification form mpi4py accepts, in point-to-point and
collectives: [buf, type], counts, displacements, typecodes, vector forms,
MPI.IN_PLACE, None on non-roots, and non-NumPy buffers."""
import array
import numpy as np

from _world import MPI, comm, rank, say, size

right, left = (rank + 1) % size, (rank - 1) % size


def ring(sendspec, recvspec, out):
    """Send sendspec to the right, receive recvspec from the left; show out."""
    comm.Sendrecv(sendspec, dest=right, sendtag=1, recvbuf=recvspec, source=left, recvtag=1)
    return out.tolist()


src = np.arange(8, dtype="i4") + 100 * rank

# --- single-message forms (point-to-point)
dst = np.full(8, -1, "i4")
say("buf", ring(src, dst, dst))
dst = np.full(8, -1, "i4")
say("[buf, type]", ring([src, MPI.INT], [dst, MPI.INT], dst))
dst = np.full(8, -1, "i4")
say("(buf, type) tuple", ring((src, MPI.INT), (dst, MPI.INT), dst))
dst = np.full(8, -1, "i4")
say("[buf, count, type]", ring([src, 3, MPI.INT], [dst, 3, MPI.INT], dst))
dst = np.full(8, -1, "i4")
say("[buf, (count, displ), type]", ring([src, (3, 2), MPI.INT], [dst, (3, 4), MPI.INT], dst))
dst = np.full(8, -1, "i4")
say("[buf, count, displ, type]", ring([src, 2, 5, MPI.INT], [dst, 2, 1, MPI.INT], dst))
dst = np.full(8, -1, "i4")
say("[buf, count]", ring([src, 4], [dst, 4], dst))
dst = np.full(8, -1, "i4")
say("[buf, (count, displ)]", ring([src, (2, 3)], [dst, (2, 0)], dst))

# typecode strings instead of datatypes
dst = np.full(8, -1, "i4")
say("[buf, 'i']", ring([src, "i"], [dst, "i"], dst))
d8 = np.arange(4, dtype="f8") / 4 + rank
o8 = np.zeros(4)
say("[buf, 2, 'd']", ring([d8, 2, "d"], [o8, 2, "d"], o8))
l8 = np.arange(4, dtype="i8") - rank
ol = np.zeros(4, "i8")
say("[buf, (2, 1), 'l']", ring([l8, (2, 1), "l"], [ol, (2, 1), "l"], ol))
f4 = np.arange(3, dtype="f4") * 0.5
of = np.zeros(3, "f4")
say("[buf, 'f'] / 'f4'", ring([f4, "f"], [of, "f4"], of))
b1 = np.array([rank % 2 == 0, True, False])
ob = np.zeros(3, "?")
say("[buf, '?']", ring([b1, "?"], [ob, "?"], ob))

# the receiving side may name the type differently from the sender
raw = bytearray(16)
comm.Sendrecv([src, 4, MPI.INT], dest=right, recvbuf=[raw, MPI.INT], source=left)
say("bytearray as INT", np.frombuffer(raw, "i4").tolist())

# non-NumPy buffers: bytearray, array.array, memoryview, bytes (send side)
ba = bytearray(b"rank%d" % rank)
ob = bytearray(5)
comm.Sendrecv(ba, dest=right, recvbuf=ob, source=left)
say("bytearray", bytes(ob))
aa = array.array("d", [rank + 0.25, rank + 0.5])
oa = array.array("d", [0.0, 0.0])
comm.Sendrecv(aa, dest=right, recvbuf=oa, source=left)
say("array.array", oa.tolist())
mv = memoryview(np.arange(10, dtype="i2") * (rank + 1))[2:6]
om = np.zeros(4, "i2")
comm.Sendrecv(mv, dest=right, recvbuf=om, source=left)
say("memoryview slice", om.tolist())
ob = bytearray(3)
comm.Sendrecv(b"%03d" % rank, dest=right, recvbuf=ob, source=left)
say("bytes", bytes(ob))
# a 2-D array, a contiguous slice and numpy scalars-as-arrays
m = np.arange(6, dtype="u2").reshape(2, 3) + rank
om = np.zeros((2, 3), "u2")
comm.Sendrecv(m, dest=right, recvbuf=om, source=left)
say("2-D", om.tolist())
om = np.zeros(3, "u2")
comm.Sendrecv(m[1], dest=right, recvbuf=om, source=left)
say("row slice", om.tolist())

# --- collectives with the same forms
b = np.arange(6, dtype="f8") if rank == 0 else np.zeros(6)
comm.Bcast([b, (3, 2), MPI.DOUBLE], root=0)
say("Bcast [buf, (3, 2), DOUBLE]", b.tolist())
b = np.arange(6, dtype="i4") * 7 if rank == 0 else np.zeros(6, "i4")
comm.Bcast([b, 4, "i"], root=0)
say("Bcast [buf, 4, 'i']", b.tolist())
out = np.zeros(4, "i8")
comm.Allreduce([np.arange(6, dtype="i8") + rank, 4, MPI.INT64_T], [out, 4, MPI.INT64_T], op=MPI.SUM)
say("Allreduce counted", out.tolist())
out = np.zeros(3, "f8")
comm.Allreduce([np.full(5, rank + 0.5), (3, 2), "d"], out, op=MPI.SUM)
say("Allreduce displ", out.tolist())

# in the block collectives an explicit count is per rank, a displacement
# moves the whole message (both counted in elements)
out = np.full(3 * size + 2, -1, "i4") if rank == 0 else None
comm.Gather(np.full(2, rank + 1, "i4"), [out, 2, MPI.INT] if rank == 0 else None, root=0)
if rank == 0:
    say("Gather [buf, 2, type]", out.tolist())
out = np.full(3 * size + 2, -1, "i4") if rank == 0 else None
comm.Gather(np.full(2, rank + 1, "i4"), [out, (2, 1), MPI.INT] if rank == 0 else None, root=0)
if rank == 0:
    say("Gather [buf, (2, 1), type]", out.tolist())
out = np.full(3 * size, -1, "i4")
comm.Allgather([np.full(3, rank, "i4"), 2, MPI.INT], [out, 2, MPI.INT])
say("Allgather counted", out.tolist())
src_ = np.arange(3 * size + 2, dtype="i4") * 2
got = np.full(3, -1, "i4")
comm.Scatter([src_, 2, MPI.INT], [got, 2, MPI.INT], root=0)
say("Scatter [buf, 2, type]", got.tolist())
got = np.full(3, -1, "i4")
comm.Scatter([src_, 2, 3, MPI.INT], [got, 2, MPI.INT], root=0)
say("Scatter [buf, 2, 3, type]", got.tolist())
out = np.full(2 * size, -1, "i4")
comm.Alltoall([np.arange(2 * size, dtype="i4") + 100 * rank, 1, MPI.INT], [out, 1, MPI.INT])
say("Alltoall counted", out.tolist())

# --- vector forms (Gatherv at root 0): rank r sends r+1 ints
counts = [r + 1 for r in range(size)]
displs = [2 * sum(counts[:r]) for r in range(size)]  # gaps between blocks
n = 2 * sum(counts)
mine = np.arange(rank + 1, dtype="i4") + 10 * rank


def gv(recvspec_of, label):
    out = np.full(n, -1, "i4")
    comm.Gatherv(mine, recvspec_of(out) if rank == 0 else None, root=0)
    if rank == 0:
        say(label, out.tolist())


dense = [sum(counts[:r]) for r in range(size)]
gv(lambda o: [o, counts], "Gatherv [buf, counts]")
gv(lambda o: [o, (counts, None)], "Gatherv [buf, (counts, None)]")
gv(lambda o: [o, (counts, displs)], "Gatherv [buf, (counts, displs)]")
gv(lambda o: [o, counts, MPI.INT], "Gatherv [buf, counts, type]")
gv(lambda o: [o, (counts, displs), MPI.INT], "Gatherv [buf, (counts, displs), type]")
gv(lambda o: [o, counts, displs, MPI.INT], "Gatherv [buf, counts, displs, type]")
gv(lambda o: [o, counts, dense, "i"], "Gatherv [buf, counts, displs, 'i']")
gv(lambda o: [o, counts, None, MPI.INT], "Gatherv [buf, counts, None, type]")

# equal counts implied by the buffer size
out = np.zeros(3 * size, "i4") if rank == 0 else None
comm.Gatherv(np.arange(3, dtype="i4") + rank, out, root=0)
if rank == 0:
    say("Gatherv buf only", out.tolist())
out = np.zeros(2 * size, "i4") if rank == 0 else None
comm.Gatherv(np.full(2, rank, "i4"), [out, MPI.INT] if rank == 0 else None, root=0)
if rank == 0:
    say("Gatherv [buf, type]", out.tolist())

# Scatterv / Allgatherv / Alltoallv with vector forms
sv = np.arange(n, dtype="f8") if rank == 0 else None
got = np.zeros(rank + 1)
comm.Scatterv([sv, (counts, displs), MPI.DOUBLE] if rank == 0 else None, got, root=0)
say("Scatterv (counts, displs)", got.tolist())
got = np.zeros(rank + 1)
comm.Scatterv([sv, counts] if rank == 0 else None, [got, MPI.DOUBLE], root=0)
say("Scatterv [buf, counts]", got.tolist())
out = np.full(n, -1, "i4")
comm.Allgatherv([mine, MPI.INT], [out, counts, displs, MPI.INT])
say("Allgatherv gaps", out.tolist())
out = np.full(sum(counts), -1, "i4")
comm.Allgatherv(mine, [out, counts])
say("Allgatherv [buf, counts]", out.tolist())
sc = [1] * size
out = np.zeros(size, "i4")
comm.Alltoallv([np.arange(size, dtype="i4") * (rank + 1), sc], [out, (sc, None)])
say("Alltoallv [buf, counts]", out.tolist())
out = np.zeros(2 * size, "i8")
comm.Alltoallv([np.arange(2 * size, dtype="i8") + rank, ([2] * size, None), "q"],
               [out, [2] * size, [2 * d for d in range(size)], "q"])
say("Alltoallv typecode/displs", out.tolist())

# --- MPI.IN_PLACE
buf = np.arange(4, dtype="i4") + rank
comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
say("Allreduce IN_PLACE", buf.tolist())
buf = np.arange(3, dtype="f8") * (rank + 1)
comm.Allreduce(MPI.IN_PLACE, [buf, MPI.DOUBLE], op=MPI.MAX)
say("Allreduce IN_PLACE spec", buf.tolist())
buf = np.full(3, rank + 1, "i8")
if rank == 0:
    comm.Reduce(MPI.IN_PLACE, buf, op=MPI.PROD, root=0)
    say("Reduce IN_PLACE root", buf.tolist())
else:
    comm.Reduce(buf, None, op=MPI.PROD, root=0)
g = np.full((size, 2), -1, "i4")
g[rank] = [rank, rank * 2]
if rank == 0:
    comm.Gather(MPI.IN_PLACE, g, root=0)
    say("Gather IN_PLACE root", g.tolist())
else:
    comm.Gather(g[rank], None, root=0)
if rank == 0:
    out = np.full(n, -1, "i4")
    out[displs[0]:displs[0] + 1] = mine
    comm.Gatherv(MPI.IN_PLACE, [out, counts, displs, MPI.INT], root=0)
    say("Gatherv IN_PLACE root", out.tolist())
else:
    comm.Gatherv(mine, None, root=0)
s = np.arange(size * 2, dtype="i4").reshape(size, 2) * 3
if rank == 0:
    comm.Scatter(s, MPI.IN_PLACE, root=0)
    say("Scatter IN_PLACE root", s.tolist())
else:
    got = np.zeros(2, "i4")
    comm.Scatter(None, got, root=0)
    say("Scatter None sendbuf", got.tolist())
if rank == 0:
    comm.Scatterv([np.arange(n, dtype="f8"), counts, displs, MPI.DOUBLE], MPI.IN_PLACE, root=0)
else:
    got = np.zeros(rank + 1)
    comm.Scatterv(None, got, root=0)
    say("Scatterv None sendbuf", got.tolist())
ag = np.full((size, 3), -1, "i4")
ag[rank] = rank + 5
comm.Allgather(MPI.IN_PLACE, ag)
say("Allgather IN_PLACE", ag.tolist())
agv = np.full(sum(counts), -1, "i4")
agv[dense[rank]:dense[rank] + counts[rank]] = mine
comm.Allgatherv(MPI.IN_PLACE, [agv, counts, dense, MPI.INT])
say("Allgatherv IN_PLACE", agv.tolist())
a2a = np.arange(size, dtype="i4") + 10 * rank
comm.Alltoall(MPI.IN_PLACE, a2a)
say("Alltoall IN_PLACE", a2a.tolist())
sc = np.arange(3, dtype="i4") + rank
comm.Scan(MPI.IN_PLACE, sc, op=MPI.SUM)
say("Scan IN_PLACE", sc.tolist())
ex = np.arange(3, dtype="i4") + rank
comm.Exscan(MPI.IN_PLACE, ex, op=MPI.SUM)
if rank > 0:
    say("Exscan IN_PLACE", ex.tolist())
rsb = np.arange(2 * size, dtype="i4") * (rank + 1)
comm.Reduce_scatter_block(MPI.IN_PLACE, rsb, op=MPI.SUM)
say("Reduce_scatter_block IN_PLACE", rsb[:2].tolist())
rs = np.arange(sum(counts), dtype="i4") + rank
comm.Reduce_scatter(MPI.IN_PLACE, rs, recvcounts=counts, op=MPI.SUM)
say("Reduce_scatter IN_PLACE", rs[:rank + 1].tolist())

# --- receive buffers that are None on non-roots
out = np.zeros(2, "f8") if rank == size - 1 else None
comm.Reduce(np.array([rank, 1.5]), out, op=MPI.SUM, root=size - 1)
if rank == size - 1:
    say("Reduce None elsewhere", out.tolist())
out = np.zeros((size, 2), "i4") if rank == size - 1 else None
comm.Gather(np.array([rank, -rank], "i4"), out, root=size - 1)
if rank == size - 1:
    say("Gather None elsewhere", out.tolist())
src_ = np.arange(size, dtype="i4") * 11 if rank == size - 1 else None
got = np.zeros(1, "i4")
comm.Scatter(src_, got, root=size - 1)
say("Scatter None elsewhere", got.tolist())
say("IN_PLACE is not BOTTOM", MPI.IN_PLACE is not MPI.BOTTOM)
