# Collective algorithms, written once against Pair through the Context.
# All run without the GIL; each Xfer they post stays alive (stack or heap)
# until waited for, and heap memory is freed on every path. Where a step both
# sends and receives, the send is posted first: it leaves at once, and a peer
# that finds a mismatch in what we sent still gets our frame to find it too.

cdef enum:
    ALGO_AUTO = 0
    ALGO_RING = 1
    ALGO_RECURSIVE_DOUBLING = 2
    TAG_FOLD_OUT = 0xffffffff     # recursive doubling: result back to a folded rank
    TAG_GATHER = 0xfffffffe      # reduce: reduced chunks sent to the root
    MAX_CHILDREN = 64


ALGORITHMS = {"auto": ALGO_AUTO, "ring": ALGO_RING,
              "recursive_doubling": ALGO_RECURSIVE_DOUBLING}


cdef int _allreduce_algorithm(object name) except -1:
    if name is None:
        return ALGO_AUTO
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"algorithm: {name!r} is not one of "
                         f"{', '.join(ALGORITHMS)}") from None


cdef int _raise_nomem() except -1 with gil:
    raise MemoryError()


cdef void *_alloc(int64_t nbytes) except? NULL nogil:
    cdef void *p = malloc(<size_t>(nbytes if nbytes > 0 else 1))
    if p is NULL:
        _raise_nomem()
    return p


cdef int run_barrier(Context ctx, Coll *c) except -1 nogil:
    """Dissemination: in round k every rank signals rank+2^k and hears from
    rank-2^k; after ceil(log2 n) rounds everyone has heard from everyone."""
    cdef Xfer xs[2]
    cdef int n = ctx.size, r = ctx.rank, k = 1
    cdef uint64_t tag = 0
    while k < n:
        ctx.post_send(c, &xs[1], (r + k) % n, tag, NULL, 0)
        ctx.post_recv(c, &xs[0], (r - k + n) % n, tag, NULL, 0)
        ctx.waitall(c, xs, 2)
        k <<= 1
        tag += 1
    return 0


cdef int run_bcast(Context ctx, Coll *c, char *buf, int64_t nbytes) except -1 nogil:
    """Binomial tree rooted at c.proto.root, pipelined in segments: a rank
    forwards each segment to its children as soon as it has it."""
    cdef int n = ctx.size, root = c.proto.root
    cdef int vr = (ctx.rank - root + n) % n          # rank relative to root
    cdef int children[MAX_CHILDREN]
    cdef int nchild = 0, mask, k, parent
    cdef int64_t seg = ctx.segment, s, off, length
    cdef int64_t nseg = (nbytes + seg - 1) // seg if nbytes > 0 else 1
    cdef Xfer *recvs
    cdef Xfer *sends
    if n == 1:
        return 0
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
    parent = ((vr & (vr - 1)) + root) % n
    recvs = <Xfer *>_alloc(nseg * (nchild + 1) * sizeof(Xfer))
    sends = recvs + nseg
    try:
        if vr != 0:
            for s in range(nseg):
                off = s * seg
                length = min(seg, nbytes - off)
                ctx.post_recv(c, &recvs[s], parent, s, buf + off, length)
        for s in range(nseg):
            off = s * seg
            length = min(seg, nbytes - off)
            if vr != 0:
                ctx.wait(c, &recvs[s])
            for k in range(nchild):
                ctx.post_send(c, &sends[s * nchild + k], children[k], s,
                              buf + off, length)
        ctx.waitall(c, sends, nseg * nchild)
    finally:
        free(recvs)
    return 0


cdef int run_allreduce(Context ctx, Coll *c, char *buf, int64_t count,
                       int algo) except -1 nogil:
    if ctx.size == 1:
        return 0
    if algo == ALGO_AUTO:
        if count * c.itemsize <= ctx.small_allreduce or count < ctx.size:
            algo = ALGO_RECURSIVE_DOUBLING
        else:
            algo = ALGO_RING
    if algo == ALGO_RING:
        return allreduce_ring(ctx, c, buf, count)
    return allreduce_recursive_doubling(ctx, c, buf, count)


cdef int allreduce_recursive_doubling(Context ctx, Coll *c, char *buf,
                                      int64_t count) except -1 nogil:
    """log2(n) exchanges of the whole buffer. For n not a power of two, the
    first 2*rem ranks fold pairwise into one (even into odd) before and get
    the result back after."""
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
            ctx.post_send(c, &xs[0], r + 1, 0, buf, nbytes)
            ctx.wait(c, &xs[0])
            ctx.post_recv(c, &xs[1], r + 1, TAG_FOLD_OUT, buf, nbytes)
            ctx.wait(c, &xs[1])
            return 0
        ctx.post_recv(c, &xs[0], r - 1, 0, tmp, nbytes)
        ctx.wait(c, &xs[0])
        _reduce_ordered(c, buf, tmp, count, nbytes, True)
        newrank = r // 2
    else:
        newrank = r - rem
    mask = 1
    while mask < p:
        pn = newrank ^ mask
        peer = pn * 2 + 1 if pn < rem else pn + rem
        ctx.post_send(c, &xs[1], peer, level, buf, nbytes)
        ctx.post_recv(c, &xs[0], peer, level, tmp, nbytes)
        ctx.waitall(c, xs, 2)
        _reduce_ordered(c, buf, tmp, count, nbytes, peer < r)
        mask <<= 1
        level += 1
    if r < 2 * rem:
        ctx.post_send(c, &xs[0], r - 1, TAG_FOLD_OUT, buf, nbytes)
        ctx.wait(c, &xs[0])
    return 0


