# Moving blocks without reducing them: recursive doubling and the ring for
# allgather (allgather_ring is in _exchanges.pxi); direct sends for gather,
# scatter and alltoall. The node segment's are in _node.pxi and
# _node_exchange.pxi.


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
            ctx.post_send(c, xs, root, 0, send, sendn)
            ctx.wait(c, xs)
        finally:
            free(xs)
        return 0
    xs = <Xfer *>_alloc(n * sizeof(Xfer))
    try:
        for i in range(n):
            if i != r:
                ctx.post_recv(c, &xs[i], i, 0, recv + offs[i], sizes[i])
        if send is not NULL:
            memmove(recv + offs[r], send, sizes[r])
        for i in range(n):
            if i != r:
                ctx.wait(c, &xs[i])
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
            ctx.post_recv(c, xs, root, 0, recv, recvn)
            ctx.wait(c, xs)
        finally:
            free(xs)
        return 0
    xs = <Xfer *>_alloc(n * sizeof(Xfer))
    try:
        for i in range(n):
            if i != r:
                ctx.post_send(c, &xs[i], i, 0, send + offs[i], sizes[i])
        if recv is not NULL:
            memmove(recv, send + offs[r], sizes[r])
        for i in range(n):
            if i != r:
                ctx.wait(c, &xs[i])
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
            ctx.post_send(c, &xs[p], p, 0, send + soffs[p], ssizes[p])
            p = (r - k + n) % n
            ctx.post_recv(c, &xs[n + p], p, 0, recv + roffs[p], rsizes[p])
        memmove(recv + roffs[r], send + soffs[r], rsizes[r])
        for k in range(n):
            if k != r:
                ctx.wait(c, &xs[n + k])
                ctx.wait(c, &xs[k])
    finally:
        free(xs)
    return 0
