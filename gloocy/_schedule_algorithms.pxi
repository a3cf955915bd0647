# The nonblocking collectives' algorithms, written as schedules of steps
# (see _schedule.pxi): each start_<name> checks its arguments as the
# blocking call_<name> does, writes its steps down, then launches them.
# Few rounds each: recursive doubling (barrier), binomial trees (bcast, reduce),
# recursive doubling or the ring (allreduce), direct exchanges (gather,
# scatter, allgather, alltoall), reduce to rank 0 + scatter
# (reduce_scatter), Hillis-Steele (scan). User ops run the same ones, in
# rank order where the op does not commute (see _user_ops.pxi).


cdef NbcHandle start_barrier(Context ctx):
    """Recursive doubling of nothing, as the blocking barrier: the
    allreduce's partners (a connection fewer a round than dissemination's
    two, and the same peers as Barrier's and Iallreduce's)."""
    cdef NbcHandle h = _handle(ctx, None)
    if ctx.size > 1:
        _allreduce_doubling(h, ctx, NULL, 0, 1)
    h.launch(KIND_BARRIER, OP_NONE, DT_BYTES, -1, 0, NULL)
    return h


cdef int _tree(int n, int vr, int *parent, int *children) noexcept:
    """The binomial tree over virtual ranks (root 0): vr's parent (-1 for
    the root) and children (smallest subtree first); returns how many."""
    cdef int mask = 1, nchild = 0
    parent[0] = -1
    while mask < n:
        if vr & mask:
            parent[0] = vr - mask
            break
        if vr + mask < n:
            children[nchild] = vr + mask
            nchild += 1
        mask <<= 1
    return nchild


cdef NbcHandle start_bcast(Context ctx, object buf, int root):
    """Binomial tree from root, in segments: a rank forwards each segment
    as soon as it has it."""
    ctx._check_root(root)
    cdef Buf b = get_buffer(buf, "buf", ctx.rank != root)
    cdef NbcHandle h = _handle(ctx, [b])
    _bcast_tree(h, ctx.size, (ctx.rank - root + ctx.size) % ctx.size, root,
                0, b.ptr, b.nbytes, 0)
    h.launch(KIND_BCAST, OP_NONE, DT_BYTES, root, b.nbytes, NULL)
    return h


cdef int _bcast_tree(NbcHandle h, int n, int vr, int root, int base,
                     char *buf, int64_t nbytes, uint64_t tag0) except -1:
    """Steps of a segmented binomial bcast of buf from virtual rank 0 (our
    rank root + base) over the n ranks base.. base+n-1; segment s travels
    with tag tag0 + s."""
    cdef int parent, k, nchild
    cdef int children[MAX_CHILDREN]
    cdef int64_t seg = h.ctx.segment, off, length, s
    cdef int64_t nseg = (nbytes + seg - 1) // seg if nbytes > 0 else 1
    cdef int64_t first = 0
    nchild = _tree(n, vr, &parent, children)
    if parent >= 0:
        first = h.s.nsteps
        for s in range(nseg):
            off = s * seg
            h.recv(base + (parent + root) % n, tag0 + s, buf + off,
                   min(seg, nbytes - off))
    if nchild:
        for s in range(nseg):
            off = s * seg
            length = min(seg, nbytes - off)
            if parent >= 0:
                h.wait_for(first + s)
            for k in range(nchild):
                h.send(base + (children[k] + root) % n, tag0 + s, buf + off,
                       length)
    return 0


cdef int _reduce_tree(NbcHandle h, int n, int vr, int root, int base,
                      char *acc, int64_t count, int64_t nbytes) except -1:
    """Steps of a binomial reduce of every rank's acc to virtual rank 0
    (our rank root + base) over the n ranks base.. base+n-1; each rank
    folds its children's results (higher virtual ranks) after its own,
    then sends up: with root 0, in rank order (any associative op)."""
    cdef int parent, k, nchild
    cdef int children[MAX_CHILDREN]
    cdef char *tmp
    nchild = _tree(n, vr, &parent, children)
    if nchild:
        tmp = h.alloc(nchild * nbytes)
        for k in range(nchild):
            h.recv(base + (children[k] + root) % n, 0, tmp + k * nbytes,
                   nbytes)
        h.fence()
        for k in range(nchild):
            h.reduce(acc, tmp + k * nbytes, count, False)
    if parent >= 0:
        h.send(base + (parent + root) % n, 0, acc, nbytes)
    return 0


