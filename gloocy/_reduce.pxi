# Reductions to one rank or spread over the ranks: Context.reduce,
# reduce_scatter and scan (call_*), and their algorithms: a binomial tree
# and ring + gather for reduce; recursive halving and the ring for
# reduce_scatter; Hillis-Steele for scan.


cdef object call_reduce(Context ctx, object sendbuf, object recvbuf, int op,
                        int root, object timeout, object algorithm):
    cdef Coll c
    ctx._check_root(root)
    cdef bint at_root = ctx.rank == root
    if sendbuf is None and not at_root:
        raise ArgumentError("sendbuf: only the root may reduce in place", ERR_BUFFER)
    cdef Buf rb = get_buffer(recvbuf, "recvbuf", True) if at_root else None
    cdef Buf sb = (get_buffer(sendbuf, "sendbuf", False)
                   if sendbuf is not None else None)
    cdef Buf ref = rb if rb is not None else sb
    ref.require_dtype()
    if sb is not None and rb is not None:
        _same_layout(sb, rb)
    cdef reduce_fn fn = kernel_for(op, ref.dtype)
    cdef int algo = two_level(ctx, _algorithm("reduce", algorithm,
                                              ctx.env_algorithms), ref.nbytes,
                              AUTO_TWO_LEVEL_REDUCE_MIN, timeout)
    if algo == ALGO_TWO_LEVEL:
        return hier_reduce(ctx, sb, rb, op, root, timeout)
    cdef char *acc
    cdef char *out = rb.ptr if rb is not None else NULL
    ctx.begin(&c, KIND_REDUCE, op, ref.dtype, root, ref.count, timeout)
    try:
        c.fn = fn
        algo = pick_reduce(ctx, ref.count, c.itemsize, node_choice(
            ctx, algo, ref.nbytes, NODE_REDUCE_MIN))
        ctx.last_algorithm = ALGORITHM_NAMES[algo]
        with nogil:
            if at_root:
                acc = out
                if sb is not None and sb.ptr != out:
                    memmove(acc, sb.ptr, ref.nbytes)
            else:
                # Our contribution is clobbered: work on a copy, kept
                # apart from the scratch the algorithms use.
                acc = ctx.work(ref.nbytes)
                memcpy(acc, sb.ptr, ref.nbytes)
            if algo == ALGO_SHM:
                node_reduce_to(ctx, &c, acc, ref.count, root)
            else:
                run_reduce(ctx, &c, acc, ref.count, out, algo)
        if algo == ALGO_SHM:
            ctx.sweep(&c)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()


cdef object call_reduce_scatter(Context ctx, object sendbuf, object recvbuf,
                                object counts, int op, object timeout,
                                object algorithm):
    cdef Coll c
    cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
    cdef Buf sb = (get_buffer(sendbuf, "sendbuf", False)
                   if sendbuf is not None else rb)
    sb.require_dtype()
    if sendbuf is not None:
        _same_dtype(sb, rb)
    cdef reduce_fn fn = kernel_for(op, sb.dtype)
    cdef I64 lens = I64(_counts(counts, ctx.size, "recvcounts"))
    cdef I64 offs = lens.prefix()
    cdef int64_t total = lens.total()
    if sb.count != total:
        raise ValueError(f"sendbuf has {sb.count} elements but recvcounts "
                         f"add up to {total}")
    if rb.count < lens.v[ctx.rank]:
        raise ValueError(f"recvbuf has {rb.count} elements but "
                         f"recvcounts[{ctx.rank}] is {lens.v[ctx.rank]}")
    cdef int algo = two_level(ctx, _algorithm("reduce_scatter", algorithm,
                                              ctx.env_algorithms),
                              total * sb.itemsize, AUTO_TWO_LEVEL_BLOCKS_MIN,
                              timeout)
    if algo == ALGO_TWO_LEVEL:
        return hier_reduce_scatter(ctx, sb, rb, lens, op, timeout)
    cdef int64_t isz = sb.itemsize, mine = lens.v[ctx.rank] * isz
    cdef char *acc
    ctx.begin(&c, KIND_REDUCE_SCATTER, op, sb.dtype, -1, total, timeout)
    try:
        c.fn = fn
        algo = pick_reduce_scatter(ctx, total * isz, node_choice(
            ctx, algo, total * isz, NODE_ALWAYS))
        ctx.last_algorithm = ALGORITHM_NAMES[algo]
        with nogil:
            if algo == ALGO_SHM and _apart(sb.ptr, total * isz, rb.ptr, mine):
                # The others read our input where it is: no copy of it all.
                node_reduce_scatter(ctx, &c, sb.ptr, rb.ptr, offs.v, lens.v)
            else:
                acc = ctx.work(total * isz)
                memcpy(acc, sb.ptr, total * isz)
                if algo == ALGO_SHM:      # in place: the input copied first
                    node_reduce_scatter(ctx, &c, acc, rb.ptr, offs.v, lens.v)
                else:
                    run_reduce_scatter(ctx, &c, acc, offs.v, lens.v, algo)
                    memcpy(rb.ptr, acc + offs.v[ctx.rank] * isz, mine)
        if algo == ALGO_SHM:
            ctx.sweep(&c)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()


