# Allreduce: Context.allreduce (call_allreduce) and its algorithms:
# recursive doubling, the pipelined ring, halving-doubling (Rabenseifner)
# and bcube; the node segment's is node_allreduce (_node.pxi).


cdef enum:
    # bcube: largest group of one hypercube dimension (Gloo's users pick
    # bases up to 4); a world size with a prime factor above 4 still gets a
    # group of that size (5, 7: one group, a direct exchange).
    BCUBE_BASE = 4


cdef object call_allreduce(Context ctx, object sendbuf, object recvbuf, int op,
                           object timeout, object algorithm):
    cdef Coll c
    cdef Buf sb = None
    cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
    rb.require_dtype()
    cdef reduce_fn fn = kernel_of(op, rb.dtype)
    cdef int algo = _algorithm("allreduce", algorithm, ctx.env_algorithms)
    cdef bint chain = op == OP_USER     # a user op's algorithm (_user_ops.pxi)
    if chain:
        algo = ALGO_RECURSIVE_DOUBLING  # (not the node segment's)
    cdef bint on_node
    if sendbuf is not None:
        sb = get_buffer(sendbuf, "sendbuf", False)
        _same_layout(sb, rb)
    algo = two_level(ctx, algo, rb.nbytes, AUTO_TWO_LEVEL_REDUCE_MIN, timeout,
                     True)
    if algo == ALGO_TWO_LEVEL:
        return hier_allreduce(ctx, sb, rb, op, timeout)
    ctx.begin(&c, KIND_ALLREDUCE, op, rb.dtype, -1, rb.count, timeout)
    try:
        c.fn = fn
        on_node = node_choice(ctx, algo, rb.nbytes, NODE_ALWAYS) == ALGO_SHM
        if on_node:
            ctx.last_algorithm = "shm"
        else:
            algo = pick_allreduce(ctx, rb.count, c.itemsize,
                                  ALGO_AUTO if algo == ALGO_SHM else algo)
            ctx.last_algorithm = "chain" if chain else ALGORITHM_NAMES[algo]
        with nogil:
            if sb is not None and sb.ptr != rb.ptr:
                memmove(rb.ptr, sb.ptr, rb.nbytes)
            if on_node:
                node_allreduce(ctx, &c, rb.ptr, rb.count)
            elif chain:
                allreduce_user(ctx, &c, rb.ptr, rb.count)
            else:
                run_allreduce(ctx, &c, rb.ptr, rb.count, algo)
        if on_node:
            ctx.sweep(&c)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()


cdef int run_allreduce(Context ctx, Coll *c, char *buf, int64_t count,
                       int algo) except -1 nogil:
    if ctx.size == 1:
        return 0
    algo = pick_allreduce(ctx, count, c.itemsize, algo)
    if algo == ALGO_RING:
        return allreduce_ring(ctx, c, buf, count)
    if algo == ALGO_HALVING_DOUBLING:
        return allreduce_halving_doubling(ctx, c, buf, count)
    if algo == ALGO_BCUBE:
        return allreduce_bcube(ctx, c, buf, count)
    return allreduce_recursive_doubling(ctx, c, buf, count)


cdef int allreduce_recursive_doubling(Context ctx, Coll *c, char *buf,
                                      int64_t count) except -1 nogil:
    """log2(n) exchanges of the whole buffer. For n not a power of two, the
    first 2*rem ranks fold pairwise into one (even into odd) before and get
    the result back after. With count 0, the flat barrier."""
    cdef int n = ctx.size, r = ctx.rank
    cdef int p = 1, rem, newrank, mask, peer, pn
    cdef uint64_t level = 1
    cdef int64_t nbytes = count * c.itemsize
    cdef Xfer xs[2]
    cdef char *tmp = ctx.scratch(nbytes)
    while p * 2 <= n:
        p *= 2
    rem = n - p
    if r < 2 * rem:
        if r % 2 == 0:
            post_send(ctx, c, &xs[0], r + 1, 0, buf, nbytes)
            wait_xfer(ctx, c, &xs[0])
            post_recv(ctx, c, &xs[1], r + 1, TAG_FOLD_OUT, buf, nbytes)
            wait_xfer(ctx, c, &xs[1])
            return 0
        post_recv(ctx, c, &xs[0], r - 1, 0, tmp, nbytes)
        wait_xfer(ctx, c, &xs[0])
        if count:           # (none: the barrier)
            _reduce_ordered(c, buf, tmp, count, nbytes, True)
        newrank = r // 2
    else:
        newrank = r - rem
    mask = 1
    while mask < p:
        pn = newrank ^ mask
        peer = pn * 2 + 1 if pn < rem else pn + rem
        post_send(ctx, c, &xs[1], peer, level, buf, nbytes)
        post_recv(ctx, c, &xs[0], peer, level, tmp, nbytes)
        waitall(ctx, c, xs, 2)
        if count:
            _reduce_ordered(c, buf, tmp, count, nbytes, peer < r)
        mask <<= 1
        level += 1
    if r < 2 * rem:
        post_send(ctx, c, &xs[0], r - 1, TAG_FOLD_OUT, buf, nbytes)
        wait_xfer(ctx, c, &xs[0])
    return 0


