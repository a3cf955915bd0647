# Single-copy transfers between the ranks of one host (Linux cross-memory
# attach: process_vm_readv). A large node bcast or allgather moves each
# byte once, from the owner's buffer straight into the reader's, where the
# slots of the node segment copy it twice (in, then out).
#
# One node step carries the addresses: each rank writes a head in its slot
# (pid, address and length of what it exposes, and whether it is willing),
# arrives at phase A and waits for all; the readers then copy with
# process_vm_readv (a bcast's root writes a share with process_vm_writev
# meanwhile, so that no core idles: one such call copies at ~8-11 GB/s
# here, where a memcpy does 13-40, the kernel pinning every 16 pages),
# note any failure in their control line (per step
# parity, as the fingerprints: a rank a step ahead never overwrites what a
# slower one still reads), and every rank arrives
# at phase B and waits for all (the owners' buffers must stay put until
# every reader is done, and all must see every failure alike).
#
# The kernel may refuse (EPERM: Yama ptrace_scope, a container without
# CAP_SYS_PTRACE, seccomp; ESRCH: a pid namespace of its own). Then every
# rank learns it from the control lines at phase B, marks the node
# (Node.cma = -1) and the call runs through the slots; later calls go there
# at once. GLOOCY_CMA=0 on any rank marks it at the first call that could
# copy once (its head says it is unwilling). Every rank enters a single-copy
# call alike: Node.cma changes only where all see it change, and the size
# threshold is the segment's. A rank that dies mid-copy is named by the
# phase-B wait (its connection hangs up).

cdef enum:
    # int64 words of a slot's head in a single-copy bcast or allgather
    CMA_PID = 0
    CMA_ADDR = 1
    CMA_LEN = 2
    CMA_WILLING = 3
    CMA_EXTRA = 4         # what else the call tells: a bcast root's piece,
                          # a reduce_scatter's digest of the counts
    CMA_PIECE = 256 << 10 # bytes a reduce_scatter reads before it reduces


cdef int cma_read(int64_t pid, int64_t addr, char *dst,
                  int64_t n) noexcept nogil:
    """n bytes at `addr` in process `pid` to dst: 0, or the errno."""
    return _cma_copy(pid, addr, dst, n, False)


cdef int cma_write(int64_t pid, int64_t addr, const char *src,
                   int64_t n) noexcept nogil:
    """n bytes from src to `addr` in process `pid`: 0, or the errno."""
    return _cma_copy(pid, addr, <char *>src, n, True)


cdef int _cma_copy(int64_t pid, int64_t addr, char *ours, int64_t n,
                   bint write) noexcept nogil:
    cdef iovec mine, theirs
    cdef ssize_t got
    while n > 0:
        mine.iov_base = ours
        mine.iov_len = <size_t>n
        theirs.iov_base = <void *><intptr_t>addr
        theirs.iov_len = <size_t>n
        if write:
            got = process_vm_writev(<int>pid, &mine, 1, &theirs, 1, 0)
        else:
            got = process_vm_readv(<int>pid, &mine, 1, &theirs, 1, 0)
        if got < 0:
            if errno == EINTR:
                continue
            return errno
        if got == 0:
            return EFAULT
        ours += got
        addr += got
        n -= got
    return 0


cdef inline int64_t *_cma_head(Node nd, int r) noexcept nogil:
    return <int64_t *>nd.slot(r)


cdef int _cma_publish(Context ctx, Coll *c, const char *addr,
                      int64_t n, int64_t extra=0) except -1 nogil:
    """The address step's first half: our head written, all arrived at A.
    1 if every rank is willing; else 0, the step done and the node marked
    (every rank saw the same heads)."""
    cdef int64_t *h
    cdef int j
    node_ready(ctx, c)
    h = _cma_head(ctx.node, ctx.rank)
    h[CMA_PID] = getpid()
    h[CMA_ADDR] = <int64_t><intptr_t>addr
    h[CMA_LEN] = n
    h[CMA_WILLING] = ctx.node.cma_willing
    h[CMA_EXTRA] = extra
    _cma_clear(ctx)
    node_step_in(ctx, c)
    node_spread(ctx.node)
    for j in range(ctx.node.size):
        if not _cma_head(ctx.node, j)[CMA_WILLING]:
            ctx.node.cma = -1
            ctx.node.step += 1
            return 0
    return 1


cdef inline void _cma_clear(Context ctx) noexcept nogil:
    """No failure yet in this step (before we arrive at its phase A)."""
    cdef int p = ctx.node.step & 1
    ctx.node.ctl[ctx.rank].cma_err[p] = 0
    ctx.node.ctl[ctx.rank].cma_peer[p] = -1


