# The progress engine: post a call's transfers, then drive every pair
# without the GIL until they are done: look again and again for a while
# (keep_looking: spin where ranks <= CPUs, yield the CPU between looks
# where they outnumber them), then block in poll(2) in slices so Ctrl-C
# and deadlines work.
# Each drive also runs the unfinished nonblocking collectives of the links
# on (_schedule.pxi), so any wait makes progress on them.
# The links' lock is held throughout, and dropped only to sleep or, between
# spins, to let other threads at the links.


# Rank threads taking the GIL back as their calls end queue for it, one
# waiting for the GIL at a time (see _gil_queue.h, declared in _context.pxi:
# hundreds waiting at once each woke every 5 ms and took the CPU from the work).
if gloocy_gil_queue_init() != 0:
    raise OSError("pthread_atfork failed for the GIL queue")


cdef void prepare_xfer(Coll *c, Xfer *x, uint64_t tag, char *buf,
                       int64_t n) noexcept nogil:
    x.buf = buf
    x.nbytes = n
    x.done = 0
    x.hdr = c.proto
    x.hdr.tag = tag
    x.hdr.length = <uint64_t>n
    x.next = NULL
    x.flags = 0
    x.state = XFER_POSTED


cdef int post_send(Context ctx, Coll *c, Xfer *x, int peer, uint64_t tag,
                   const char *buf, int64_t n) except -1 nogil:
    prepare_xfer(c, x, tag, <char *>buf, n)
    return (<Pair>pair_of(ctx, peer)).post_send(x)


cdef int post_recv(Context ctx, Coll *c, Xfer *x, int peer, uint64_t tag,
                   char *buf, int64_t n) except -1 nogil:
    prepare_xfer(c, x, tag, buf, n)
    return (<Pair>pair_of(ctx, peer)).post_recv(x)


cdef int progress_all(Context ctx) except -1 nogil:
    # Only the connected pairs (ctx._conn): UNCONNECTED has nothing to move,
    # so a rank of thousands looks at the few peers it talks to.
    cdef int i, moved = 0
    cdef bint everyone = ctx.links.wild_head is not NULL  # any source may send
    if ctx.links.arrivals:              # peers dialed us (lazy connections)
        moved = install_arrivals(ctx.links)
    for i in range(ctx._nconn):
        if (everyone or (<Pair>ctx._conn[i]).busy()
                or (<Pair>ctx._conn[i]).acks is not NULL):
            moved |= (<Pair>ctx._conn[i]).progress()
            if (<Pair>ctx._conn[i]).acks is not NULL:
                moved |= (<Pair>ctx._conn[i]).flush_acks()   # answer Ssends
    if ctx.links.scheds is not NULL:    # nonblocking collectives run on
        moved |= advance_schedules(ctx.links)
    if moved and ctx.links.nsleepers:
        ctx.links.wake()
    return moved


cdef int wait_xfer(Context ctx, Coll *c, Xfer *x) except -1 nogil:
    cdef int64_t since = 0, budget = -1
    cdef bint slept = False
    while x.state != XFER_DONE:
        if progress_all(ctx):
            since = 0
            continue
        if x.state == XFER_DONE:
            break
        if since == 0:
            since = now_ns()
            if budget < 0:
                budget = look_budget(ctx)
        if keep_looking(ctx, since, budget):
            continue
        if c.watch:               # a mismatch with a node call: raise now
            node_watch(ctx, c)
        block_poll(ctx, c)        # (still nothing moved: sleep again)
        slept = True
    if budget >= 0:
        look_learn(ctx, budget, slept)
    return 0


cdef int keep_looking(Context ctx, int64_t since, int64_t budget) except -1 nogil:
    """A wait that has found nothing to move since `since` (ns): 1 after a
    spin (within spin_ns) or a yield of the CPU (after it), to look again;
    0 once `budget` ns are spent: sleep now."""
    cdef int64_t t = now_ns() - since
    if t >= budget:
        return 0
    if t < ctx.spin_ns:
        return pause(ctx) + 1
    if ctx.links.users > 1 or ctx.links.contended:
        ctx.links.leave()
        sched_yield()             # a rank queued on our CPU runs now
        ctx.links.enter()
    else:
        sched_yield()
    if ctx.links.failed:
        return _raise_links_failed(ctx)
    return 1


cdef int64_t look_budget(Context ctx) noexcept nogil:
    return looks_budget(&ctx.links.looks, ctx.spin_ns + ctx.links.yield_ns)


cdef void look_learn(Context ctx, int64_t budget, bint slept) noexcept nogil:
    learn_looks(&ctx.links.looks, ctx.spin_ns + ctx.links.yield_ns, budget, slept)