cdef inline void _reduce_ordered(Coll *c, char *buf, char *tmp, int64_t count,
                                 int64_t nbytes, bint tmp_first) noexcept nogil:
    """buf = tmp <op> buf when tmp came from a lower rank, else buf <op> tmp:
    both partners then combine the same operands in the same order, so every
    rank ends with the same bits (MIN of 0.0 and -0.0, NaN payloads...)."""
    if tmp_first:
        c.fn(tmp, buf, count)
        memcpy(buf, tmp, nbytes)
    else:
        c.fn(buf, tmp, count)


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


cdef int64_t ring_scratch_bytes(Context ctx, Coll *c, const int64_t *lens) noexcept nogil:
    """Bytes of temporary space ring_reduce_scatter needs."""
    cdef int64_t i, longest = 0
    for i in range(ctx.size):
        longest = max(longest, lens[i])
    return (2 if ctx.size > 2 else 1) * longest * c.itemsize


cdef inline void _chunk_segment(const int64_t *offs, const int64_t *lens,
                                int64_t chunk, int64_t j, int64_t seg_el,
                                int64_t *lo, int64_t *ln) noexcept nogil:
    """Element offset and length of segment j of a chunk (may be empty)."""
    cdef int64_t a = min(j * seg_el, lens[chunk])
    lo[0] = offs[chunk] + a
    ln[0] = min(seg_el, lens[chunk] - a)


