# Moving blocks without reducing them: Context.allgatherv, gatherv,
# scatterv and alltoallv (call_*), and their algorithms: recursive doubling
# and the ring for allgather (allgather_ring is in _exchanges.pxi); direct
# sends for gather, scatter and alltoall. The node segment's are in
# _node.pxi and _node_exchange.pxi.


cdef object call_allgatherv(Context ctx, object sendbuf, object recvbuf,
                            object counts, object displs, object timeout,
                            object algorithm):
    cdef Coll c
    cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
    cdef I64 sizes, offs
    sizes, offs = _layout(counts, displs, ctx.size, rb, "recvbuf")
    cdef Buf sb = None
    if sendbuf is not None:
        sb = get_buffer(sendbuf, "sendbuf", False)
        if sb.nbytes != sizes.v[ctx.rank]:
            raise ValueError(f"sendbuf has {sb.nbytes} bytes but "
                             f"counts[{ctx.rank}] is {sizes.v[ctx.rank]}")
    cdef int algo = two_level(ctx, _algorithm("allgather", algorithm,
                                              ctx.env_algorithms), sizes.total(),
                              AUTO_TWO_LEVEL_BLOCKS_MIN, timeout)
    if algo == ALGO_TWO_LEVEL:
        return hier_allgatherv(ctx, sb, rb, sizes, offs, timeout)
    ctx.begin(&c, KIND_ALLGATHERV, OP_NONE, DT_BYTES, -1, 0, timeout)
    try:
        algo = node_choice(ctx, algo, 0, NODE_ALWAYS)
        if algo == ALGO_SHM:
            ctx.last_algorithm = "shm"
            c.proto.count = sizes_digest(sizes)   # every rank's view of them
            with nogil:
                node_allgatherv(ctx, &c, sb.ptr if sb is not None else
                                rb.ptr + offs.v[ctx.rank], rb.ptr, offs.v, sizes.v)
            ctx.sweep(&c)
            return
        algo = pick_allgather(ctx, offs.v, sizes.v, algo)
        ctx.last_algorithm = ALGORITHM_NAMES[algo]
        with nogil:
            if sb is not None:
                memmove(rb.ptr + offs.v[ctx.rank], sb.ptr, sb.nbytes)
            run_allgatherv(ctx, &c, rb.ptr, offs.v, sizes.v, algo)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()


cdef inline int64_t _block_auto(bint uniform, int64_t block,
                                int64_t most) noexcept:
    """two_level()'s auto_min for a gather, scatter or alltoall of `block`
    bytes per block: 0 (two-level) where "auto" picks it, up to `most`
    bytes per block; -1 (never) above, and in the v forms, where a rank
    knows only its own blocks' sizes and ranks could choose unalike (they
    run two-level only when forced)."""
    return 0 if uniform and 0 <= most and block <= most else -1


cdef object call_gatherv(Context ctx, object sendbuf, object recvbuf,
                         object counts, object displs, int root,
                         object timeout, object algorithm,
                         bint uniform=False):
    cdef Coll c
    ctx._check_root(root)
    cdef bint at_root = ctx.rank == root
    if sendbuf is None and not at_root:
        raise ArgumentError("sendbuf: only the root may gather in place", ERR_BUFFER)
    cdef Buf sb = (get_buffer(sendbuf, "sendbuf", False)
                   if sendbuf is not None else None)
    cdef Buf rb = None
    cdef I64 sizes = None, offs = None
    if at_root:
        rb = get_buffer(recvbuf, "recvbuf", True)
        sizes, offs = _layout(counts, displs, ctx.size, rb, "recvbuf")
        if sb is not None and sb.nbytes != sizes.v[root]:
            raise ValueError(f"sendbuf has {sb.nbytes} bytes but the "
                             f"root's block is {sizes.v[root]}")
    cdef int algo = two_level(ctx, _algorithm("gather", algorithm,
                                              ctx.env_algorithms),
                              0, _block_auto(uniform, sizes.v[root] if at_root else sb.nbytes,
                                             AUTO_TWO_LEVEL_GATHER_MAX),
                              timeout)
    if algo == ALGO_TWO_LEVEL:
        return hier_gatherv(ctx, sb, rb, sizes, offs, root, uniform, timeout)
    ctx.begin(&c, KIND_GATHERV, OP_NONE, DT_BYTES, root, 0, timeout)
    try:
        algo = node_choice(ctx, algo, 0, NODE_FORCED_ONLY)
        ctx.last_algorithm = ALGORITHM_NAMES[ALGO_DIRECT if algo == ALGO_AUTO else algo]
        with nogil:
            if algo == ALGO_SHM:
                node_gatherv(ctx, &c, sb.ptr if sb is not None else NULL,
                             sb.nbytes if sb is not None else 0,
                             rb.ptr if at_root else NULL,
                             offs.v if at_root else NULL,
                             sizes.v if at_root else NULL)
            else:
                run_gatherv(ctx, &c, sb.ptr if sb is not None else NULL,
                            sb.nbytes if sb is not None else 0,
                            rb.ptr if at_root else NULL,
                            offs.v if at_root else NULL,
                            sizes.v if at_root else NULL)
        if algo == ALGO_SHM:
            ctx.sweep(&c)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()


