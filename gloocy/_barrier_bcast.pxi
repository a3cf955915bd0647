# Barrier and broadcast: Context.barrier and Context.bcast (call_*), and
# their algorithms: a barrier by recursive doubling (an allreduce of
# nothing) or dissemination; a pipelined binomial tree, a pipelined chain
# and scatter + ring allgather for bcast (the node segment's are in _node.pxi).


cdef enum:
    MAX_CHILDREN = 64


cdef object call_barrier(Context ctx, object timeout, object algorithm=None):
    cdef Coll c
    cdef int algo = _algorithm("barrier", algorithm, ctx.env_algorithms)
    if ctx.size == 1:                   # nobody to wait for
        ctx.seconds(timeout)            # but a bad call is still an error
        return
    algo = two_level(ctx, algo, 0, -1, timeout, True)
    if algo == ALGO_TWO_LEVEL:
        return hier_barrier(ctx, timeout)
    # begin first: a derived context makes its node segment there, at its
    # first collective. "auto" then runs in the segment wherever there is
    # one; a forced "shm" without one falls back to the pairs' automatic
    # choice, as node_choice does for the other collectives.
    ctx.begin(&c, KIND_BARRIER, OP_NONE, DT_BYTES, -1, 0, timeout)
    try:
        if ctx.node is not None and (algo == ALGO_AUTO or algo == ALGO_SHM):
            ctx.last_algorithm = "shm"
            with nogil:
                node_barrier(ctx, &c)
            ctx.sweep(&c)
        else:
            if algo == ALGO_AUTO or algo == ALGO_SHM:
                algo = ALGO_RECURSIVE_DOUBLING
            ctx.last_algorithm = ALGORITHM_NAMES[algo]
            with nogil:
                run_barrier(ctx, &c, algo)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()


cdef object call_bcast(Context ctx, object buf, int root, object timeout,
                       object algorithm):
    cdef Coll c
    cdef bint beside
    ctx._check_root(root)
    cdef Buf b = get_buffer(buf, "buf", ctx.rank != root)
    cdef int algo = two_level(ctx, _algorithm("bcast", algorithm,
                                              ctx.env_algorithms), b.nbytes,
                              AUTO_TWO_LEVEL_BCAST_MIN, timeout)
    if algo == ALGO_TWO_LEVEL:
        return hier_bcast(ctx, b, root, timeout)
    ctx.begin(&c, KIND_BCAST, OP_NONE, DT_BYTES, root, b.nbytes, timeout)
    try:
        algo = node_choice(ctx, algo, b.nbytes, NODE_BCAST_MIN if ctx.node is None
                           else node_bcast_min(ctx.node.bcast_cma_min,
                                                ctx.size))
        if algo == ALGO_SHM:
            ctx.last_algorithm = "shm"
            with nogil:
                node_bcast(ctx, &c, b.ptr, b.nbytes, root)
            ctx.sweep(&c)
            return
        algo = pick_bcast(ctx, b.nbytes, algo)
        ctx.last_algorithm = ALGORITHM_NAMES[algo]
        beside = ctx.node is not None   # the others may be in the segment
        with nogil:
            if beside:
                node_pair_call(ctx, &c)
            run_bcast(ctx, &c, b.ptr, b.nbytes, algo)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()


cdef int run_barrier(Context ctx, Coll *c, int algo=ALGO_AUTO) except -1 nogil:
    if algo == ALGO_DISSEMINATION:
        return barrier_dissemination(ctx, c)
    # An allreduce of nothing: its partners (rank XOR 2^k, the first 2*rem
    # ranks of a world that is not a power of two folded pairwise): with
    # pairs connected on first use, a barrier then an allreduce make one set
    # of connections, not two (dissemination's rank +- 2^k).
    return allreduce_recursive_doubling(ctx, c, NULL, 0)


cdef int barrier_dissemination(Context ctx, Coll *c) except -1 nogil:
    """Dissemination: in round k every rank signals rank+2^k and hears from
    rank-2^k; after ceil(log2 n) rounds everyone has heard from everyone."""
    cdef Xfer xs[2]
    cdef int n = ctx.size, r = ctx.rank, k = 1
    cdef uint64_t tag = 0
    while k < n:
        post_send(ctx, c, &xs[1], (r + k) % n, tag, NULL, 0)
        post_recv(ctx, c, &xs[0], (r - k + n) % n, tag, NULL, 0)
        waitall(ctx, c, xs, 2)
        k <<= 1
        tag += 1
    return 0


cdef int run_bcast(Context ctx, Coll *c, char *buf, int64_t nbytes,
                   int algo) except -1 nogil:
    """`algo`: what pick_bcast chose."""
    if ctx.size == 1:
        return 0
    if algo == ALGO_SCATTER_ALLGATHER:
        return bcast_scatter_allgather(ctx, c, buf, nbytes)
    if algo == ALGO_CHAIN:
        return bcast_chain(ctx, c, buf, nbytes)
    return bcast_binomial(ctx, c, buf, nbytes)