cdef int allreduce_ring(Context ctx, Coll *c, char *buf,
                        int64_t count) except -1 nogil:
    """Ring reduce-scatter then ring allgather over n nearly equal chunks."""
    cdef int n = ctx.size, i
    cdef int64_t *offs = <int64_t *>_alloc(2 * n * sizeof(int64_t))
    cdef int64_t *lens = offs + n
    try:
        for i in range(n):
            lens[i] = count // n + (1 if i < count % n else 0)
            offs[i] = 0 if i == 0 else offs[i - 1] + lens[i - 1]
        ring_reduce_scatter(ctx, c, buf, offs, lens, True,
                            ctx.scratch(ring_scratch_bytes(ctx, c, lens)))
    finally:
        free(offs)
    return 0


cdef int allreduce_halving_doubling(Context ctx, Coll *c, char *buf,
                                    int64_t count) except -1 nogil:
    """Rabenseifner: reduce-scatter by recursive halving, then allgather by
    recursive doubling, over p = 2^k ranks: each rank sends ~2x the buffer
    in 2k steps. For n not a power of two the first 2*(n-p) ranks fold
    pairwise (even into odd) before, and the even ones get the result after.
    Each element is reduced at exactly one rank and then copied, so every
    rank ends with the same bits."""
    cdef int n = ctx.size, r = ctx.rank, p = 1, k = 0, rem, vr, i
    cdef int radix[MAX_RADICES]
    cdef int64_t isz = c.itemsize, nbytes = count * isz, need
    cdef Xfer x
    cdef char *tmp
    while p * 2 <= n:
        radix[k] = 2
        k += 1
        p *= 2
    rem = n - p
    vr = r // 2 if r < 2 * rem else r - rem
    cdef int64_t *bo = <int64_t *>_alloc((p + 1) * sizeof(int64_t))
    try:
        for i in range(p + 1):
            bo[i] = (count // p) * i + min(<int64_t>i, count % p)
        if r < 2 * rem and r % 2 == 0:
            post_send(ctx, c, &x, r + 1, TAG_FOLD_IN, buf, nbytes)
            wait_xfer(ctx, c, &x)
            post_recv(ctx, c, &x, r + 1, TAG_FOLD_OUT, buf, nbytes)
            wait_xfer(ctx, c, &x)
            return 0
        need = _radix_scratch(p, vr, radix, k, bo)
        tmp = ctx.scratch(max(need, count if rem else 0) * isz)
        if r < 2 * rem:
            post_recv(ctx, c, &x, r - 1, TAG_FOLD_IN, tmp, nbytes)
            wait_xfer(ctx, c, &x)
            c.fn(buf, tmp, count)
        radix_exchange(ctx, c, buf, isz, p, vr, rem, radix, k, bo, tmp,
                       True, True)
        if r < 2 * rem:
            post_send(ctx, c, &x, r - 1, TAG_FOLD_OUT, buf, nbytes)
            wait_xfer(ctx, c, &x)
    finally:
        free(bo)
    return 0


cdef int bcube_radices(int n, int *radix) noexcept nogil:
    """Group sizes of bcube's dimensions, product n: n's prime factors,
    smallest first, merged while the product stays <= BCUBE_BASE (8 ->
    4 x 2, 6 -> 2 x 3, 7 -> 7). Returns how many."""
    cdef int k = 0, cur = 1, f = 2
    while n > 1:
        while n % f == 0:
            if cur > 1 and cur * f > BCUBE_BASE:
                radix[k] = cur
                k += 1
                cur = 1
            cur *= f
            n //= f
        f += 1
    if cur > 1:
        radix[k] = cur
        k += 1
    return k


cdef int allreduce_bcube(Context ctx, Coll *c, char *buf,
                         int64_t count) except -1 nogil:
    """BCube (as in Gloo): the ranks form a mixed-radix hypercube whose
    dimensions are groups of up to BCUBE_BASE ranks (bcube_radices); a
    reduce-scatter inside the group of each dimension in turn, then an
    allgather back. Fewer, wider steps than halving-doubling, and any world
    size works without folding (a prime size is one group: a direct
    reduce-scatter and allgather)."""
    cdef int n = ctx.size, r = ctx.rank, i, k
    cdef int radix[MAX_RADICES]
    cdef int64_t isz = c.itemsize
    cdef int64_t *bo = <int64_t *>_alloc((n + 1) * sizeof(int64_t))
    try:
        k = bcube_radices(n, radix)
        for i in range(n + 1):
            bo[i] = (count // n) * i + min(<int64_t>i, count % n)
        radix_exchange(ctx, c, buf, isz, n, r, 0, radix, k, bo,
                       ctx.scratch(_radix_scratch(n, r, radix, k, bo) * isz),
                       True, True)
    finally:
        free(bo)
    return 0
