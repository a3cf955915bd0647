# Two-level forms of the collectives that move blocks to or from one rank,
# or between every pair (gather(v), scatter(v), alltoall(v)), and of
# reduce_scatter, for a communicator whose ranks span hosts (_hier.pxi has
# the layout, the derived contexts and the others). Each host's blocks meet
# at its leader through the node segment, the leaders exchange one message
# per pair of hosts, and the leader hands them out inside its host: the
# bytes that cross the network are the flat algorithms', in a message per
# host rather than per rank.
#
# A non-root rank of gather and scatter knows only its own block's size,
# so the leaders of the other hosts first gather their ranks' sizes (8
# bytes each, through the segment); in the root's host the root knows them
# all and tells its leader when it is not the leader itself.


cdef Buf _of_i64(I64 a):
    """A Buf over an I64's values (sizes sent to a leader)."""
    return _raw(<char *>a.v, a.n * 8, DT_BYTES, 1)


cdef I64 _local_sizes(Hier h, int64_t mine, bint lead, bint uniform,
                      double end):
    """Each rank of our host's size `mine`, at its leader (None elsewhere);
    uniform: every rank's is ours (nothing to gather)."""
    cdef int nl = len(h.hosts[h.host])
    cdef I64 got = I64.zeros(nl) if lead else None
    cdef I64 one = I64.filled(1, mine)
    if nl == 1:                           # we lead a host of one
        return one
    if uniform:
        return I64.filled(nl, mine) if lead else None
    h.on(h.local).gatherv(_of_i64(one), _of_i64(got) if lead else None,
                          [8] * nl, None, 0, _left(end), SHM)
    return got


cdef tuple _remote_parts(Hier h, I64 sizes):
    """(sizes, offsets) of each host's part, in host order, laid end to
    end, with the part of the host we are on left empty."""
    host_sizes, host_offs, at = [], [], 0
    for g, ranks in enumerate(h.hosts):
        host_offs.append(at)
        part = 0 if g == h.host else sum(sizes.v[r] for r in ranks)
        host_sizes.append(part)
        at += part
    return host_sizes, host_offs, at


cdef void _move_remote_blocks(Hier h, int n, int nh, int rh, char *parts,
                              char *user, I64 sizes, I64 offs,
                              bint gathering) noexcept nogil:
    """Copy the blocks of the ranks off host rh between `parts`, laid end to
    end in host order (_remote_parts), and their places in `user`: into
    user when gathering, out of it when scattering."""
    cdef int g, r
    cdef int64_t at = 0
    for g in range(nh):
        if g == rh:
            continue
        for r in range(n):                # (a host's ranks ascend)
            if h.host_of[r] == g:
                if gathering:
                    memcpy(user + offs.v[r], parts + at, sizes.v[r])
                else:
                    memcpy(parts + at, user + offs.v[r], sizes.v[r])
                at += sizes.v[r]


cdef object hier_gatherv(Context ctx, Buf sb, Buf rb, I64 sizes, I64 offs,
                         int root, bint uniform, object timeout):
    """Inside the root's host the root gathers straight into its recvbuf;
    each other host's leader gathers its host's blocks and sends them, as
    one part, to the root's host's leader, which passes the parts on to
    the root unless it is the root. sb None: the root's block is in place;
    rb, sizes, offs: the root's only."""
    cdef Hier h = <Hier>ctx.hier
    cdef double end = _end(ctx, timeout)
    cdef int rh = h.host_of[root], lr = h.local_rank[root], nh = len(h.hosts)
    cdef bint lead = h.leaders is not None, at_root = ctx.rank == root
    cdef list mine = h.hosts[h.host]
    cdef I64 lsizes
    cdef int64_t total
    cdef char *whole
    try:
        if h.host != rh:
            lsizes = _local_sizes(h, sb.nbytes, lead, uniform, end)
            if not lead:
                h.on(h.local).gatherv(sb, None, None, None, 0, _left(end), SHM)
                return
            total = lsizes.total()
            part = _raw(ctx.work(max(total, 1)), total, DT_BYTES, 1)
            h.on(h.local).gatherv(sb, part, lsizes, None, 0, _left(end), SHM)
            h.on(h.leaders).gatherv(part, None, None, None, rh, _left(end))
            return
        if at_root:
            h.on(h.local).gatherv(sb, rb, [sizes.v[r] for r in mine],
                                  [offs.v[r] for r in mine], lr, _left(end),
                                  SHM)
        else:
            h.on(h.local).gatherv(sb, None, None, None, lr, _left(end), SHM)
        if len(h.hosts) == 1 or not (at_root or lead):
            return
        if not at_root:                   # the root's leader, not the root
            sizes = I64.zeros(ctx.size)
            h.on(h.local).recv(_of_i64(sizes), lr, 0, _left(end))
        elif not lead:
            h.on(h.local).send(_of_i64(sizes), 0, 0, _left(end))
        host_sizes, host_offs, total = _remote_parts(h, sizes)
        whole = ctx.work(max(total, 1))
        parts = _raw(whole, total, DT_BYTES, 1)
        if lead:
            h.on(h.leaders).gatherv(None, parts, host_sizes, host_offs, rh,
                                    _left(end))
            if not at_root:
                h.on(h.local).send(parts, lr, 0, _left(end))
                return
        else:
            h.on(h.local).recv(parts, 0, 0, _left(end))
    except BaseException as e:
        _explain(ctx, h, e, "gather")
        raise
    with nogil:
        _move_remote_blocks(h, ctx.size, nh, rh, whole, rb.ptr, sizes,
                            offs, True)


