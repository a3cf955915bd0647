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
#
# With connections made on first use, every rank of the job on our host and
# more than NODE_BCAST_TREE_MAX_RANKS members, the offer and the agreement
# go through the job's store instead (a few operations per member,
# _share_by_store): over pairs, a binomial tree and a recursive doubling
# would connect about 3 pairs per member, which for a Split of 4,096 rank
# threads of one process into 64 groups was ~12,000 shared-memory pairs
# (two sockets and two mappings each) in that process. Not for smaller
# communicators: a store's client serves one request at a time, so a member
# waiting in it would hold up the store calls of the other communicators
# its process sets up at the same time (Dups from several threads), and a
# collective called by one member alone would end at the store's wait.

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
        if ctx.size > NODE_BCAST_TREE_MAX_RANKS:
            return _share_by_store(ctx, connector, ctx.seconds(timeout))
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


def _share_by_store(Context ctx, connector, double timeout):
    """share_node_segment where every member is on our host, through the
    store: member 0 offers the segment (its pid and fd; 0 0 0 if it could
    not make one) under a key of this communicator; each member opens it
    and counts itself in, with 1 if it could and 2**32 if not; the member
    that completes the count writes the verdict; the last one to read the
    verdict deletes the keys. No pair is connected."""
    import os
    import time
    from gloocy.transport import shm
    store = connector.store
    key = f"{connector.job}/node/{ctx.comm_id}/{ctx._world[0]}"
    deadline = time.monotonic() + timeout
    fd = -1
    cdef Node node = None
    cdef int64_t pid = 0, theirs = -1, chunk = 0
    try:
        if ctx.rank == 0:
            try:
                chunk = shm.chunk_bytes(ctx.size)
                fd = new_node_segment(ctx.size, chunk)
                pid = os.getpid()
            except (OSError, ValueError):
                fd = -1
            store.set(f"{key}/offer", f"{pid} {fd} {chunk}".encode())
        else:
            pid, theirs, chunk = map(int, _store_wait(
                store, f"{key}/offer", deadline, ctx, "member 0's offer").split())
        if pid > 0:
            try:
                node = _open_shared_node(ctx, fd, pid, theirs)
            except (OSError, ValueError):
                node = None
        counted = store.add(f"{key}/count", 1 if node is not None else 1 << 32)
        if counted & 0xFFFFFFFF == ctx.size:
            store.set(f"{key}/verdict", b"1" if counted >> 32 == 0 else b"0")
        ok = _store_wait(store, f"{key}/verdict", deadline, ctx,
                         "the count of members that opened it") == b"1"
    finally:
        if fd >= 0:
            os.close(fd)
    if store.add(f"{key}/read", 1) == ctx.size:
        for part in ("offer", "count", "verdict", "read"):
            store.delete(f"{key}/{part}")
    if ok:
        ctx.node = node
    return ctx.node is not None


def _store_wait(store, key, double deadline, Context ctx, what):
    """store.get until the deadline, naming what we waited for."""
    import time
    from gloocy.errors import RendezvousTimeout
    try:
        return store.get(key, timeout=max(deadline - time.monotonic(), 0.001))
    except RendezvousTimeout:
        raise RendezvousTimeout(
            f"rank {ctx.rank} of communicator {ctx.comm_id}: {what} for its "
            "node segment did not come before the deadline (a member "
            "missing, or stopped)") from None


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
