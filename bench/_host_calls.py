"""The calls bench/hosts.py times, shared by gloocy's ranks, mpi4py's and
torch's (it imports only NumPy): one call of a collective moving `nbytes`.

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


def torch_calls_of(torch, dist, coll, nbytes, root=0):
    """The same call on torch.distributed (default group, float64 tensors
    sharing the NumPy buffers), mapped as gloocy-bench's torch-gloo adapter
    maps them (gloocy/bench/impls.py, TorchGlooImpl): all_reduce, broadcast,
    all_gather_single (else all_gather_into_tensor), reduce_scatter_single
    (else reduce_scatter_tensor), all_to_all_single. That adapter has no
    gather or scatter: here they are dist.gather / dist.scatter with the
    root's list of blocks as views of one buffer (gloo has both)."""
    size, rank = dist.get_world_size(), dist.get_rank()
    whole = torch.from_numpy(np.ones(max(nbytes // 8, 1)))
    n = max(nbytes // 8 // size, 1)
    x = torch.from_numpy(np.ones(n * size))
    out = torch.from_numpy(np.empty(n * size))
    allgather = getattr(dist, "all_gather_single", None) \
        or dist.all_gather_into_tensor
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) \
        or dist.reduce_scatter_tensor
    blocks_out = list(out.split(n)) if rank == root else None
    blocks_x = list(x.split(n)) if rank == root else None
    calls = {
        "allreduce": lambda: dist.all_reduce(whole),
        "bcast": lambda: dist.broadcast(whole, src=root),
        "allgather": lambda: allgather(out, x[:n]),
        "alltoall": lambda: dist.all_to_all_single(out, x),
        "gather": lambda: dist.gather(x[:n], blocks_out, dst=root),
        "scatter": lambda: dist.scatter(out[:n], blocks_x, src=root),
        "reduce_scatter": lambda: reduce_scatter(out[:n], x),
    }
    return calls[coll]