cdef inline bint _apart(const char *a, int64_t an, const char *b,
                        int64_t bn) noexcept nogil:
    """The byte ranges [a, a + an) and [b, b + bn) do not overlap."""
    return a + an <= b or b + bn <= a


cdef object call_scan(Context ctx, object sendbuf, object recvbuf, int op,
                      bint exclusive, object timeout, object algorithm=None):
    cdef Coll c
    cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
    cdef Buf sb = (get_buffer(sendbuf, "sendbuf", False)
                   if sendbuf is not None else rb)
    rb.require_dtype()
    if sendbuf is not None:
        _same_layout(sb, rb)
    cdef reduce_fn fn = kernel_of(op, rb.dtype)
    cdef int algo = _algorithm("scan", algorithm, ctx.env_algorithms)
    cdef char *x
    ctx.begin(&c, KIND_EXSCAN if exclusive else KIND_SCAN, op, rb.dtype,
               -1, rb.count, timeout)
    try:
        c.fn = fn
        # A user op runs its own scan over the pairs (scan_user); built-in ones
        # take the node segment wherever there is one.
        algo = (ALGO_RECURSIVE_DOUBLING if op == OP_USER else
                node_choice(ctx, algo, rb.nbytes, NODE_ALWAYS))
        if algo == ALGO_AUTO:
            algo = ALGO_RECURSIVE_DOUBLING
        ctx.last_algorithm = ALGORITHM_NAMES[algo]
        with nogil:
            x = ctx.work(rb.nbytes)
            memcpy(x, sb.ptr, rb.nbytes)
            if op == OP_USER:           # a user op's algorithm
                scan_user(ctx, &c, x, rb.count, rb.ptr, exclusive)
            elif algo == ALGO_SHM:
                node_scan(ctx, &c, x, rb.count, rb.ptr, exclusive)
            else:
                run_scan(ctx, &c, x, rb.count, rb.ptr, exclusive)
        if algo == ALGO_SHM:
            ctx.sweep(&c)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()


cdef int run_reduce(Context ctx, Coll *c, char *acc, int64_t count, char *out,
                    int algo) except -1 nogil:
    """Reduce every rank's `acc` (its contribution, clobbered) to the root,
    which gets the result in `out` (its own `acc` may be `out`)."""
    cdef int n = ctx.size, r = ctx.rank, root = c.proto.root, i
    cdef int64_t isz = c.itemsize, nbytes = count * isz
    cdef int64_t *offs
    cdef int64_t *lens
    cdef Xfer *xs
    if n == 1:
        if out != acc:
            memmove(out, acc, nbytes)
        return 0
    if pick_reduce(ctx, count, isz, algo) != ALGO_RING:
        reduce_binomial(ctx, c, acc, count, ctx.scratch(nbytes))
        if r == root and out != acc:
            memmove(out, acc, nbytes)
        return 0
    # Large: ring reduce-scatter, then every rank sends its chunk to the root.
    offs = <int64_t *>_alloc(2 * n * sizeof(int64_t))
    lens = offs + n
    xs = NULL
    try:
        for i in range(n):
            lens[i] = count // n + (1 if i < count % n else 0)
            offs[i] = 0 if i == 0 else offs[i - 1] + lens[i - 1]
        ring_reduce_scatter(ctx, c, acc, offs, lens, False,
                            ctx.scratch(ring_scratch_bytes(ctx, c, lens)))
        if r != root:
            xs = <Xfer *>_alloc(sizeof(Xfer))
            post_send(ctx, c, xs, root, TAG_GATHER, acc + offs[r] * isz,
                      lens[r] * isz)
            wait_xfer(ctx, c, xs)
        else:
            xs = <Xfer *>_alloc(n * sizeof(Xfer))
            for i in range(n):
                if i != r:
                    post_recv(ctx, c, &xs[i], i, TAG_GATHER,
                              out + offs[i] * isz, lens[i] * isz)
            if out != acc:
                memmove(out + offs[r] * isz, acc + offs[r] * isz, lens[r] * isz)
            for i in range(n):
                if i != r:
                    wait_xfer(ctx, c, &xs[i])
    finally:
        free(offs)
        free(xs)
    return 0


cdef int reduce_binomial(Context ctx, Coll *c, char *acc, int64_t count,
                         char *tmp) except -1 nogil:
    """Binomial tree towards the root: a rank folds in its children's partial
    results (lower relative rank first), then sends to its parent."""
    cdef int n = ctx.size, root = c.proto.root
    cdef int vr = (ctx.rank - root + n) % n, mask = 1
    cdef int64_t nbytes = count * c.itemsize
    cdef Xfer x
    while mask < n:
        if vr & mask:
            post_send(ctx, c, &x, (vr - mask + root) % n, mask, acc, nbytes)
            wait_xfer(ctx, c, &x)
            return 0
        if vr + mask < n:
            post_recv(ctx, c, &x, (vr + mask + root) % n, mask, tmp, nbytes)
            wait_xfer(ctx, c, &x)
            c.fn(acc, tmp, count)
        mask <<= 1
    return 0


