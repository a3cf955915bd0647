# Exchange patterns several collectives share: the mixed-radix hypercube
# (radix_exchange: recursive halving and doubling, bcube), the segmented
# ring reduce-scatter (ring allreduce, ring reduce, ring reduce_scatter),
# the ring allgather, and reduction in a fixed operand order.


cdef void _reduce_ordered(Coll *c, char *buf, char *tmp, int64_t count,
                          int64_t nbytes, bint tmp_first) noexcept nogil:
    """buf = tmp <op> buf when tmp came from a lower rank, else buf <op> tmp:
    both partners then combine the same operands in the same order, so every
    rank ends with the same bits (MIN of 0.0 and -0.0, NaN payloads...)."""
    if tmp_first:
        c.fn(tmp, buf, count)
        memcpy(buf, tmp, nbytes)
    else:
        c.fn(buf, tmp, count)


cdef int _real_rank(int64_t v, int rem) noexcept nogil:
    """Real rank of virtual rank v when the first 2*rem ranks fold in pairs
    (virtual rank v < rem is the odd one of the pair)."""
    return <int>(2 * v + 1 if v < rem else v + rem)


cdef int64_t _radix_scratch(int vn, int vr, const int *radix, int k,
                            const int64_t *bo) noexcept nogil:
    """Elements of incoming partial results radix_exchange's reduce-scatter
    holds at once (the most over its steps)."""
    cdef int64_t w = vn, base = 0, most = 0, d, ln
    cdef int i
    for i in range(k):
        w //= radix[i]
        d = (vr // w) % radix[i]
        ln = bo[base + (d + 1) * w] - bo[base + d * w]
        most = max(most, (radix[i] - 1) * ln)
        base += d * w
    return most


cdef int radix_exchange(Context ctx, Coll *c, char *buf, int64_t isz, int vn,
                        int vr, int rem, const int *radix, int k,
                        const int64_t *bo, char *tmp, bint reduce_scatter,
                        bint allgather) except -1 nogil:
    """Reduce-scatter and/or allgather over vn virtual ranks arranged as a
    mixed-radix hypercube, vn = radix[0] x ... x radix[k-1] (all 2:
    recursive halving / doubling; wider: bcube). Virtual rank v owns block v,
    elements [bo[v], bo[v+1]) of buf (items of isz bytes); it is real rank
    _real_rank(v, rem).

    v's digits, most significant first, are d_0..d_{k-1}. At reduce-scatter
    step i the group of ranks that differ from v only in digit i share a
    range of blocks; it is cut in radix[i] parts, part j to the member with
    digit j: v sends every other member its part and reduces into its own
    the partial results they send (in a fixed order). After the last step
    v holds block v reduced over every rank, computed nowhere else. The
    allgather runs the steps backwards, each member sending its part to
    the others. `tmp` holds _radix_scratch() elements."""
    cdef int64_t bases[MAX_RADICES]
    cdef int64_t ws[MAX_RADICES]
    cdef int64_t w = vn, base = 0, lo, ln, mlo, mln
    cdef int digits[MAX_RADICES]
    cdef int i, j, jj, b, d, nx, maxb = 1
    cdef uint64_t tag
    for i in range(k):
        w //= radix[i]
        ws[i] = w
        digits[i] = <int>((vr // w) % radix[i])
        bases[i] = base
        base += digits[i] * w
        maxb = max(maxb, radix[i])
    cdef Xfer *xs = <Xfer *>_alloc(2 * maxb * sizeof(Xfer))
    try:
        if reduce_scatter:
            for i in range(k):
                b, d, w, base = radix[i], digits[i], ws[i], bases[i]
                tag = i + 1
                mlo = bo[base + d * w]
                mln = bo[base + (d + 1) * w] - mlo
                # Sends first, each member starting at a different peer.
                for j in range(1, b):
                    jj = (d + j) % b
                    lo = bo[base + jj * w]
                    ln = bo[base + (jj + 1) * w] - lo
                    post_send(ctx, c, &xs[j - 1], _real_rank(vr + (jj - d) * w, rem),
                              tag, buf + lo * isz, ln * isz)
                for j in range(1, b):
                    jj = (d + j) % b
                    post_recv(ctx, c, &xs[b - 2 + j],
                              _real_rank(vr + (jj - d) * w, rem), tag,
                              tmp + (j - 1) * mln * isz, mln * isz)
                for j in range(1, b):
                    wait_xfer(ctx, c, &xs[b - 2 + j])
                    c.fn(buf + mlo * isz, tmp + (j - 1) * mln * isz, mln)
                waitall(ctx, c, xs, b - 1)
        if allgather:
            for i in range(k - 1, -1, -1):
                b, d, w, base = radix[i], digits[i], ws[i], bases[i]
                tag = k + i + 1
                mlo = bo[base + d * w]
                mln = bo[base + (d + 1) * w] - mlo
                for j in range(1, b):
                    jj = (d + j) % b
                    post_send(ctx, c, &xs[j - 1], _real_rank(vr + (jj - d) * w, rem),
                              tag, buf + mlo * isz, mln * isz)
                for j in range(1, b):
                    jj = (d + j) % b
                    lo = bo[base + jj * w]
                    ln = bo[base + (jj + 1) * w] - lo
                    post_recv(ctx, c, &xs[b - 2 + j],
                              _real_rank(vr + (jj - d) * w, rem), tag,
                              buf + lo * isz, ln * isz)
                waitall(ctx, c, xs, 2 * (b - 1))
    finally:
        free(xs)
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
            post_send(ctx, c, &rs_send[j], right, j, buf + lo * isz, ln * isz)
            _chunk_segment(offs, lens, _mod(r - 2, n), j, seg_el, &lo, &ln)
            post_recv(ctx, c, &rs_recv[j], left, j, tmp + j * seg_el * isz,
                      ln * isz)
        for s in range(steps):
            cur = tmp + (s % ntmp) * longest * isz
            for j in range(nseg):
                _chunk_segment(offs, lens, _mod(r - s - 2, n), j, seg_el, &lo, &ln)
                wait_xfer(ctx, c, &rs_recv[s * nseg + j])
                c.fn(buf + lo * isz, cur + j * seg_el * isz, ln)
                if s + 1 < steps:
                    post_send(ctx, c, &rs_send[(s + 1) * nseg + j], right,
                              (s + 1) * nseg + j, buf + lo * isz, ln * isz)
                    _chunk_segment(offs, lens, _mod(r - s - 3, n), j, seg_el,
                                   &lo2, &ln2)
                    post_recv(ctx, c, &rs_recv[(s + 1) * nseg + j], left,
                              (s + 1) * nseg + j,
                              tmp + ((s + 1) % ntmp) * longest * isz
                              + j * seg_el * isz, ln2 * isz)
                elif allgather:
                    # Segment j of our chunk r is complete: start passing it
                    # round, and expect chunk r-1 from the left.
                    post_send(ctx, c, &ag_send[j], right, per + j,
                              buf + lo * isz, ln * isz)
                    _chunk_segment(offs, lens, _mod(r - 1, n), j, seg_el,
                                   &lo2, &ln2)
                    post_recv(ctx, c, &ag_recv[j], left, per + j,
                              buf + lo2 * isz, ln2 * isz)
        if allgather:
            for t in range(steps):
                for j in range(nseg):
                    wait_xfer(ctx, c, &ag_recv[t * nseg + j])
                    if t + 1 < steps:
                        _chunk_segment(offs, lens, _mod(r - t - 1, n), j,
                                       seg_el, &lo, &ln)
                        post_send(ctx, c, &ag_send[(t + 1) * nseg + j], right,
                                  per + (t + 1) * nseg + j,
                                  buf + lo * isz, ln * isz)
                        _chunk_segment(offs, lens, _mod(r - t - 2, n), j,
                                       seg_el, &lo2, &ln2)
                        post_recv(ctx, c, &ag_recv[(t + 1) * nseg + j], left,
                                  per + (t + 1) * nseg + j,
                                  buf + lo2 * isz, ln2 * isz)
            waitall(ctx, c, ag_send, per)
        waitall(ctx, c, rs_send, per)
    finally:
        free(xs)
    return 0


cdef inline int64_t _mod(int64_t a, int64_t n) noexcept nogil:
    return ((a % n) + n) % n


cdef int allgather_ring(Context ctx, Coll *c, char *buf, const int64_t *offs,
                        const int64_t *sizes) except -1 nogil:
    """Ring: at step t pass block r-t to the right, take block r-t-1 from
    the left."""
    cdef int n = ctx.size, r = ctx.rank, t, sb, rb
    cdef Xfer xs[2]
    for t in range(n - 1):
        sb = (r - t + n) % n
        rb = (r - t - 1 + n) % n
        post_send(ctx, c, &xs[1], (r + 1) % n, t, buf + offs[sb], sizes[sb])
        post_recv(ctx, c, &xs[0], (r - 1 + n) % n, t, buf + offs[rb], sizes[rb])
        waitall(ctx, c, xs, 2)
    return 0
