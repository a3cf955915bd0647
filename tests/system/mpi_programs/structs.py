"""Structs that mix element types (the MPI-1 reference examples' patterns):
sizes and extents, a NumPy record array described by Create_struct sent
whole and received into a packed layout, vectors and resized structs of
them, Bcast/Gather/Allgather/Alltoall of records, and a struct received as
bytes."""
import numpy as np

from _world import MPI, comm, rank, say, size

right, left = (rank + 1) % size, (rank - 1) % size


def describe(t):
    return (t.size, t.lb, t.extent, t.true_lb, t.true_extent)


def struct_of(dtype):
    """The MPI struct of a NumPy record dtype (its fields at their offsets)."""
    names = dtype.names
    blens = [1] * len(names)
    disps = [dtype.fields[n][1] for n in names]
    types = [MPI._typedict[dtype.fields[n][0].char] for n in names]
    t = MPI.Datatype.Create_struct(blens, disps, types)
    return t.Create_resized(0, dtype.itemsize).Commit(), t


def records(dtype, n, salt):
    a = np.zeros(n, dtype)
    for i, name in enumerate(dtype.names):
        kind = dtype.fields[name][0]
        a[name] = (np.arange(n) * (i + 1) + salt).astype(kind)
    return a


def show(a):
    return [tuple(x.item() if hasattr(x, "item") else x for x in r)
            for r in a.tolist()]


# { (double, 0), (char, 8) } and friends: size, bounds, extent padding
pairs = [((1, 1), (0, 8), (MPI.DOUBLE, MPI.CHAR)),
         ((1, 1), (0, 4), (MPI.INT, MPI.SHORT)),
         ((2, 1), (0, 16), (MPI.FLOAT, MPI.DOUBLE)),
         ((1, 1, 1), (4, 12, 13), (MPI.INT, MPI.CHAR, MPI.SHORT)),
         ((1, 2), (0, 8), (MPI.DOUBLE_INT, MPI.CHAR))]
for blens, disps, types in pairs:
    t = MPI.Datatype.Create_struct(blens, disps, types)
    say("struct", describe(t), describe(t.Create_contiguous(3)),
        describe(t.Create_vector(3, 1, -2)),
        describe(t.Create_hindexed((3, 1), (4 * t.extent, 0))))
    t.Free()

# a record array with gaps (aligned fields), sent whole
rec = np.dtype([("x", "f8"), ("c", "i1"), ("n", "i4"), ("s", "i2")],
               align=True)
packed = np.dtype([("x", "f8"), ("c", "i1"), ("n", "i4"), ("s", "i2")])
t_rec, t_raw = struct_of(rec)
t_packed, _ = struct_of(packed)
say("record types", describe(t_rec), describe(t_raw), describe(t_packed))
src = records(rec, 5, 10 * rank)
dst = np.zeros(5, rec)
comm.Sendrecv([src, 5, t_rec], right, 1, [dst, 5, t_rec], left, 1)
say("Sendrecv records", show(dst))
# received into the packed layout: the same type signature
dst = np.zeros(5, packed)
comm.Sendrecv([src, 5, t_rec], right, 2, [dst, 5, t_packed], left, 2)
say("records -> packed", show(dst))
# and as bytes: MPI_BYTE receives the packed representation
raw = np.zeros(5 * t_rec.size, "u1")
comm.Sendrecv([src, 5, t_rec], right, 3, [raw, MPI.BYTE], left, 3)
say("records -> bytes", bytes(raw).hex() == dst.tobytes().hex())

# every second record (a vector of the struct)
every2 = t_rec.Create_vector(3, 1, 2).Commit()
src = records(rec, 6, rank)
dst = np.zeros(3, rec)
comm.Sendrecv([src, 1, every2], right, 4, [dst, 3, t_rec], left, 4)
say("vector of records", show(dst))

# collectives of records
buf = records(rec, 4, 100) if rank == 0 else np.zeros(4, rec)
comm.Bcast([buf, 4, t_rec], root=0)
say("Bcast records", show(buf))
got = np.zeros(2 * size, rec)
comm.Allgather([records(rec, 2, rank), 2, t_rec], [got, 2, t_rec])
say("Allgather records", show(got))
whole = np.zeros(size, rec) if rank == 0 else None
comm.Gather([records(rec, 1, 7 * rank), 1, t_rec],
            [whole, 1, t_rec] if rank == 0 else None, root=0)
if rank == 0:
    say("Gather records", show(whole))
out = np.zeros(size, rec)
comm.Alltoall([records(rec, size, 3 * rank), 1, t_rec], [out, 1, t_rec])
say("Alltoall records", show(out))

for t in (t_rec, t_raw, t_packed, every2):
    t.Free()

# BOTTOM: a struct of absolute addresses (Get_address) of two arrays
xs = np.arange(3, dtype="f8") + rank if rank == 0 else np.zeros(3)
ns = np.array([5, 6], "i4") * (rank + 1) if rank == 0 else np.zeros(2, "i4")
both = MPI.Datatype.Create_struct(
    [3, 2], [MPI.Get_address(xs), MPI.Get_address(ns)],
    [MPI.DOUBLE, MPI.INT]).Commit()
comm.Bcast([MPI.BOTTOM, 1, both], root=0)
say("Bcast at BOTTOM", xs.tolist(), ns.tolist())
both.Free()
# Alltoallw with byte displacements from BOTTOM: absolute addresses
send = np.arange(size, dtype="i4") + 100 * rank
recv = np.zeros(size, "i4")
item = MPI.INT.Get_size()
comm.Alltoallw(
    [MPI.BOTTOM, ([1] * size,
                  [MPI.Get_address(send) + item * i for i in range(size)]),
     [MPI.INT] * size],
    [MPI.BOTTOM, ([1] * size,
                  [MPI.Get_address(recv) + item * i for i in range(size)]),
     [MPI.INT] * size])
say("Alltoallw at BOTTOM", recv.tolist())