cdef inline void _cma_note(Context ctx, int peer, int err) noexcept nogil:
    """Record a failed read from `peer` (the first one) in our line."""
    cdef int p = ctx.node.step & 1
    if err and not ctx.node.ctl[ctx.rank].cma_err[p]:
        ctx.node.ctl[ctx.rank].cma_err[p] = err
        ctx.node.ctl[ctx.rank].cma_peer[p] = peer


cdef int _cma_finish(Context ctx, Coll *c, char *own=NULL,
                     const char *own_src=NULL, int64_t own_n=0) except -1 nogil:
    """The address step's second half: arrive at B, copy own_n bytes from
    own_src to `own` (a rank's own block, while the others finish), wait
    for all. 1 if every read worked; 0 if the kernel refused one (the node
    is marked: the caller runs the call through the slots); raises on
    other errors."""
    cdef int j, err = 0, who = -1, peer = -1, p = ctx.node.step & 1
    node_arrive(ctx, phase_b(ctx.node), c)
    if own_n > 0:
        copy_block(own, own_src, own_n, False)   # (late only unstreamed)
    node_wait(ctx, c, phase_b(ctx.node))
    for j in range(ctx.node.size):
        if ctx.node.ctl[j].cma_err[p]:
            err, who, peer = ctx.node.ctl[j].cma_err[p], j, ctx.node.ctl[j].cma_peer[p]
            break
    ctx.node.step += 1
    if err == 0:
        ctx.node.cma_calls += 1
        return 1
    if err in (EPERM, EACCES, ESRCH, ENOSYS):
        ctx.node.cma = -1             # every rank saw it: all fall back
        return 0
    return _raise_cma(ctx, c, err, who, peer)


cdef int node_bcast_cma(Context ctx, Coll *c, char *buf, int64_t nbytes,
                        int root) except -1 nogil:
    """Where every rank has a CPU of its own, every rank copies alike: the
    i-th non-root reads all but the i-th of n pieces from the root's buf,
    and the root writes each non-root its piece (process_vm_writev)
    meanwhile (at N = 2 the root copied nothing: one core did all the
    work). Where ranks outnumber CPUs, the non-roots read it all (the
    root's writes made it slower at N = 4 on 2 CPUs: 16 MiB in 10.5 vs
    5.7 ms). The root chooses the piece (0: none) and its head tells the
    others. 1 if done; 0: run node_bcast."""
    cdef int64_t *h
    cdef int64_t piece = 0, lo
    cdef int j, n = ctx.node.size, r = ctx.node.rank
    if r == root and n <= sysconf(_SC_NPROCESSORS_ONLN):
        piece = nbytes // n // 4096 * 4096  # whole pages: fewer pinned
    if not _cma_publish(ctx, c, buf, nbytes, piece):
        return 0
    piece = _cma_head(ctx.node, root)[CMA_EXTRA]
    if r == root:
        for j in range(n):
            if j != root and piece > 0:
                h = _cma_head(ctx.node, j)
                lo = (j - (j > root)) * piece
                _cma_note(ctx, j, cma_write(h[CMA_PID], h[CMA_ADDR] + lo,
                                            buf + lo, piece))
    else:
        h = _cma_head(ctx.node, root)
        lo = (r - (r > root)) * piece
        _cma_note(ctx, root, cma_read(h[CMA_PID], h[CMA_ADDR], buf, lo))
        _cma_note(ctx, root, cma_read(h[CMA_PID], h[CMA_ADDR] + lo + piece,
                                      buf + lo + piece, nbytes - lo - piece))
    return _cma_finish(ctx, c)


cdef int node_allgatherv_cma(Context ctx, Coll *c, char *buf,
                             const int64_t *offs,
                             const int64_t *sizes) except -1 nogil:
    """Ours already at buf + offs[rank]; each rank reads the others'
    blocks from their buffers. 1 if done; 0: run node_allgatherv."""
    cdef int64_t *h
    cdef int j, r = ctx.node.rank
    if not _cma_publish(ctx, c, buf + offs[r], sizes[r]):
        return 0
    for j in range(ctx.node.size):
        if j != r and sizes[j] > 0:
            h = _cma_head(ctx.node, j)
            _cma_note(ctx, j, cma_read(h[CMA_PID], h[CMA_ADDR], buf + offs[j],
                                       min(sizes[j], h[CMA_LEN])))
    return _cma_finish(ctx, c)


