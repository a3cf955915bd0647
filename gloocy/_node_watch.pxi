# Calls over the pairs beside the segment (a small bcast's tree: its root
# writes into its children's rings and goes on, a reader waits for its
# parent alone) take no step, so a rank waiting in the segment would not
# see one, nor would a rank waiting on its pairs see a call through the
# segment. So each such call is published in its rank's control line
# (pair_calls, by seq), and each side looks at the other's:
# - a rank waiting in the segment for ranks not there yet looks, before it
#   sleeps, for a call of theirs over the pairs at our call's sequence
#   number or after (node_check_pair_calls);
# - a rank in a call over the pairs looks, as it starts and before it
#   sleeps, for a rank that arrived at our next step with a call at our
#   sequence number or before (node_watch), and sleeps on its `sleeping`
#   word too, so that such an arrival wakes it.
# Each side writes first (a phase, a published call), then fences, then
# looks: one of the two sees the other.

cdef enum:
    NODE_WRITING = 0xFFFFFFFFFFFFFFFF   # a published call's seq while it is written


cdef int node_pair_call(Context ctx, Coll *c) except -1 nogil:
    cdef Header *e = &ctx.node.ctl[ctx.rank].pair_calls[c.proto.seq % NODE_PAIR_CALLS]
    cdef Header h = c.proto
    ring_store(&e.seq, NODE_WRITING)
    ring_fence()
    h.seq = NODE_WRITING
    e[0] = h
    ring_store(&e.seq, c.proto.seq)
    ring_fence()
    c.watch = True
    return node_watch(ctx, c)


cdef int node_segment_call(Node nd, uint64_t seq, Header *h) noexcept nogil:
    """The first rank that arrived at our next step with a call at `seq`
    or before (its call in h), or -1."""
    cdef int j
    cdef uint64_t a = phase_a(nd)
    for j in range(nd.size):
        if j != nd.rank and ring_load(&nd.ctl[j].phase) >= a:
            h[0] = nd.ctl[j].fp[nd.step & 1]
            if h.seq <= seq:
                return j
    return -1


cdef int node_watch(Context ctx, Coll *c) except -1 nogil:
    cdef Header h
    cdef int j = node_segment_call(ctx.node, c.proto.seq, &h)
    if j >= 0:
        return _raise_node_mismatch(ctx, c, j, &h, True)
    return 0


cdef int node_watch_word(Context ctx, Coll *c, WordWait *w) noexcept nogil:
    cdef Header h
    cdef uint32_t *sleeping = &ctx.node.ctl[ctx.rank].sleeping
    sleeping_word(sleeping, w)
    ring_fence()
    if node_segment_call(ctx.node, c.proto.seq, &h) >= 0:
        flag_set(sleeping, NODE_AWAKE)
        return -1
    return 1


cdef void node_unwatch_word(Context ctx) noexcept nogil:
    flag_set(&ctx.node.ctl[ctx.rank].sleeping, NODE_AWAKE)


cdef int node_pair_call_of(Node nd, int j, uint64_t seq, Header *h) noexcept nogil:
    """Rank j's published call over the pairs at `seq` (1), else its
    latest after `seq` (2), in h; 0: none."""
    cdef const Header *e
    cdef Header got
    cdef uint64_t s
    cdef int k, found = 0
    for k in range(NODE_PAIR_CALLS):
        e = &nd.ctl[j].pair_calls[k]
        s = ring_load(&e.seq)
        if s == NODE_WRITING or s < seq:
            continue
        got = e[0]
        ring_fence()
        if ring_load(&e.seq) != s or got.kind == KIND_BYE:
            continue                  # rewritten meanwhile, or never written
        got.seq = s
        if s == seq:
            h[0] = got
            return 1
        if found == 0 or s > h.seq:
            h[0] = got
            found = 2
    return found


cdef int node_check_pair_calls(Context ctx, Coll *c, uint64_t phase,
                               int who) except -1 nogil:
    """A wait for `phase` that is about to sleep: MismatchError if a rank
    not there yet made a call over the pairs at the sequence number of our
    call at that step, or after: it called something else."""
    cdef Coll mine = c[0]
    cdef Header h
    cdef int j
    if ring_load(&ctx.node.ctl[ctx.node.rank].phase) >= phase:
        # we arrived there: our call at that step is the one published
        mine.proto = ctx.node.ctl[ctx.node.rank].fp[((phase - 1) // 2) & 1]
    for j in range(ctx.node.size):
        if (j == ctx.node.rank or (who >= 0 and j != who)
                or ring_load(&ctx.node.ctl[j].phase) >= phase):
            continue
        if (node_pair_call_of(ctx.node, j, mine.proto.seq, &h)
                and ring_load(&ctx.node.ctl[j].phase) < phase):   # not there since
            return _raise_node_mismatch(ctx, &mine, j, &h, False)
    return 0