cdef object hier_scatterv(Context ctx, Buf sb, Buf rb, I64 sizes, I64 offs,
                          int root, bint uniform, object timeout):
    """The mirror of hier_gatherv: the root's host's leader (given them by
    the root if it is not the root) sends each other host's leader its
    host's blocks as one part, which that leader scatters inside its host;
    the root scatters its own host's blocks itself. rb None: the root keeps
    its block; sb, sizes, offs: the root's only."""
    cdef Hier h = <Hier>ctx.hier
    cdef double end = _end(ctx, timeout)
    cdef int rh = h.host_of[root], lr = h.local_rank[root], nh = len(h.hosts)
    cdef bint lead = h.leaders is not None, at_root = ctx.rank == root
    cdef list mine = h.hosts[h.host]
    cdef I64 lsizes
    cdef int64_t total
    cdef char *whole
    try:
        if h.host != rh:
            lsizes = _local_sizes(h, rb.nbytes, lead, uniform, end)
            if not lead:
                h.on(h.local).scatterv(None, rb, None, None, 0, _left(end),
                                       SHM)
                return
            total = lsizes.total()
            part = _raw(ctx.work(max(total, 1)), total, DT_BYTES, 1)
            h.on(h.leaders).scatterv(None, part, None, None, rh, _left(end))
            h.on(h.local).scatterv(part, rb, lsizes, None, 0, _left(end), SHM)
            return
        if at_root or lead:
            if not at_root:
                sizes = I64.zeros(ctx.size)
                h.on(h.local).recv(_of_i64(sizes), lr, 0, _left(end))
            host_sizes, host_offs, total = _remote_parts(h, sizes)
            whole = ctx.work(max(total, 1))
            parts = _raw(whole, total, DT_BYTES, 1)
            if at_root:
                with nogil:
                    _move_remote_blocks(h, ctx.size, nh, rh, whole, sb.ptr,
                                        sizes, offs, False)
                if not lead:
                    h.on(h.local).send(_of_i64(sizes), 0, 0, _left(end))
                    h.on(h.local).send(parts, 0, 0, _left(end))
            else:
                h.on(h.local).recv(parts, lr, 0, _left(end))
            if lead:
                h.on(h.leaders).scatterv(parts, None, host_sizes, host_offs,
                                         rh, _left(end))
        if at_root:
            h.on(h.local).scatterv(sb, rb, [sizes.v[r] for r in mine],
                                   [offs.v[r] for r in mine], lr, _left(end),
                                   SHM)
        else:
            h.on(h.local).scatterv(None, rb, None, None, lr, _left(end), SHM)
    except BaseException as e:
        _explain(ctx, h, e, "scatter")
        raise


