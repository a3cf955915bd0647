"""The calls bench/hosts.py times, shared by gloocy's ranks and mpi4py's
(it imports only NumPy): one call of a collective moving `nbytes`.

Sizes: allreduce and bcast, the buffer; the others, the whole of what the
ranks' blocks add up to (each rank's block: nbytes / ranks): allgather and
gather the gathered total, scatter the scattered one, alltoall each rank's
send buffer, reduce_scatter each rank's input.
"""

import numpy as np

COLLECTIVES = ("allreduce", "bcast", "allgather", "alltoall", "gather",
               "scatter", "reduce_scatter")


def calls_of(MPI, comm, coll, nbytes, root=0, **kw):
    """A function making one call of `coll` on float64 buffers (`root`:
    of the rooted ones); `kw`: the call's keywords (gloocy's algorithm=)."""
    whole = np.ones(max(nbytes // 8, 1))            # allreduce, bcast
    n = max(nbytes // 8 // comm.size, 1)            # one block
    x = np.ones(n * comm.size)
    out = np.empty(n * comm.size)
    calls = {
        "allreduce": lambda: comm.Allreduce(MPI.IN_PLACE, whole, **kw),
        "bcast": lambda: comm.Bcast(whole, root=root, **kw),
        "allgather": lambda: comm.Allgather(x[:n], out, **kw),
        "alltoall": lambda: comm.Alltoall(x, out, **kw),
        "gather": lambda: comm.Gather(x[:n], out, root=root, **kw),
        "scatter": lambda: comm.Scatter(x, out[:n], root=root, **kw),
        "reduce_scatter": lambda: comm.Reduce_scatter_block(x, out[:n], **kw),
    }
    return calls[coll]