# Looking pays while peers answer within the look; when the host is busier
# than its ranks (other processes hold the CPUs), a rank that looks keeps a
# CPU from the peer it waits for, and a sleeper, which the kernel runs as
# soon as it is woken, gets its answer sooner. So how long a wait looks
# adapts: doubled (up to `most`) each time a wait ends within its look,
# halved (down to LOOK_FLOOR_NS) each time one has to sleep; after
# `probe_every` sleeps in a row, one wait looks the whole time, to see
# whether the CPUs are free again. (Measured for the node waits: see the
# top of _node.pxi.)

cdef int64_t looks_budget(Looks *k, int64_t most) noexcept nogil:
    if k.misses >= k.probe_every:
        return most
    return min(k.now_ns, most)


cdef void learn_looks(Looks *k, int64_t most, int64_t budget, bint slept) noexcept nogil:
    """A wait that looked `budget` ns ended in its look, or slept (a probe
    that slept only makes the next probe wait twice as long)."""
    if not slept:
        k.now_ns = min(2 * max(budget, LOOK_FLOOR_NS), most)
        k.misses = 0
        k.probe_every = LOOK_PROBE_MIN
    elif k.misses >= k.probe_every:
        k.misses = 0
        k.probe_every = min(2 * k.probe_every, LOOK_PROBE_MAX)
    else:
        k.now_ns = max(budget // 2, LOOK_FLOOR_NS)
        k.misses += 1


cdef int waitall(Context ctx, Coll *c, Xfer *xs, int64_t n) except -1 nogil:
    cdef int64_t i
    for i in range(n):
        wait_xfer(ctx, c, &xs[i])
    return 0


cdef int pause(Context ctx) except -1 nogil:
    """Between two spins: let another thread at the links, and stop if
    one of them failed (our transfers are forgotten then)."""
    if ctx.links.users > 1 or ctx.links.contended:
        ctx.links.leave()
        ctx.links.enter()
    if ctx.links.failed:
        return _raise_links_failed(ctx)
    return 0


cdef int block_poll(Context ctx, Coll *c) except -1 nogil:
    """Sleep in poll(2) until some pair can move, another thread wakes
    us (it moved bytes, maybe ours), a slice passes or the deadline
    comes; then give pending signals (Ctrl-C) a chance. The links' lock
    is dropped meanwhile."""
    cdef pollfd fds[65]
    cdef int at[65]
    cdef pollfd *pfds = fds
    cdef int *pairs_at = at
    cdef int i, n = 0, r, err
    cdef uint64_t drained
    cdef bint sleeping = False
    cdef short events
    cdef int64_t left = c.deadline - now_ns()
    if left <= 0:
        return _raise_timeout(ctx, c)
    if ctx.links.arrivals:
        return 0                  # a peer dialed us: progress_all installs it
    if (not (ctx.links.users > 1 or ctx.links.contended
             or ctx.links.wild_head is not NULL)
            and block_on_words(ctx, c, min(sleep_slice_ms(ctx) * 1000000, left))):
        return 0
    if ctx._nconn > 64:
        pfds = <pollfd *>malloc((ctx._nconn + 1) * sizeof(pollfd))
        pairs_at = <int *>malloc((ctx._nconn + 1) * sizeof(int))
        if pfds is NULL or pairs_at is NULL:
            free(pfds)
            free(pairs_at)
            with gil:
                raise MemoryError()
    try:
        for i in range(ctx._nconn):      # the connected pairs (see progress_all)
            events = (<Pair>ctx._conn[i]).wait_events()
            if events:
                pfds[n].fd = (<Pair>ctx._conn[i]).wait_fd()
                pfds[n].events = events
                pfds[n].revents = 0
                pairs_at[n] = i
                n += 1
        if (ctx.links.users > 1 or ctx.links.contended
                or ctx.links.wild_head is not NULL or ctx._nconn < ctx.size - 1):
            # Others (contexts, threads) may move our bytes or send us one
            # while we sleep, or connect to us to send one: let them wake us.
            if ctx.has_efd() and ctx.links.add_sleeper(ctx._efd):
                sleeping = True
                pfds[n].fd = ctx._efd
                pfds[n].events = POLLIN
                pfds[n].revents = 0
                pairs_at[n] = -1
                n += 1
            elif n == 0:
                left = 1          # cannot be woken: nap, look again
        ctx.links.leave()
        r = poll(pfds, n, <int>min(sleep_slice_ms(ctx), left // 1000000 + 1))
        err = errno
        ctx.links.enter()
        if sleeping:
            ctx.links.drop_sleeper(ctx._efd)
            c_read(ctx._efd, &drained, sizeof(drained))
        if ctx.links.failed:
            return _raise_links_failed(ctx)
        if r < 0 and err != EINTR:
            return _raise_poll_error(err)
        if r <= 0:
            ctx.links.leave()
            try:
                _check_signals()
            finally:
                ctx.links.enter()
        else:
            # Pairs with nothing posted are polled only to notice a peer
            # that hangs up; let them read what woke them.
            for i in range(n):
                if (pairs_at[i] >= 0 and pfds[i].revents
                        and not (<Pair>ctx._conn[pairs_at[i]]).busy()):
                    (<Pair>ctx._conn[pairs_at[i]]).progress()
    finally:
        if pfds is not fds:
            free(pfds)
            free(pairs_at)
    return 0


from libc.errno cimport EAGAIN, ENOSYS

cdef extern from "_futex.h" nogil:
    int futex_sleep_any(void *w, int n, int64_t ns)

cdef bint words_unsupported = False  # futex_waitv(2) is missing (Linux < 5.16)


cdef int block_on_words(Context ctx, Coll *c, int64_t ns) except -1 nogil:
    """block_poll where every pair sleeps on futex words (shared-memory
    pairs) and no other thread may wake us: sleep on them, up to `ns`. 1
    if it slept or a pair is ready; 0: sleep in poll(2) instead. A dead
    peer wakes no futex: when the sleep ends without a wake-up, the pairs
    look at their sockets (a dead process has closed its) and Ctrl-C gets
    its chance. A call that watches the node segment (c.watch) sleeps on
    its word there too, which a rank arriving in the segment wakes. While
    some pairs are not connected yet (lazy connections), a peer may dial
    us to send what we wait for: we sleep on the links' arrived_word too,
    which Links.note_arrival bumps and wakes."""
    global words_unsupported
    cdef WordWait w[WORDS_MAX]
    cdef int i, k, n = 0, r, err, watched = 0, first
    if words_unsupported:
        return 0
    if ctx._nconn < ctx.size - 1:
        if ctx.links.arrivals:
            return 1                  # look again: progress_all installs it
        w[0].val = ctx.links.arrived_word    # (it changes under the lock only)
        w[0].uaddr = <uint64_t><size_t>&ctx.links.arrived_word
        w[0].flags = WORD_U32
        w[0]._reserved = 0
        n = 1
    first = n                         # the pairs' words start there
    for i in range(ctx._nconn):     # the connected pairs (see progress_all)
        k = (<Pair>ctx._conn[i]).wait_words(w + n, WORDS_MAX - n)
        if k == WORDS_NONE:
            return 0
        if k == WORDS_READY:
            if not (<Pair>ctx._conn[i]).busy():
                (<Pair>ctx._conn[i]).progress()   # read it (or its end)
            return 1
        n += k
    if n == first:                    # no pair to sleep on
        return 0
    if c.watch and n < WORDS_MAX:
        watched = node_watch_word(ctx, c, w + n)
        if watched < 0:
            return 1                  # look again: node_watch raises
        n += watched
    ctx.links.leave()
    r = futex_sleep_any(w, n, ns)
    err = errno
    ctx.links.enter()
    if watched:
        node_unwatch_word(ctx)
    if ctx.links.failed:
        return _raise_links_failed(ctx)
    if r < 0 and err == ENOSYS:
        words_unsupported = True
        return 0
    if r >= 0 or err == EAGAIN:       # woken, or a flag fell before we slept
        for i in range(ctx._nconn):     # idle pairs: read what woke us
            if not (<Pair>ctx._conn[i]).busy():
                (<Pair>ctx._conn[i]).progress()
        return 1
    for i in range(ctx._nconn):
        (<Pair>ctx._conn[i]).drain_wakeups()
    ctx.links.leave()
    try:
        _check_signals()
    finally:
        ctx.links.enter()
    return 1


cdef int _raise_poll_error(int err) except -1 with gil:
    raise OSError(err, "poll failed")


# Signal handlers run in the main thread only (PyErr_CheckSignals does
# nothing in another): a rank's thread skips the GIL here, which thousands
# of thread ranks, each waking every POLL_SLICE_MS, would fight over.
cdef pthread_t _signal_thread = <pthread_t>threading.main_thread().ident


cdef enum:
    SLEEP_SLICE_MAX_MS = 1000


cdef int64_t sleep_slice_ms(Context ctx) noexcept nogil:
    """How long a wait sleeps before it looks again unwoken: a slice in
    the main thread (Ctrl-C's), and in another (a rank of a thread world,
    which no signal reaches) one more per 64 ranks, as node_slice_ms:
    thousands of rank threads each waking ten times a second made most of
    a phase's context switches. What a wait sleeps for wakes it anyway: a
    peer's bytes or hang-up, a dial (note_arrival), a failure (fail()
    wakes the sleepers); the deadline bounds the sleep. At most a second:
    a peer process that dies wakes no futex word (block_on_words)."""
    if pthread_self() == _signal_thread:
        return POLL_SLICE_MS
    return min(POLL_SLICE_MS * (1 + (ctx.size - 1) // 64), SLEEP_SLICE_MAX_MS)


cdef int _check_signals() except -1 nogil:
    if pthread_self() != _signal_thread:
        return 0
    with gil:
        return PyErr_CheckSignals()