cdef NbcHandle start_allreduce(Context ctx, object sendbuf, object recvbuf,
                               int op):
    cdef Buf sb = None
    cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
    rb.require_dtype()
    cdef reduce_fn fn = kernel_of(op, rb.dtype)
    if sendbuf is not None:
        sb = get_buffer(sendbuf, "sendbuf", False)
        _same_layout(sb, rb)
    cdef NbcHandle h = _handle(ctx, [sb, rb])
    if sb is not None:
        h.copy(rb.ptr, sb.ptr, rb.nbytes)
    if ctx.size > 1:
        if rb.nbytes >= ctx.small_allreduce and rb.count >= ctx.size and (
                op != OP_USER or user_op_commutes()):
            # (the ring folds each chunk along the ring: commutative ops only)
            _allreduce_ring(h, ctx, rb.ptr, rb.count, rb.itemsize)
        else:               # (in rank order: any associative op)
            _allreduce_doubling(h, ctx, rb.ptr, rb.count, rb.itemsize)
    h.launch(KIND_ALLREDUCE, op, rb.dtype, -1, rb.count, fn)
    return h


cdef int _allreduce_doubling(NbcHandle h, Context ctx, char *buf,
                             int64_t count, int64_t isz) except -1:
    """Recursive doubling; for n not a power of two the first 2*rem ranks
    fold pairwise first (even into odd) and get the result back after.
    Operands combine in rank order (lower ranks' first)."""
    cdef int n = ctx.size, r = ctx.rank, p = 1, rem, newrank, mask, pn, peer
    cdef int64_t nbytes = count * isz
    cdef uint64_t level = 1
    cdef char *tmp = h.alloc(nbytes) if nbytes else NULL   # (none: the barrier)
    while p * 2 <= n:
        p *= 2
    rem = n - p
    if r < 2 * rem:
        if r % 2 == 0:
            h.send(r + 1, 0, buf, nbytes)
            h.fence()
            h.recv(r + 1, TAG_FOLD_OUT, buf, nbytes)
            return 0
        h.recv(r - 1, 0, tmp, nbytes)
        h.fence()
        if count:
            h.reduce(buf, tmp, count, True)
        newrank = r // 2
    else:
        newrank = r - rem
    mask = 1
    while mask < p:
        pn = newrank ^ mask
        peer = pn * 2 + 1 if pn < rem else pn + rem
        h.send(peer, level, buf, nbytes)
        h.recv(peer, level, tmp, nbytes)
        h.fence()
        if count:
            h.reduce(buf, tmp, count, peer < r)
        mask <<= 1
        level += 1
    if r < 2 * rem:
        h.send(r - 1, TAG_FOLD_OUT, buf, nbytes)
    return 0


cdef int _allreduce_ring(NbcHandle h, Context ctx, char *buf, int64_t count,
                         int64_t isz) except -1:
    """Ring reduce-scatter of n chunks, then ring allgather: each link
    carries 2(n-1)/n of the buffer. Each chunk is folded in one order
    along the ring and then copied, so every rank gets the same bits."""
    cdef int n = ctx.size, r = ctx.rank, j
    cdef int right = (r + 1) % n, left = (r - 1 + n) % n
    cdef int64_t per = count // n, extra = count % n, k, most = per + 1
    cdef char *tmp = h.alloc(most * isz)
    cdef int64_t *at = <int64_t *>h.alloc((n + 1) * sizeof(int64_t))
    for k in range(n + 1):                  # chunk k: elements [at[k], at[k+1])
        at[k] = per * k + min(k, extra)
    for j in range(n - 1):
        k = _mod(r - j, n)
        h.send(right, j, buf + at[k] * isz, (at[k + 1] - at[k]) * isz)
        k = _mod(r - j - 1, n)
        h.recv(left, j, tmp, (at[k + 1] - at[k]) * isz)
        h.fence()
        h.reduce(buf + at[k] * isz, tmp, at[k + 1] - at[k], False)
    for j in range(n - 1):
        k = _mod(r + 1 - j, n)
        h.send(right, n + j, buf + at[k] * isz, (at[k + 1] - at[k]) * isz)
        k = _mod(r - j, n)
        h.recv(left, n + j, buf + at[k] * isz, (at[k + 1] - at[k]) * isz)
        h.fence()
    return 0


cdef NbcHandle start_reduce(Context ctx, object sendbuf, object recvbuf,
                            int op, int root):
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
    cdef NbcHandle h = _handle(ctx, [sb, rb])
    cdef char *acc
    cdef int n = ctx.size
    if at_root:
        acc = rb.ptr
        if sb is not None:
            h.copy(acc, sb.ptr, ref.nbytes)
    else:
        acc = h.alloc(ref.nbytes)           # our contribution is clobbered
        h.copy(acc, sb.ptr, ref.nbytes)
    _reduce_tree(h, n, (ctx.rank - root + n) % n, root, 0, acc, ref.count,
                 ref.nbytes)
    h.launch(KIND_REDUCE, op, ref.dtype, root, ref.count, fn)
    return h