cdef object call_scatterv(Context ctx, object sendbuf, object recvbuf,
                          object counts, object displs, int root,
                          object timeout, object algorithm,
                          bint uniform=False):
    cdef Coll c
    ctx._check_root(root)
    cdef bint at_root = ctx.rank == root
    if recvbuf is None and not at_root:
        raise ArgumentError("recvbuf: only the root may scatter in place", ERR_BUFFER)
    cdef Buf rb = (get_buffer(recvbuf, "recvbuf", True)
                   if recvbuf is not None else None)
    cdef Buf sb = None
    cdef I64 sizes = None, offs = None
    if at_root:
        sb = get_buffer(sendbuf, "sendbuf", False)
        sizes, offs = _layout(counts, displs, ctx.size, sb, "sendbuf")
        if rb is not None and rb.nbytes != sizes.v[root]:
            raise ValueError(f"recvbuf has {rb.nbytes} bytes but the "
                             f"root's block is {sizes.v[root]}")
    cdef int algo = two_level(ctx, _algorithm("scatter", algorithm,
                                              ctx.env_algorithms),
                              0, _block_auto(uniform, sizes.v[root] if at_root else rb.nbytes,
                                             AUTO_TWO_LEVEL_SCATTER_MAX),
                              timeout)
    if algo == ALGO_TWO_LEVEL:
        return hier_scatterv(ctx, sb, rb, sizes, offs, root, uniform,
                             timeout)
    ctx.begin(&c, KIND_SCATTERV, OP_NONE, DT_BYTES, root, 0, timeout)
    try:
        algo = node_choice(ctx, algo, 0, NODE_FORCED_ONLY)
        ctx.last_algorithm = ALGORITHM_NAMES[ALGO_DIRECT if algo == ALGO_AUTO else algo]
        with nogil:
            if algo == ALGO_SHM:
                node_scatterv(ctx, &c, sb.ptr if at_root else NULL,
                              offs.v if at_root else NULL,
                              sizes.v if at_root else NULL,
                              rb.ptr if rb is not None else NULL,
                              rb.nbytes if rb is not None else 0)
            else:
                run_scatterv(ctx, &c, sb.ptr if at_root else NULL,
                             offs.v if at_root else NULL,
                             sizes.v if at_root else NULL,
                             rb.ptr if rb is not None else NULL,
                             rb.nbytes if rb is not None else 0)
        if algo == ALGO_SHM:
            ctx.sweep(&c)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()


cdef object call_alltoallv(Context ctx, object sendbuf, object sendcounts,
                           object senddispls, object recvbuf,
                           object recvcounts, object recvdispls,
                           object timeout, object algorithm,
                           bint uniform=False):
    cdef Coll c
    cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
    cdef I64 rsizes, roffs, ssizes, soffs
    rsizes, roffs = _layout(recvcounts, recvdispls, ctx.size, rb, "recvbuf")
    cdef Buf sb
    if sendbuf is None:
        sendbuf = bytes(rb.ptr[:rb.nbytes])    # a copy: blocks move
        ssizes, soffs = rsizes, roffs
    else:
        sb = get_buffer(sendbuf, "sendbuf", False)
        ssizes, soffs = _layout(sendcounts, senddispls, ctx.size, sb,
                                "sendbuf")
    sb = get_buffer(sendbuf, "sendbuf", False)
    if ssizes.v[ctx.rank] != rsizes.v[ctx.rank]:
        raise ValueError(f"sendbuf block {ctx.rank} has "
                         f"{ssizes.v[ctx.rank]} bytes but recvbuf block "
                         f"{ctx.rank} has {rsizes.v[ctx.rank]}: rank "
                         f"{ctx.rank} sends itself one and receives the "
                         f"other")
    cdef int algo = two_level(ctx, _algorithm("alltoall", algorithm,
                                              ctx.env_algorithms),
                              0, _block_auto(uniform, rsizes.v[ctx.rank],
                                             AUTO_TWO_LEVEL_ALLTOALL_MAX),
                              timeout)
    if algo == ALGO_TWO_LEVEL:
        return hier_alltoallv(ctx, sb, soffs, ssizes, rb, roffs, rsizes,
                              uniform, timeout)
    ctx.begin(&c, KIND_ALLTOALLV, OP_NONE, DT_BYTES, -1, 0, timeout)
    try:
        algo = node_choice(ctx, algo, 0, NODE_ALWAYS)
        ctx.last_algorithm = ALGORITHM_NAMES[ALGO_DIRECT if algo == ALGO_AUTO else algo]
        with nogil:
            if algo == ALGO_SHM:
                node_alltoallv(ctx, &c, sb.ptr, soffs.v, ssizes.v, rb.ptr,
                               roffs.v, rsizes.v)
            else:
                run_alltoallv(ctx, &c, sb.ptr, soffs.v, ssizes.v, rb.ptr,
                              roffs.v, rsizes.v)
        if algo == ALGO_SHM:
            ctx.sweep(&c)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()


