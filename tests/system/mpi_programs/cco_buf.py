"""Buffer (upper-case) collectives on NumPy arrays: every root, several dtypes."""
import numpy as np

from _world import MPI, comm, rank, say, size


def show(a):
    return np.round(a, 6).tolist()


comm.Barrier()
say("barrier done")

DTYPES = ["i4", "i8", "u1", "f4", "f8", "c16"]

for dt in DTYPES:
    # values that stay exact in every dtype (small, integer-valued)
    mine = (np.arange(5) + 2 * rank + 1).astype(dt)

    for root in range(size):
        buf = mine.copy() if rank == root else np.zeros(5, dt)
        comm.Bcast(buf, root=root)
        say(dt, "Bcast root", root, show(buf))

        out = np.zeros(5, dt) if rank == root else None
        comm.Reduce(mine, out, op=MPI.SUM, root=root)
        if rank == root:
            say(dt, "Reduce root", root, show(out))

        out = np.zeros((size, 5), dt) if rank == root else None
        comm.Gather(mine, out, root=root)
        if rank == root:
            say(dt, "Gather root", root, show(out))

        send = np.arange(size * 3).reshape(size, 3).astype(dt) + root if rank == root else None
        got = np.zeros(3, dt)
        comm.Scatter(send, got, root=root)
        say(dt, "Scatter root", root, show(got))

    for op in (MPI.SUM, MPI.MAX, MPI.MIN, MPI.PROD):
        if dt == "c16" and op in (MPI.MAX, MPI.MIN):
            continue  # no ordering on complex numbers
        out = np.zeros(5, dt)
        comm.Allreduce(mine, out, op=op)
        say(dt, "Allreduce", op == MPI.SUM, op == MPI.MAX, op == MPI.MIN, show(out))

    out = np.zeros((size, 5), dt)
    comm.Allgather(mine, out)
    say(dt, "Allgather", show(out))

    send = (np.arange(size * 2) + 10 * rank).astype(dt)
    out = np.zeros(size * 2, dt)
    comm.Alltoall(send, out)
    say(dt, "Alltoall", show(out))

    out = np.zeros(5, dt)
    comm.Scan(mine, out, op=MPI.SUM)
    say(dt, "Scan", show(out))

    out = np.full(5, 99, dt)
    comm.Exscan(mine, out, op=MPI.SUM)
    if rank > 0:  # rank 0's Exscan result is undefined
        say(dt, "Exscan", show(out))

    send = (np.arange(size * 2) + rank).astype(dt)
    out = np.zeros(2, dt)
    comm.Reduce_scatter_block(send, out, op=MPI.SUM)
    say(dt, "Reduce_scatter_block", show(out))

# v-variants: rank r contributes r+1 items
counts = [r + 1 for r in range(size)]
displs = [sum(counts[:r]) for r in range(size)]
total = sum(counts)
mine = np.arange(rank + 1, dtype="f8") + 100 * rank

for root in range(size):
    out = np.zeros(total) if rank == root else None
    comm.Gatherv(mine, [out, counts, displs, MPI.DOUBLE] if rank == root else None, root=root)
    if rank == root:
        say("Gatherv root", root, show(out))

    send = np.arange(total, dtype="f8") * (root + 1) if rank == root else None
    got = np.zeros(rank + 1)
    comm.Scatterv([send, counts, displs, MPI.DOUBLE] if rank == root else None, got, root=root)
    say("Scatterv root", root, show(got))

out = np.zeros(total)
comm.Allgatherv(mine, [out, counts, displs, MPI.DOUBLE])
say("Allgatherv", show(out))

# Alltoallv: rank r sends (d+1) items to rank d, receives (r+1) items from each
scounts = [d + 1 for d in range(size)]
sdispls = [sum(scounts[:d]) for d in range(size)]
send = np.arange(sum(scounts), dtype="i4") + 1000 * rank
rcounts = [rank + 1] * size
rdispls = [s * (rank + 1) for s in range(size)]
out = np.zeros(sum(rcounts), "i4")
comm.Alltoallv([send, scounts, sdispls, MPI.INT], [out, rcounts, rdispls, MPI.INT])
say("Alltoallv", out.tolist())

# Reduce_scatter with uneven counts
rs_counts = [r + 1 for r in range(size)]
send = np.arange(sum(rs_counts), dtype="i8") * (rank + 1)
out = np.zeros(rank + 1, "i8")
comm.Reduce_scatter(send, out, recvcounts=rs_counts, op=MPI.SUM)
say("Reduce_scatter", out.tolist())

# a larger message (beyond any eager limit), 2-D array
big = np.arange(300_000, dtype="f8").reshape(600, 500) * (rank + 1)
out = np.empty_like(big)
comm.Allreduce(big, out, op=MPI.SUM)
say("big Allreduce checksum", round(float(out.sum()), 3), out.shape)
big2 = big.copy() if rank == 0 else np.zeros_like(big)
comm.Bcast(big2, root=0)
say("big Bcast equal", bool(np.array_equal(big2, np.arange(300_000, dtype="f8").reshape(600, 500))))

# zero-length buffers
z = np.zeros(0, "i4")
comm.Bcast(z, root=0)
zo = np.zeros(0, "i4")
comm.Allreduce(z, zo, op=MPI.SUM)
say("zero-length ok", zo.size)