cdef object hier_reduce_scatter(Context ctx, Buf sb, Buf rb, I64 lens, int op,
                                object timeout):
    """Reduce the whole input to each host's leader, reduce_scatter across
    the leaders by host (each gets its host's blocks, reordered into host
    order first where a host's ranks are not consecutive), scatter inside
    each host. lens: each rank's block in elements; sb holds the input (it
    is rb in place); each rank's block lands at the start of its rb."""
    cdef Hier h = <Hier>ctx.hier
    cdef double end = _end(ctx, timeout)
    cdef bint lead = h.leaders is not None
    cdef int n = ctx.size, nh = len(h.hosts), r, g
    cdef int64_t isz = sb.itemsize, nbytes = lens.total() * isz, at = 0
    cdef I64 offs = lens.prefix()
    cdef list mine = h.hosts[h.host]
    cdef Buf inbuf = _raw(sb.ptr, nbytes, sb.dtype, isz)
    cdef Buf out = _raw(rb.ptr, lens.v[ctx.rank] * isz, rb.dtype, isz)
    cdef char *acc
    cdef char *order
    cdef bint in_rank_order = True
    for r in range(1, n):
        if h.host_of[r] < h.host_of[r - 1]:
            in_rank_order = False
    try:
        if not lead:
            h.on(h.local).reduce(inbuf, None, op, 0, _left(end), SHM)
            h.on(h.local).scatterv(None, out, None, None, 0, _left(end), SHM)
            return
        acc = ctx.work(max(nbytes, isz))
        h.on(h.local).reduce(inbuf, _raw(acc, nbytes, sb.dtype, isz), op, 0,
                             _left(end), SHM)
        if not in_rank_order:             # blocks into host order
            order = ctx.scratch(max(nbytes, isz))
            with nogil:
                for g in range(nh):
                    for r in range(n):
                        if h.host_of[r] == g:
                            memcpy(order + at, acc + offs.v[r] * isz,
                                   lens.v[r] * isz)
                            at += lens.v[r] * isz
                memcpy(acc, order, nbytes)
        host_lens = [sum(lens.v[r] for r in ranks) for ranks in h.hosts]
        h.on(h.leaders).reduce_scatter(None, _raw(acc, nbytes, sb.dtype, isz),
                                       host_lens, op, _left(end))
        h.on(h.local).scatterv(
            _raw(acc, host_lens[h.host] * isz, DT_BYTES, 1), out,
            [lens.v[r] * isz for r in mine], None, 0, _left(end), SHM)
    except BaseException as e:
        _explain(ctx, h, e, "reduce_scatter")
        raise


cdef object hier_alltoallv(Context ctx, Buf sb, I64 soffs, I64 ssizes, Buf rb,
                           I64 roffs, I64 rsizes, bint uniform,
                           object timeout):
    """Each host's leader gathers its ranks' send blocks (and their tables
    of block sizes), sends each other host's leader, in one message, the
    blocks its ranks send that host's ranks, and scatters to each of its
    ranks everything that rank receives, in rank order (_Exchange).
    uniform: every block of every rank has our blocks' size (Alltoall), so
    the leader knows the table without gathering it."""
    cdef Hier h = <Hier>ctx.hier
    cdef double end = _end(ctx, timeout)
    cdef bint lead = h.leaders is not None
    cdef int n = ctx.size, nl = len(h.hosts[h.host]), r
    cdef I64 row = I64.zeros(2 * n)        # our sizes: sent, then received
    cdef int64_t sent = ssizes.total(), got = rsizes.total(), at = 0
    cdef bint send_direct = True, recv_direct = True
    cdef char *packed
    cdef char *into
    cdef _Exchange x = None
    cdef I64 table = None                 # a leader's: its ranks' rows
    for r in range(n):
        row.v[r] = ssizes.v[r]
        row.v[n + r] = rsizes.v[r]
        if r and (h.host_of[r] < h.host_of[r - 1]
                  or soffs.v[r] != soffs.v[r - 1] + ssizes.v[r - 1]):
            send_direct = False
        if r and roffs.v[r] != roffs.v[r - 1] + rsizes.v[r - 1]:
            recv_direct = False
    try:
        table = I64.zeros(nl * 2 * n) if lead else None
        if uniform:                       # every row is ours: no gather
            if lead:
                for r in range(nl * 2 * n):
                    table.v[r] = row.v[0]
        elif nl > 1:
            h.on(h.local).gatherv(_of_i64(row), _of_i64(table) if lead
                                  else None, [16 * n] * nl, None, 0,
                                  _left(end), SHM)
        elif lead:
            table = row
        if lead:
            x = _Exchange.plan(ctx, h, table)
            _host_order(h, sb, soffs, ssizes, x.area + x.g_at)
            h.on(h.local).gatherv(None, _raw(x.area + x.g_at, x.g_len,
                                             DT_BYTES, 1),
                                  x.p_len, None, 0, _left(end), SHM)
            x.to_leaders()
            h.on(h.leaders).alltoallv(
                _raw(x.area + x.s_at, x.s_len, DT_BYTES, 1), x.s_sizes, None,
                _raw(x.area + x.r_at, x.r_len, DT_BYTES, 1), x.r_sizes, None,
                _left(end))
            x.check_received()
            x.to_ranks()
            q = _raw(x.area + x.q_at, x.q_len, DT_BYTES, 1)
        else:
            if send_direct:
                packed = sb.ptr + soffs.v[0]
            else:
                packed = ctx.work(max(sent, 1))
                _host_order(h, sb, soffs, ssizes, packed)
            h.on(h.local).gatherv(_raw(packed, sent, DT_BYTES, 1), None, None,
                                  None, 0, _left(end), SHM)
            q = None
        into = rb.ptr + roffs.v[0] if recv_direct else ctx.scratch(max(got, 1))
        h.on(h.local).scatterv(q, _raw(into, got, DT_BYTES, 1),
                               x.q_sizes if lead else None, None, 0,
                               _left(end), SHM)
    except BaseException as e:
        _explain(ctx, h, e, "alltoall")
        raise
    if not recv_direct:
        with nogil:
            for r in range(n):
                memcpy(rb.ptr + roffs.v[r], into + at, rsizes.v[r])
                at += rsizes.v[r]