cdef int run_allgatherv(Context ctx, Coll *c, char *buf, const int64_t *offs,
                        const int64_t *sizes, int algo=ALGO_AUTO) except -1 nogil:
    """Block r (sizes[r] bytes at offs[r]) of rank r's buf into every buf."""
    cdef int n = ctx.size, i, k = 0
    cdef int radix[MAX_RADICES]
    cdef int64_t *bo
    if n == 1:
        return 0
    if pick_allgather(ctx, offs, sizes, algo) != ALGO_RECURSIVE_DOUBLING:
        return allgather_ring(ctx, c, buf, offs, sizes)
    # Recursive doubling: the allgather half of the radix-2 hypercube.
    while (1 << k) < n:
        radix[k] = 2
        k += 1
    bo = <int64_t *>_alloc((n + 1) * sizeof(int64_t))
    try:
        for i in range(n):
            bo[i] = offs[i]
        bo[n] = offs[n - 1] + sizes[n - 1]
        radix_exchange(ctx, c, buf, 1, n, ctx.rank, 0, radix, k, bo, NULL,
                       False, True)
    finally:
        free(bo)
    return 0


cdef int run_gatherv(Context ctx, Coll *c, const char *send, int64_t sendn,
                     char *recv, const int64_t *offs,
                     const int64_t *sizes) except -1 nogil:
    """Every rank sends its block straight to the root, which receives them
    all at once (one socket per peer)."""
    cdef int n = ctx.size, r = ctx.rank, root = c.proto.root, i
    cdef Xfer *xs
    if r != root:
        xs = <Xfer *>_alloc(sizeof(Xfer))
        try:
            post_send(ctx, c, xs, root, 0, send, sendn)
            wait_xfer(ctx, c, xs)
        finally:
            free(xs)
        return 0
    xs = <Xfer *>_alloc(n * sizeof(Xfer))
    try:
        for i in range(n):
            if i != r:
                post_recv(ctx, c, &xs[i], i, 0, recv + offs[i], sizes[i])
        if send is not NULL:
            memmove(recv + offs[r], send, sizes[r])
        for i in range(n):
            if i != r:
                wait_xfer(ctx, c, &xs[i])
    finally:
        free(xs)
    return 0


cdef int run_scatterv(Context ctx, Coll *c, const char *send,
                      const int64_t *offs, const int64_t *sizes, char *recv,
                      int64_t recvn) except -1 nogil:
    """The root sends every rank its block directly, all at once."""
    cdef int n = ctx.size, r = ctx.rank, root = c.proto.root, i
    cdef Xfer *xs
    if r != root:
        xs = <Xfer *>_alloc(sizeof(Xfer))
        try:
            post_recv(ctx, c, xs, root, 0, recv, recvn)
            wait_xfer(ctx, c, xs)
        finally:
            free(xs)
        return 0
    xs = <Xfer *>_alloc(n * sizeof(Xfer))
    try:
        for i in range(n):
            if i != r:
                post_send(ctx, c, &xs[i], i, 0, send + offs[i], sizes[i])
        if recv is not NULL:
            memmove(recv, send + offs[r], sizes[r])
        for i in range(n):
            if i != r:
                wait_xfer(ctx, c, &xs[i])
    finally:
        free(xs)
    return 0


cdef int run_alltoallv(Context ctx, Coll *c, const char *send,
                       const int64_t *soffs, const int64_t *ssizes, char *recv,
                       const int64_t *roffs, const int64_t *rsizes) except -1 nogil:
    """Every rank sends block i to rank i and receives rank i's block for it,
    all pairs at once; sends start at rank+1 so that no peer is everyone's
    first target."""
    cdef int n = ctx.size, r = ctx.rank, k, p
    cdef Xfer *xs = <Xfer *>_alloc(2 * n * sizeof(Xfer))
    try:
        for k in range(1, n):
            p = (r + k) % n
            post_send(ctx, c, &xs[p], p, 0, send + soffs[p], ssizes[p])
            p = (r - k + n) % n
            post_recv(ctx, c, &xs[n + p], p, 0, recv + roffs[p], rsizes[p])
        memmove(recv + roffs[r], send + soffs[r], rsizes[r])
        for k in range(n):
            if k != r:
                wait_xfer(ctx, c, &xs[n + k])
                wait_xfer(ctx, c, &xs[k])
    finally:
        free(xs)
    return 0