cdef NbcHandle start_allgatherv(Context ctx, object sendbuf, object recvbuf,
                                object counts, object displs):
    """Every rank sends its block straight to every other."""
    cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
    cdef I64 sizes, offs
    sizes, offs = _layout(counts, displs, ctx.size, rb, "recvbuf")
    cdef Buf sb = None
    cdef int r = ctx.rank, i
    if sendbuf is not None:
        sb = get_buffer(sendbuf, "sendbuf", False)
        if sb.nbytes != sizes.v[r]:
            raise ValueError(f"sendbuf has {sb.nbytes} bytes but "
                             f"counts[{r}] is {sizes.v[r]}")
    cdef NbcHandle h = _handle(ctx, [sb, rb, sizes, offs])
    cdef const char *mine = sb.ptr if sb is not None else rb.ptr + offs.v[r]
    h.copy(rb.ptr + offs.v[r], mine, sizes.v[r])
    for i in range(ctx.size):
        if i != r:
            h.send(i, 0, mine, sizes.v[r])
            h.recv(i, 0, rb.ptr + offs.v[i], sizes.v[i])
    h.launch(KIND_ALLGATHERV, OP_NONE, DT_BYTES, -1, 0, NULL)
    return h


cdef NbcHandle start_gatherv(Context ctx, object sendbuf, object recvbuf,
                             object counts, object displs, int root):
    ctx._check_root(root)
    cdef bint at_root = ctx.rank == root
    if sendbuf is None and not at_root:
        raise ArgumentError("sendbuf: only the root may gather in place", ERR_BUFFER)
    cdef Buf sb = (get_buffer(sendbuf, "sendbuf", False)
                   if sendbuf is not None else None)
    cdef Buf rb = None
    cdef I64 sizes = None, offs = None
    cdef int i
    if at_root:
        rb = get_buffer(recvbuf, "recvbuf", True)
        sizes, offs = _layout(counts, displs, ctx.size, rb, "recvbuf")
        if sb is not None and sb.nbytes != sizes.v[root]:
            raise ValueError(f"sendbuf has {sb.nbytes} bytes but the "
                             f"root's block is {sizes.v[root]}")
    cdef NbcHandle h = _handle(ctx, [sb, rb, sizes, offs])
    if not at_root:
        h.send(root, 0, sb.ptr, sb.nbytes)
    else:
        if sb is not None:
            h.copy(rb.ptr + offs.v[root], sb.ptr, sb.nbytes)
        for i in range(ctx.size):
            if i != root:
                h.recv(i, 0, rb.ptr + offs.v[i], sizes.v[i])
    h.launch(KIND_GATHERV, OP_NONE, DT_BYTES, root, 0, NULL)
    return h


cdef NbcHandle start_scatterv(Context ctx, object sendbuf, object recvbuf,
                              object counts, object displs, int root):
    ctx._check_root(root)
    cdef bint at_root = ctx.rank == root
    if recvbuf is None and not at_root:
        raise ArgumentError("recvbuf: only the root may scatter in place", ERR_BUFFER)
    cdef Buf rb = (get_buffer(recvbuf, "recvbuf", True)
                   if recvbuf is not None else None)
    cdef Buf sb = None
    cdef I64 sizes = None, offs = None
    cdef int i
    if at_root:
        sb = get_buffer(sendbuf, "sendbuf", False)
        sizes, offs = _layout(counts, displs, ctx.size, sb, "sendbuf")
        if rb is not None and rb.nbytes != sizes.v[root]:
            raise ValueError(f"recvbuf has {rb.nbytes} bytes but the "
                             f"root's block is {sizes.v[root]}")
    cdef NbcHandle h = _handle(ctx, [sb, rb, sizes, offs])
    if not at_root:
        h.recv(root, 0, rb.ptr, rb.nbytes)
    else:
        if rb is not None:
            h.copy(rb.ptr, sb.ptr + offs.v[root], rb.nbytes)
        for i in range(ctx.size):
            if i != root:
                h.send(i, 0, sb.ptr + offs.v[i], sizes.v[i])
    h.launch(KIND_SCATTERV, OP_NONE, DT_BYTES, root, 0, NULL)
    return h