cdef int ring_reduce_scatter(Context ctx, Coll *c, char *buf,
                             const int64_t *offs, const int64_t *lens,
                             bint allgather, char *tmp) except -1 nogil:
    """Ring reduce-scatter over chunks (offs[i], lens[i]) in elements of buf:
    rank r ends with chunk r reduced over every rank; with `allgather`, a
    ring allgather then gives every rank every chunk.

    Each chunk is cut in segments that flow independently: a segment reduced
    at step s is sent on at step s+1 at once (and into the allgather after
    the last step), so reduction overlaps the transfers. At reduce-scatter
    step s a rank sends chunk r-s-1 and receives chunk r-s-2; at allgather
    step t it sends chunk r-t and receives chunk r-t-1. `tmp` holds
    ring_scratch_bytes() of incoming segments."""
    cdef int n = ctx.size, r = ctx.rank
    cdef int left = (r - 1 + n) % n, right = (r + 1) % n
    cdef int64_t isz = c.itemsize, longest = 0, i
    for i in range(n):
        longest = max(longest, lens[i])
    cdef int64_t seg_el = max(1, ctx.segment // isz)
    cdef int64_t nseg = max(1, (longest + seg_el - 1) // seg_el)
    cdef int64_t steps = n - 1, per = steps * nseg
    cdef int64_t s, j, t, lo, ln, lo2, ln2
    cdef int ntmp = 2 if steps > 1 else 1
    cdef Xfer *xs = <Xfer *>_alloc((4 if allgather else 2) * per * sizeof(Xfer))
    cdef Xfer *rs_recv = xs
    cdef Xfer *rs_send = xs + per
    cdef Xfer *ag_recv = xs + 2 * per
    cdef Xfer *ag_send = xs + 3 * per
    cdef char *cur
    if n == 1:
        free(xs)
        return 0
    try:
        for j in range(nseg):
            _chunk_segment(offs, lens, _mod(r - 1, n), j, seg_el, &lo, &ln)
            ctx.post_send(c, &rs_send[j], right, j, buf + lo * isz, ln * isz)
            _chunk_segment(offs, lens, _mod(r - 2, n), j, seg_el, &lo, &ln)
            ctx.post_recv(c, &rs_recv[j], left, j, tmp + j * seg_el * isz,
                          ln * isz)
        for s in range(steps):
            cur = tmp + (s % ntmp) * longest * isz
            for j in range(nseg):
                _chunk_segment(offs, lens, _mod(r - s - 2, n), j, seg_el, &lo, &ln)
                ctx.wait(c, &rs_recv[s * nseg + j])
                c.fn(buf + lo * isz, cur + j * seg_el * isz, ln)
                if s + 1 < steps:
                    ctx.post_send(c, &rs_send[(s + 1) * nseg + j], right,
                                  (s + 1) * nseg + j, buf + lo * isz, ln * isz)
                    _chunk_segment(offs, lens, _mod(r - s - 3, n), j, seg_el,
                                   &lo2, &ln2)
                    ctx.post_recv(c, &rs_recv[(s + 1) * nseg + j], left,
                                  (s + 1) * nseg + j,
                                  tmp + ((s + 1) % ntmp) * longest * isz
                                  + j * seg_el * isz, ln2 * isz)
                elif allgather:
                    # Segment j of our chunk r is complete: start passing it
                    # round, and expect chunk r-1 from the left.
                    ctx.post_send(c, &ag_send[j], right, per + j,
                                  buf + lo * isz, ln * isz)
                    _chunk_segment(offs, lens, _mod(r - 1, n), j, seg_el,
                                   &lo2, &ln2)
                    ctx.post_recv(c, &ag_recv[j], left, per + j,
                                  buf + lo2 * isz, ln2 * isz)
        if allgather:
            for t in range(steps):
                for j in range(nseg):
                    ctx.wait(c, &ag_recv[t * nseg + j])
                    if t + 1 < steps:
                        _chunk_segment(offs, lens, _mod(r - t - 1, n), j,
                                       seg_el, &lo, &ln)
                        ctx.post_send(c, &ag_send[(t + 1) * nseg + j], right,
                                      per + (t + 1) * nseg + j,
                                      buf + lo * isz, ln * isz)
                        _chunk_segment(offs, lens, _mod(r - t - 2, n), j,
                                       seg_el, &lo2, &ln2)
                        ctx.post_recv(c, &ag_recv[(t + 1) * nseg + j], left,
                                      per + (t + 1) * nseg + j,
                                      buf + lo2 * isz, ln2 * isz)
            ctx.waitall(c, ag_send, per)
        ctx.waitall(c, rs_send, per)
    finally:
        free(xs)
    return 0


cdef inline int64_t _mod(int64_t a, int64_t n) noexcept nogil:
    return ((a % n) + n) % n


cdef int run_allgatherv(Context ctx, Coll *c, char *buf, const int64_t *offs,
                        const int64_t *sizes) except -1 nogil:
    """Ring: at step t pass block r-t to the right, take block r-t-1 from
    the left."""
    cdef int n = ctx.size, r = ctx.rank, t, sb, rb
    cdef Xfer xs[2]
    for t in range(n - 1):
        sb = (r - t + n) % n
        rb = (r - t - 1 + n) % n
        ctx.post_send(c, &xs[1], (r + 1) % n, t, buf + offs[sb], sizes[sb])
        ctx.post_recv(c, &xs[0], (r - 1 + n) % n, t, buf + offs[rb], sizes[rb])
        ctx.waitall(c, xs, 2)
    return 0


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
    if algo == ALGO_AUTO:
        algo = (ALGO_RECURSIVE_DOUBLING if nbytes <= ctx.small_allreduce
                or count < n else ALGO_RING)
    if algo != ALGO_RING:
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
            ctx.post_send(c, xs, root, TAG_GATHER, acc + offs[r] * isz,
                          lens[r] * isz)
            ctx.wait(c, xs)
        else:
            xs = <Xfer *>_alloc(n * sizeof(Xfer))
            for i in range(n):
                if i != r:
                    ctx.post_recv(c, &xs[i], i, TAG_GATHER,
                                  out + offs[i] * isz, lens[i] * isz)
            if out != acc:
                memmove(out + offs[r] * isz, acc + offs[r] * isz, lens[r] * isz)
            for i in range(n):
                if i != r:
                    ctx.wait(c, &xs[i])
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
            ctx.post_send(c, &x, (vr - mask + root) % n, mask, acc, nbytes)
            ctx.wait(c, &x)
            return 0
        if vr + mask < n:
            ctx.post_recv(c, &x, (vr + mask + root) % n, mask, tmp, nbytes)
            ctx.wait(c, &x)
            c.fn(acc, tmp, count)
        mask <<= 1
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
            ctx.post_send(c, &xs[0], r + k, step, x, nbytes)
        if r - k >= 0:
            ctx.post_recv(c, &xs[1], r - k, step, tmp, nbytes)
            ctx.wait(c, &xs[1])
        if r + k < n:
            ctx.wait(c, &xs[0])
        if r - k >= 0:
            _reduce_ordered(c, x, tmp, count, nbytes, True)
        k <<= 1
        step += 1
    if not exclusive:
        if out != x:
            memmove(out, x, nbytes)
        return 0
    if r + 1 < n:
        ctx.post_send(c, &xs[0], r + 1, step, x, nbytes)
    if r > 0:
        ctx.post_recv(c, &xs[1], r - 1, step, out, nbytes)
        ctx.wait(c, &xs[1])
    if r + 1 < n:
        ctx.wait(c, &xs[0])
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
