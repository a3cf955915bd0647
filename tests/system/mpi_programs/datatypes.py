"""Derived datatypes: contiguous, vector, indexed_block, indexed, resized;
Commit/Free; used in Sendrecv, Send/Recv, Bcast and Gather."""
import numpy as np

from _world import MPI, comm, rank, say, size

right, left = (rank + 1) % size, (rank - 1) % size


def describe(t):
    return t.Get_size(), t.Get_extent()


# contiguous: 3 ints as one element; send 2 elements = 6 ints
tri = MPI.INT.Create_contiguous(3).Commit()
say("contiguous", describe(tri))
src = np.arange(8, dtype="i4") + 10 * rank
dst = np.full(8, -1, "i4")
comm.Sendrecv([src, 2, tri], dest=right, recvbuf=[dst, 2, tri], source=left)
say("contiguous Sendrecv", dst.tolist())
# received as plain ints on the other side
dst = np.full(8, -1, "i4")
comm.Sendrecv([src, 1, tri], dest=right, recvbuf=[dst, 3, MPI.INT], source=left)
say("contiguous -> INT", dst.tolist())

# vector: 3 blocks of 2 ints, stride 4 (a strided view of a 3x4 matrix)
vec = MPI.INT.Create_vector(3, 2, 4).Commit()
say("vector", describe(vec))
m = np.arange(12, dtype="i4").reshape(3, 4) + 100 * rank
dst = np.full(6, -1, "i4")
comm.Sendrecv([m, 1, vec], dest=right, recvbuf=[dst, 6, MPI.INT], source=left)
say("vector -> INT", dst.tolist())
# and the reverse: contiguous ints scattered into the strided layout
into = np.full((3, 4), -1, "i4")
comm.Sendrecv([np.arange(6, dtype="i4") + rank, 6, MPI.INT], dest=right,
              recvbuf=[into, 1, vec], source=left)
say("INT -> vector", into.tolist())

# indexed_block: blocks of 2 doubles at displacements 0, 5, 9
ib = MPI.DOUBLE.Create_indexed_block(2, [0, 5, 9]).Commit()
say("indexed_block", describe(ib))
buf = np.arange(11, dtype="f8") * 0.5 if rank == 0 else np.full(11, -1.0)
comm.Bcast([buf, 1, ib], root=0)
say("indexed_block Bcast", buf.tolist())

# indexed: blocks of lengths 1, 3, 2 at displacements 0, 2, 8
ix = MPI.INT.Create_indexed([1, 3, 2], [0, 2, 8]).Commit()
say("indexed", describe(ix))
mine = np.arange(10, dtype="i4") + 1000 * rank
out = np.full((size, 6), -1, "i4") if rank == 0 else None
comm.Gather([mine, 1, ix], [out, 6, MPI.INT] if rank == 0 else None, root=0)
if rank == 0:
    say("indexed Gather", out.tolist())
# the root receives into an indexed layout per rank via a contiguous vector of ix
if size >= 2:
    if rank == 1:
        comm.Send([np.arange(6, dtype="i4") * -1, 6, MPI.INT], dest=0, tag=3)
    elif rank == 0:
        got = np.zeros(10, "i4")
        st = MPI.Status()
        comm.Recv([got, 1, ix], source=1, tag=3, status=st)
        say("Recv into indexed", got.tolist(), st.Get_count(ix), st.Get_elements(MPI.INT))

# resized column type: gather one matrix column per rank into root's matrix
rows = 3
col = MPI.DOUBLE.Create_vector(rows, 1, size)
colr = col.Create_resized(0, MPI.DOUBLE.Get_size()).Commit()
say("resized", describe(colr))
mycol = np.arange(rows, dtype="f8") + rank / 10
mat = np.full((rows, size), -1.0) if rank == 0 else None
comm.Gather(mycol, [mat, 1, colr] if rank == 0 else None, root=0)
if rank == 0:
    say("column Gather", np.round(mat, 6).tolist())

# Bcast of a vector type and of two contiguous elements
m = np.arange(12, dtype="i4").reshape(3, 4) if rank == size - 1 else np.zeros((3, 4), "i4")
comm.Bcast([m, 1, vec], root=size - 1)
say("vector Bcast", m.tolist())
t = np.arange(6, dtype="i4") * 2 if rank == 0 else np.zeros(6, "i4")
comm.Bcast([t, 2, tri], root=0)
say("contiguous Bcast", t.tolist())

# Free turns the handle into DATATYPE_NULL; predefined types are untouched
for name, t in [("tri", tri), ("vec", vec), ("ib", ib), ("ix", ix), ("col", col), ("colr", colr)]:
    t.Free()
    say("freed", name, t == MPI.DATATYPE_NULL)
say("INT still valid", MPI.INT.Get_size(), MPI.INT != MPI.DATATYPE_NULL)

# many create/commit/free cycles
total = 0
for k in range(1, 50):
    t = MPI.BYTE.Create_contiguous(k).Commit()
    total += t.Get_size()
    t.Free()
say("create/free cycles", total)