cdef NbcHandle start_alltoallv(Context ctx, object sendbuf, object sendcounts,
                               object senddispls, object recvbuf,
                               object recvcounts, object recvdispls):
    """Block i straight to rank i; in place, the blocks leave from a copy."""
    cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
    cdef I64 rsizes, roffs, ssizes, soffs
    rsizes, roffs = _layout(recvcounts, recvdispls, ctx.size, rb, "recvbuf")
    cdef Buf sb = None
    if sendbuf is None:
        ssizes, soffs = rsizes, roffs
    else:
        sb = get_buffer(sendbuf, "sendbuf", False)
        ssizes, soffs = _layout(sendcounts, senddispls, ctx.size, sb,
                                "sendbuf")
    cdef int r = ctx.rank, i
    if ssizes.v[r] != rsizes.v[r]:
        raise ValueError(f"sendbuf block {r} has {ssizes.v[r]} bytes but "
                         f"recvbuf block {r} has {rsizes.v[r]}: rank {r} "
                         f"sends itself one and receives the other")
    cdef NbcHandle h = _handle(ctx, [sb, rb, rsizes, roffs, ssizes, soffs])
    cdef char *src
    if sb is None:
        src = h.alloc(rb.nbytes)
        h.copy(src, rb.ptr, rb.nbytes)
    else:
        src = sb.ptr
    h.copy(rb.ptr + roffs.v[r], src + soffs.v[r], rsizes.v[r])
    for i in range(ctx.size):
        if i != r:
            h.send(i, 0, src + soffs.v[i], ssizes.v[i])
            h.recv(i, 0, rb.ptr + roffs.v[i], rsizes.v[i])
    h.launch(KIND_ALLTOALLV, OP_NONE, DT_BYTES, -1, 0, NULL)
    return h


cdef NbcHandle start_reduce_scatter(Context ctx, object sendbuf,
                                    object recvbuf, object counts, int op):
    """Reduce the whole input to rank 0 (binomial tree, in rank order: user
    ops too), which sends rank i its block."""
    cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
    cdef Buf sb = (get_buffer(sendbuf, "sendbuf", False)
                   if sendbuf is not None else rb)
    sb.require_dtype()
    if sendbuf is not None:
        _same_dtype(sb, rb)
    cdef reduce_fn fn = kernel_of(op, sb.dtype)
    cdef I64 lens = I64(_counts(counts, ctx.size, "recvcounts"))
    cdef I64 offs = lens.prefix()
    cdef int64_t total = lens.total()
    if sb.count != total:
        raise ValueError(f"sendbuf has {sb.count} elements but recvcounts "
                         f"add up to {total}")
    if rb.count < lens.v[ctx.rank]:
        raise ValueError(f"recvbuf has {rb.count} elements but "
                         f"recvcounts[{ctx.rank}] is {lens.v[ctx.rank]}")
    cdef NbcHandle h = _handle(ctx, [sb, rb, lens, offs])
    cdef int64_t isz = sb.itemsize
    cdef int r = ctx.rank, i
    cdef char *acc = h.alloc(total * isz)
    h.copy(acc, sb.ptr, total * isz)
    _reduce_tree(h, ctx.size, r, 0, 0, acc, total, total * isz)
    if r != 0:              # (after the tree's fence, which would wait for it)
        h.recv(0, TAG_SCATTER, rb.ptr, lens.v[r] * isz)
    else:
        for i in range(1, ctx.size):
            h.send(i, TAG_SCATTER, acc + offs.v[i] * isz, lens.v[i] * isz)
        h.copy(rb.ptr, acc, lens.v[0] * isz)
    h.launch(KIND_REDUCE_SCATTER, op, sb.dtype, -1, total, fn)
    return h


cdef NbcHandle start_scan(Context ctx, object sendbuf, object recvbuf, int op,
                          bint exclusive):
    """Hillis-Steele, as run_scan: at step k a rank passes its partial
    result to rank+2^k and folds in rank-2^k's (lower ranks' first, so
    any associative op, user ops too)."""
    cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
    cdef Buf sb = (get_buffer(sendbuf, "sendbuf", False)
                   if sendbuf is not None else rb)
    rb.require_dtype()
    if sendbuf is not None:
        _same_layout(sb, rb)
    cdef reduce_fn fn = kernel_of(op, rb.dtype)
    cdef NbcHandle h = _handle(ctx, [sb, rb])
    cdef int n = ctx.size, r = ctx.rank, k = 1
    cdef int64_t nbytes = rb.nbytes
    cdef uint64_t step = 0
    cdef char *x = h.alloc(nbytes)
    cdef char *tmp = h.alloc(nbytes)
    h.copy(x, sb.ptr, nbytes)
    while k < n:
        if r + k < n:
            h.send(r + k, step, x, nbytes)
        if r - k >= 0:
            h.recv(r - k, step, tmp, nbytes)
        h.fence()
        if r - k >= 0:
            h.reduce(x, tmp, rb.count, True)
        k <<= 1
        step += 1
    if not exclusive:
        h.copy(rb.ptr, x, nbytes)
    else:
        if r + 1 < n:
            h.send(r + 1, step, x, nbytes)
        if r > 0:
            h.recv(r - 1, step, rb.ptr, nbytes)
    h.launch(KIND_EXSCAN if exclusive else KIND_SCAN, op, rb.dtype, -1,
             rb.count, fn)
    return h