cdef int node_reduce_scatter_cma(Context ctx, Coll *c, const char *send,
                                 char *mine, const int64_t *offs,
                                 const int64_t *lens, int64_t total,
                                 uint64_t digest) except -1 nogil:
    """node_reduce_scatter in one step: `mine` holds our block of `send`;
    each rank reads its block of every other's `send` a piece at a time
    and reduces it onto `mine` (others in rank order). Two waits in all,
    where the slots wait once per slot's worth: when ranks outnumber
    cores each wait costs a switch. 1 if done; 0 (refused, `mine` to be
    restored): run through the slots."""
    cdef int n = ctx.node.size, r = ctx.node.rank, j, err = 0
    cdef int64_t isz = c.itemsize, per = max(CMA_PIECE // isz, 1), a, m
    cdef int64_t *h
    cdef char *tmp
    if not _cma_publish(ctx, c, send, total * isz, <int64_t>digest):
        return 0
    for j in range(n):
        if <uint64_t>_cma_head(ctx.node, j)[CMA_EXTRA] != digest:
            return _raise_node_counts(ctx, c, j)
    tmp = ctx.scratch(per * isz)
    a = 0
    while a < lens[r] and err == 0:
        m = min(per, lens[r] - a)
        for j in range(n):
            if j != r:
                h = _cma_head(ctx.node, j)
                err = cma_read(h[CMA_PID], h[CMA_ADDR] + (offs[r] + a) * isz,
                               tmp, m * isz)
                if err:
                    _cma_note(ctx, j, err)
                    break
                c.fn(mine + a * isz, tmp, m)
        a += m
    return _cma_finish(ctx, c)


cdef int cma_alltoallv(Context ctx, Coll *c, const int64_t *pids,
                       const int64_t *bases, const int64_t *soffs,
                       int64_t stride, char *recv, const int64_t *roffs,
                       const int64_t *rsizes, const int64_t *at,
                       const int64_t *done, char *own, const char *own_src,
                       int64_t own_n) except -1 nogil:
    """node_alltoallv after its first step, whose heads held each rank's
    pid (pids[j * stride]), send buffer (bases[j * stride]) and send
    offsets (soffs[j * stride + d]): each rank reads its block from every
    other's send buffer, less what the first step brought (rank j's block
    for us starts at byte at[j] of its stream, whose first done[j] bytes
    came). Our own block (own_n bytes from own_src to `own`, if any) is
    copied after the reads, while the others finish theirs. 1 if done; 0:
    go on through the slots."""
    cdef int j, r = ctx.node.rank
    cdef int64_t skip
    _cma_clear(ctx)
    node_spread(ctx.node)
    for j in range(ctx.node.size):
        skip = min(max(done[j] - at[j], 0), rsizes[j])
        if j != r and rsizes[j] > skip:
            _cma_note(ctx, j, cma_read(pids[j * stride],
                                       bases[j * stride] + soffs[j * stride + r] + skip,
                                       recv + roffs[j] + skip, rsizes[j] - skip))
    return _cma_finish(ctx, c, own, own_src, own_n)


cdef int cma_gatherv(Context ctx, Coll *c, const int64_t *pids,
                     const int64_t *bases, int64_t stride, char *recv,
                     const int64_t *offs, const int64_t *sizes,
                     int64_t done) except -1 nogil:
    """node_gatherv after its first step (heads: each rank's pid at
    pids[j * stride], its send buffer at bases[j * stride]; the step
    brought the first `done` bytes of each block): the root reads the rest
    of every block. 1 if done; 0: go on through the slots."""
    cdef int j, r = ctx.node.rank
    cdef int64_t skip
    _cma_clear(ctx)
    if r == c.proto.root:
        for j in range(ctx.node.size):
            skip = min(done, sizes[j])
            if j != r and sizes[j] > skip:
                _cma_note(ctx, j, cma_read(pids[j * stride], bases[j * stride] + skip,
                                           recv + offs[j] + skip, sizes[j] - skip))
    return _cma_finish(ctx, c)


cdef int cma_scatterv(Context ctx, Coll *c, int64_t pid, int64_t addr,
                      char *recv, int64_t recvn, int64_t skip) except -1 nogil:
    """node_scatterv after its first step: a non-root reads its block (at
    `addr` in the root, process `pid`) less the `skip` bytes the step
    brought. 1 if done; 0: the slots."""
    _cma_clear(ctx)
    if ctx.node.rank != c.proto.root and recvn > skip:
        _cma_note(ctx, c.proto.root, cma_read(pid, addr + skip, recv + skip,
                                              recvn - skip))
    return _cma_finish(ctx, c)


cdef int _raise_cma(Context ctx, Coll *c, int err, int who,
                    int peer) except -1 with gil:
    import os
    raise OSError(err, f"rank {ctx.rank}: in {describe_call(&c.proto)} rank "
                  f"{who} could not copy to or from rank {peer}'s memory "
                  f"(process_vm_readv/writev): {os.strerror(err)}")
