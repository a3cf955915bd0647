# A node segment of its own for a derived communicator (Dup, Split,
# Split_type, Create, Create_group) whose members all reach each other
# through shared memory: the node algorithms then serve it as they serve
# the world. Python name: share_node_segment. Context.begin calls it at
# the context's first collective (`node_wanted`), not at Dup.
#
# The lowest member makes a memfd segment; the others open it through
# /proc/<pid>/fd/<fd> (allowed between processes of one user, Yama or not:
# it needs ptrace's read mode, not attach), so nothing is ever named in
# /dev/shm and nothing is left behind if a rank dies. The pages go with
# the last mapping: Free drops the context, and the mapping with it.
# Where a member cannot open it, every member goes on without a segment
# (the pair algorithms), agreed by one allreduce. Both calls name their
# algorithm: a bad GLOOCY_ALGORITHM_* must fail the user's call, not Dup.

from array import array as _array


def share_node_segment(Context ctx, timeout=None):
    """Give ctx (just derived) a node segment if all its members are on
    one host and willing; collective over ctx. True if it got one."""
    import os
    from gloocy.transport import shm
    from gloocy.transport._shm import ShmPair
    if ctx.size < 2 or ctx.node is not None:
        return ctx.node is not None
    connector = ctx.links.connector
    if connector is None:                 # every pair made at start-up
        local = all(isinstance(p, ShmPair) for i, p in enumerate(ctx._pairs)
                    if i != ctx.rank)
    elif connector.all_local:             # every rank of the job on our host
        local = True
    else:
        local = _members_share_a_host(ctx, connector, timeout)
    info = _array("q", [0, -1, 0])        # maker's pid, its fd, slot bytes
    fd = -1
    if ctx.rank == 0 and local:
        try:
            chunk = shm.chunk_bytes(ctx.size)
            fd = new_node_segment(ctx.size, chunk)
            info[0], info[1], info[2] = os.getpid(), fd, chunk
        except (OSError, ValueError):
            fd = -1
    cdef Node node = None
    ok = _array("q", [0])
    try:
        ctx.bcast(info, 0, timeout, "binomial")
        if local and info[0] > 0:
            try:
                node = _open_shared_node(ctx, fd, info[0], info[1])
                ok[0] = 1
            except (OSError, ValueError):
                node = None
        ctx.allreduce(None, ok, OP_MIN, timeout, "recursive_doubling")
    finally:
        if fd >= 0:
            os.close(fd)
    if ok[0]:
        ctx.node = node
    return ctx.node is not None


def _members_share_a_host(Context ctx, connector, timeout):
    """With connections made on first use, where the job spans hosts: whether
    every member of ctx is on our host and willing to share memory (as
    their shared-memory pairs would say, without connecting them all), by
    one allreduce of the host's id: the same on every member, or not."""
    import hashlib
    from gloocy.transport import shm
    if connector.mode == "tcp":           # unwilling: a value of our own
        me = -1 - ctx._world[ctx.rank]
    else:
        me = int.from_bytes(hashlib.sha256(shm.host_identity().encode()).digest()[:7],
                            "little")
    ids = _array("q", [me, -me])          # min of both: the lowest and highest
    ctx.allreduce(None, ids, OP_MIN, timeout, "recursive_doubling")
    return ids[0] == -ids[1] == me and me >= 0


cdef Node _open_shared_node(Context ctx, int own_fd, int64_t pid, int64_t fd):
    """The segment rank 0 made (our own fd if we are rank 0), mapped."""
    import os
    if ctx.rank == 0:
        return Node(own_fd, 0, ctx.size)
    got = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
    try:
        return Node(got, ctx.rank, ctx.size)
    finally:
        os.close(got)