cdef int run_reduce_scatter(Context ctx, Coll *c, char *acc,
                            const int64_t *offs, const int64_t *lens,
                            int algo) except -1 nogil:
    """Reduce every rank's `acc` (clobbered): rank r ends with block r
    (lens[r] elements at offs[r]; blocks laid end to end in rank order)
    reduced over every rank, in its `acc`."""
    cdef int n = ctx.size, i
    cdef int64_t total = 0
    if n == 1:
        return 0
    for i in range(n):
        total += lens[i]
    if pick_reduce_scatter(ctx, total * c.itemsize, algo) == ALGO_HALVING:
        return reduce_scatter_halving(ctx, c, acc, offs, lens, total)
    return ring_reduce_scatter(ctx, c, acc, offs, lens, False,
                               ctx.scratch(ring_scratch_bytes(ctx, c, lens)))


cdef int reduce_scatter_halving(Context ctx, Coll *c, char *acc,
                                const int64_t *offs, const int64_t *lens,
                                int64_t total) except -1 nogil:
    """Recursive halving over p = 2^k ranks (log2 p steps, each rank sends
    ~the buffer once). For n not a power of two the first 2*(n-p) ranks fold
    pairwise (even into odd) first; the odd rank then stands for both
    blocks, and sends the even one its block at the end."""
    cdef int n = ctx.size, r = ctx.rank, p = 1, k = 0, rem, vr, v
    cdef int radix[MAX_RADICES]
    cdef int64_t isz = c.itemsize, need
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
        for v in range(p):                    # virtual v's blocks: rank order
            bo[v] = offs[_real_rank(v, rem) - (1 if v < rem else 0)]
        bo[p] = offs[0] + total
        if r < 2 * rem and r % 2 == 0:
            post_send(ctx, c, &x, r + 1, TAG_FOLD_IN, acc + offs[0] * isz,
                      total * isz)
            wait_xfer(ctx, c, &x)
            post_recv(ctx, c, &x, r + 1, TAG_FOLD_OUT, acc + offs[r] * isz,
                      lens[r] * isz)
            wait_xfer(ctx, c, &x)
            return 0
        need = _radix_scratch(p, vr, radix, k, bo)
        tmp = ctx.scratch(max(need, total if rem else 0) * isz)
        if r < 2 * rem:
            post_recv(ctx, c, &x, r - 1, TAG_FOLD_IN, tmp, total * isz)
            wait_xfer(ctx, c, &x)
            c.fn(acc + offs[0] * isz, tmp, total)
        radix_exchange(ctx, c, acc, isz, p, vr, rem, radix, k, bo, tmp,
                       True, False)
        if r < 2 * rem:
            post_send(ctx, c, &x, r - 1, TAG_FOLD_OUT, acc + offs[r - 1] * isz,
                      lens[r - 1] * isz)
            wait_xfer(ctx, c, &x)
    finally:
        free(bo)
    return 0


cdef int run_scan(Context ctx, Coll *c, char *x, int64_t count, char *out,
                  bint exclusive) except -1 nogil:
    """Inclusive prefix reduction in log2(n) steps (Hillis-Steele): at step k
    a rank passes its partial result to rank+2^k and folds in rank-2^k's.
    `x` holds this rank's input and is clobbered; the result goes to `out`
    (exclusive: rank r gets rank r-1's inclusive result; rank 0's `out` is
    left alone)."""
    cdef int n = ctx.size, r = ctx.rank, k = 1
    cdef int64_t nbytes = count * c.itemsize
    cdef uint64_t step = 0
    cdef Xfer xs[2]
    cdef char *tmp = ctx.scratch(nbytes)
    while k < n:
        if r + k < n:
            post_send(ctx, c, &xs[0], r + k, step, x, nbytes)
        if r - k >= 0:
            post_recv(ctx, c, &xs[1], r - k, step, tmp, nbytes)
            wait_xfer(ctx, c, &xs[1])
        if r + k < n:
            wait_xfer(ctx, c, &xs[0])
        if r - k >= 0:
            _reduce_ordered(c, x, tmp, count, nbytes, True)
        k <<= 1
        step += 1
    if not exclusive:
        if out != x:
            memmove(out, x, nbytes)
        return 0
    if r + 1 < n:
        post_send(ctx, c, &xs[0], r + 1, step, x, nbytes)
    if r > 0:
        post_recv(ctx, c, &xs[1], r - 1, step, out, nbytes)
        wait_xfer(ctx, c, &xs[1])
    if r + 1 < n:
        wait_xfer(ctx, c, &xs[0])
    return 0