cdef int _host_order(Hier h, Buf sb, I64 soffs, I64 ssizes,
                     char *packed) except -1:
    """Our send blocks packed end to end in host order (hosts in order,
    each host's ranks ascending), as the leaders exchange them."""
    cdef int64_t at = 0
    cdef int r
    for ranks in h.hosts:
        for r in ranks:
            memcpy(packed + at, sb.ptr + soffs.v[r], ssizes.v[r])
            at += ssizes.v[r]
    return 0


cdef class _Exchange:
    """A leader's plan of a two-level alltoallv, from its host's table of
    sizes (local rank i: row i, 2n int64: what it sends each rank, then
    what it receives from each). One work area holds, in turn:
      G: the host's ranks' send blocks, each rank's in host order;
      S: for each other host, a header (the size of each block our ranks
         send its ranks) and those blocks, by sender then receiver;
      R: the same from each other host, for our ranks;
      Q: for each of our ranks, every block it receives, in rank order."""
    cdef Context ctx
    cdef Hier h
    cdef I64 table
    cdef int n, nl
    cdef char *area
    cdef int64_t g_at, g_len, s_at, s_len, r_at, r_len, q_at, q_len
    cdef I64 p_len          # each local rank's send total (its part of G)
    cdef I64 g_off          # where it starts in G
    cdef I64 s_sizes, r_sizes, s_offs, r_offs   # per host, in S and R
    cdef I64 q_sizes, q_offs                    # per local rank, in Q

    cdef int64_t sends(self, int i, int d):
        return self.table.v[<int64_t>i * 2 * self.n + d]

    cdef int64_t receives(self, int j, int s):
        return self.table.v[<int64_t>j * 2 * self.n + self.n + s]

    @staticmethod
    cdef _Exchange plan(Context ctx, Hier h, I64 table):
        cdef _Exchange x = _Exchange.__new__(_Exchange)
        cdef int n = ctx.size, nl = len(h.hosts[h.host]), nh = len(h.hosts)
        cdef int i, j, g, s, d
        cdef int64_t part
        cdef list mine = h.hosts[h.host]
        x.ctx, x.h, x.table, x.n, x.nl = ctx, h, table, n, nl
        for i in range(nl):                 # blocks inside the host agree
            for j in range(nl):
                if x.sends(i, mine[j]) != x.receives(j, mine[i]):
                    raise MismatchError(
                        f"alltoallv: rank {mine[i]} sends rank {mine[j]} "
                        f"{x.sends(i, mine[j])} bytes but rank {mine[j]} "
                        f"expects {x.receives(j, mine[i])}")
        x.p_len, x.g_off = I64.zeros(nl), I64.zeros(nl)
        for i in range(nl):
            x.g_off.v[i] = x.g_len
            for d in range(n):
                x.p_len.v[i] += x.sends(i, d)
            x.g_len += x.p_len.v[i]
        x.s_sizes, x.r_sizes = I64.zeros(nh), I64.zeros(nh)
        for g in range(nh):
            if g == h.host:
                continue
            theirs = h.hosts[g]
            x.s_sizes.v[g] = x.r_sizes.v[g] = 8 * nl * len(theirs)
            for i in range(nl):
                for d in theirs:
                    x.s_sizes.v[g] += x.sends(i, d)
            for s in theirs:
                for j in range(nl):
                    x.r_sizes.v[g] += x.receives(j, s)
        x.s_offs, x.r_offs = x.s_sizes.prefix(), x.r_sizes.prefix()
        x.s_len, x.r_len = x.s_sizes.total(), x.r_sizes.total()
        x.q_sizes = I64.zeros(nl)
        for j in range(nl):
            for s in range(n):
                x.q_sizes.v[j] += x.receives(j, s)
        x.q_offs, x.q_len = x.q_sizes.prefix(), x.q_sizes.total()
        x.s_at = x.g_at + x.g_len
        x.r_at = x.s_at + x.s_len
        x.q_at = x.r_at + x.r_len
        x.area = ctx.work(max(x.q_at + x.q_len, 1))
        return x

    cdef int to_leaders(self) except -1:
        """S from G: each other host's header and blocks."""
        cdef Hier h = self.h
        cdef int i, g, d
        cdef int64_t at, src, width
        cdef int64_t *head
        for g in range(len(h.hosts)):
            if g == h.host:
                continue
            theirs = h.hosts[g]
            at = self.s_at + self.s_offs.v[g]
            head = <int64_t *>(self.area + at)
            for i in range(self.nl):
                for k, d in enumerate(theirs):
                    head[i * len(theirs) + k] = self.sends(i, d)
            at += 8 * self.nl * len(theirs)
            for i in range(self.nl):
                # host g's blocks lie together in rank i's part of G
                src = self.g_at + self.g_off.v[i] + self._before(i, g)
                width = sum(self.sends(i, d) for d in theirs)
                memcpy(self.area + at, self.area + src, width)
                at += width
        return 0

    cdef int64_t _before(self, int i, int g):
        """Bytes local rank i sends hosts before host g (in host order)."""
        cdef int64_t b = 0
        for k in range(g):
            for d in self.h.hosts[k]:
                b += self.sends(i, d)
        return b

    cdef int check_received(self) except -1:
        """Each other host's header names the sizes our ranks expect."""
        cdef Hier h = self.h
        cdef list mine = h.hosts[h.host]
        cdef int64_t *head
        cdef int g, j, k
        for g in range(len(h.hosts)):
            if g == h.host:
                continue
            theirs = h.hosts[g]
            head = <int64_t *>(self.area + self.r_at + self.r_offs.v[g])
            for k, s in enumerate(theirs):
                for j in range(self.nl):
                    if head[k * self.nl + j] != self.receives(j, s):
                        raise MismatchError(
                            f"alltoallv: rank {s} sends rank {mine[j]} "
                            f"{head[k * self.nl + j]} bytes but rank "
                            f"{mine[j]} expects {self.receives(j, s)}")
        return 0

    cdef int to_ranks(self) except -1:
        """Q from G (our host's blocks) and R (the others')."""
        cdef Hier h = self.h
        cdef list mine = h.hosts[h.host]
        cdef int n = self.n, nl = self.nl, j, s, i, g, d
        cdef I64 src = I64.zeros(<int64_t>n * nl)   # where block s -> j lies
        cdef int64_t at, size
        for i in range(nl):                 # our host's ranks' blocks, in G
            at = self.g_at + self.g_off.v[i]
            for ranks in h.hosts:
                for d in ranks:
                    if h.host_of[d] == h.host:
                        src.v[<int64_t>mine[i] * nl + h.local_rank[d]] = at
                    at += self.sends(i, d)
        for g in range(len(h.hosts)):       # the others', in R
            if g == h.host:
                continue
            theirs = h.hosts[g]
            at = self.r_at + self.r_offs.v[g] + 8 * nl * len(theirs)
            for s in theirs:
                for j in range(nl):
                    src.v[<int64_t>s * nl + j] = at
                    at += self.receives(j, s)
        with nogil:
            for j in range(nl):
                at = self.q_at + self.q_offs.v[j]
                for s in range(n):
                    size = self.table.v[<int64_t>j * 2 * n + n + s]
                    memcpy(self.area + at,
                           self.area + src.v[<int64_t>s * nl + j], size)
                    at += size
        return 0