cdef int bcast_scatter_allgather(Context ctx, Coll *c, char *buf,
                                 int64_t nbytes) except -1 nogil:
    """The root sends rank q its n-th of the buffer (chunk (q - root) mod
    n, chunks in buffer order), then a ring allgather gives every rank every
    chunk (van de Geijn's long-message broadcast). The root sends about 2B
    in all instead of B per child (B log2 n), and every link carries a
    share; but every rank sends, so more bytes move in all."""
    cdef int n = ctx.size, r = ctx.rank, root = c.proto.root, q, v
    cdef int64_t per = nbytes // n, extra = nbytes % n
    cdef int64_t *offs = <int64_t *>_alloc(2 * n * sizeof(int64_t))
    cdef int64_t *sizes = offs + n
    cdef Xfer *xs = NULL
    try:
        for q in range(n):
            v = (q - root + n) % n             # chunk v, in buffer order
            sizes[q] = per + (1 if v < extra else 0)
            offs[q] = per * v + min(<int64_t>v, extra)
        xs = <Xfer *>_alloc(n * sizeof(Xfer))
        if r == root:
            for v in range(1, n):
                q = (root + v) % n
                post_send(ctx, c, &xs[q], q, TAG_SCATTER, buf + offs[q],
                          sizes[q])
        else:
            post_recv(ctx, c, &xs[r], root, TAG_SCATTER, buf + offs[r],
                      sizes[r])
            wait_xfer(ctx, c, &xs[r])
        allgather_ring(ctx, c, buf, offs, sizes)
        if r == root:
            for q in range(n):
                if q != root:
                    wait_xfer(ctx, c, &xs[q])
    finally:
        free(offs)
        free(xs)
    return 0


cdef int bcast_binomial(Context ctx, Coll *c, char *buf,
                        int64_t nbytes) except -1 nogil:
    """Binomial tree rooted at c.proto.root, pipelined in segments: a rank
    forwards each segment to its children as soon as it has it."""
    cdef int n = ctx.size, root = c.proto.root
    cdef int vr = (ctx.rank - root + n) % n          # rank relative to root
    cdef int children[MAX_CHILDREN]
    cdef int nchild = 0, mask
    # Children are vr + 2^k for 2^k below vr's lowest set bit (any for the
    # root), largest subtree first.
    mask = 1
    while mask < n and not (vr & mask):
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if vr + mask < n:
            children[nchild] = (vr + mask + root) % n
            nchild += 1
        mask >>= 1
    return bcast_tree(ctx, c, buf, nbytes, ((vr & (vr - 1)) + root) % n,
                      children, nchild)


cdef int bcast_chain(Context ctx, Coll *c, char *buf,
                     int64_t nbytes) except -1 nogil:
    """A chain root -> root+1 -> ... -> root-1, pipelined in segments: each
    rank receives the buffer once and sends it once, where the binomial
    tree's root sends it log2(n) times (see auto_bcast)."""
    cdef int n = ctx.size
    cdef int child = (ctx.rank + 1) % n        # none past root - 1
    return bcast_tree(ctx, c, buf, nbytes, (ctx.rank - 1 + n) % n, &child,
                      child != c.proto.root)


cdef int bcast_tree(Context ctx, Coll *c, char *buf, int64_t nbytes,
                    int parent, const int *children,
                    int nchild) except -1 nogil:
    """Broadcast down a tree, pipelined in ctx.segment pieces: receive each
    piece from `parent` (none at the root) and pass it on to `children` as
    soon as it is in."""
    cdef bint is_root = ctx.rank == c.proto.root
    cdef int k
    cdef int64_t seg = ctx.segment, s, off, length
    cdef int64_t nseg = (nbytes + seg - 1) // seg if nbytes > 0 else 1
    cdef Xfer *recvs
    cdef Xfer *sends
    recvs = <Xfer *>_alloc(nseg * (nchild + 1) * sizeof(Xfer))
    sends = recvs + nseg
    try:
        if not is_root:
            for s in range(nseg):
                off = s * seg
                length = min(seg, nbytes - off)
                post_recv(ctx, c, &recvs[s], parent, s, buf + off, length)
        for s in range(nseg):
            off = s * seg
            length = min(seg, nbytes - off)
            if not is_root:
                wait_xfer(ctx, c, &recvs[s])
            for k in range(nchild):
                post_send(ctx, c, &sends[s * nchild + k], children[k], s,
                          buf + off, length)
        waitall(ctx, c, sends, nseg * nchild)
    finally:
        free(recvs)
    return 0
