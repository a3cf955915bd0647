# Collectives through one segment that every rank maps, for a world whose
# ranks are all on one host (transport/shm.py hands the segment out).
#
# Each rank has a slot per step parity and a control line with its phase.
# A step: every rank writes its data into its slot and arrives at phase A;
# once all have, each reads the others' slots straight from memory (an
# allreduce reduces its own block of every slot, arrives at phase B, and
# after all have, copies the others' reduced blocks out). Slots alternate by
# step parity: a rank reaches phase A of step t only after it has read what
# step t-1 left, so writing step t+1 (parity of t-1) after all reached A(t)
# is safe. A rank is at most one step ahead, so the fingerprints of its
# calls, kept per parity, can be checked like a frame's header.
#
# A rank that reads nothing in the last step of a call (a bcast's root, a
# reduce's others) arrives and leaves (node_step_out); the wait it skipped
# is owed: node_ready, which starts every step, waits for it before the
# next write and checks that step's fingerprints against its own.
#
# Waiting looks, then sleeps. While it looks it spins (spin_ns, where every
# rank has a CPU of its own), then yields the CPU between looks (the links'
# yield_ns, where ranks outnumber CPUs: a peer queued on our CPU runs at
# once); gloocy/waiting.py chooses both at set-up. Then it sleeps on a futex
# in its own control line (its `sleeping` word): an arriving rank that finds
# it asleep clears the word and wakes it, one system call. A rank whose
# pairs carry frames meanwhile (a send or receive posted, a nonblocking
# collective running) sleeps in poll(2) on the pairs instead, so that frames
# wake it too, and is poked through its pairs. A dead peer never wakes a
# futex: the sleep lasts one slice (node_slice_ms), after which the wait
# looks at the deadline, Ctrl-C (which also ends the sleep at once: EINTR)
# and at the sockets of the peers not there yet, which a dead process has
# hung up. Keeping those sockets in a poll set instead would cost the
# wake-up its send, poll and recv again.
#
# When other processes hold the cores, a rank that spins may hold the very
# core its peer waits for. So a wait spins alone for 2 us, then yields the
# core between looks (sched_yield: a peer queued on our core runs at once,
# where it would otherwise wait for our slice to end), and how long it
# looks adapts (node_spin_budget): up to spin_ns + yield_ns while waits end
# within their look, halved (down to 2 us) each time one has to sleep. A
# wait that has slept `probe_every` times in a row looks the whole time
# once, to see whether the cores are free again. Measured at N = 2 on the
# project's 2-core machine (allgather, allreduce, alltoall, 8 B and 4 KiB)
# with one or two busy processes beside the ranks: a plain 50 us spin made
# a call take 60-110 us in most runs; this, 1-7 us in most (10-40 us when
# the machine was loaded far more); alone on the machine, both 0.5-2 us.
# A 10 us floor, or no adapting, did no better; a longer plain spin is
# worse (a call costs the whole spin when the peer shares our core).
# GLOOCY_NODE_LOOK_US sets a floor under the look (node_look_floor_us,
# _node_segment.pxi).

cdef extern from "_atomics.h" nogil:
    uint64_t ring_load(const uint64_t *p)
    void ring_store(uint64_t *p, uint64_t v)
    void ring_fence()
    uint32_t u32_load(const uint32_t *p)
    void flag_set(uint32_t *p, uint32_t v)

cdef extern from "_futex.h" nogil:
    int futex_sleep(uint32_t *p, uint32_t v, int64_t ns)
    void futex_wake(uint32_t *p, int n)
    uint32_t flag_swap_zero(uint32_t *p)
    enum:
        ETIMEDOUT

cdef enum:
    NODE_SMALL = 16384        # allreduce up to this: every rank reduces it all,
    NODE_SMALL_READS = 262144  # ... where that reads this much at most (N x bytes:
                               # at thousands of ranks a rank reducing every
                               # slot is quadratic memory traffic)
    NODE_SPIN_ALONE = 2000    # ns a wait spins before it yields between looks


cdef class Node:
    """The node segment in memfd `fd`, mapped (the caller closes fd)."""

    def __cinit__(self, int fd, int rank, int size):
        import os
        st = os.fstat(fd)
        self.nbytes = st.st_size
        self.map_key = (st.st_dev, st.st_ino)
        self.base = <char *>_map_segment(self.map_key, fd, self.nbytes)
        self.head = <NodeHead *>self.base
        self.rank = rank
        self.size = size
        self.chunk = <int64_t>self.head.chunk
        self.stride = self.chunk + node_headroom(size)
        if (self.head.nranks != size or self.chunk < 4096
                or node_segment_bytes(size, self.chunk) != self.nbytes):
            raise ValueError("the node segment does not fit this world")
        self.cma = 1
        self.cma_willing = os.environ.get("GLOOCY_CMA", "1") != "0"
        self.cma_min = <int64_t>self.head.cma_min
        self.bcast_cma_min = <int64_t>self.head.bcast_cma_min
        self.reduce_scatter_cma_min = <int64_t>self.head.reduce_scatter_cma_min
        self.allgather_cma_min = self.head.allgather_cma_min
        self.alltoall_cma_min = <int64_t>self.head.alltoall_cma_min
        self.stream_min = stream_min_bytes()
        from gloocy.waiting import usable_cpus
        self.spread = (os.environ.get("GLOOCY_SPREAD", "0") == "1"
                       and size <= usable_cpus())
        self.looks.now_ns = (<int64_t>1) << 62  # no wait seen yet: look fully
        self.looks.probe_every = LOOK_PROBE_MIN
        self.look_floor_ns = 1000 * node_look_floor_us()
        self.ctl = <NodeCtl *>(self.base + sizeof(NodeHead))
        # our process, for peers asking whether it ended: the store that
        # could tell them may have ended with it (rank 0 served it)
        self.ctl[rank].pid = os.getpid()
        self.data = self.base + sizeof(NodeHead) + size * sizeof(NodeCtl)

    def __dealloc__(self):
        if self.base is not NULL:
            _unmap_segment(self.map_key, self.base, self.nbytes)

    @property
    def spin_now(self):
        """ns the next wait looks before it sleeps (adapts)."""
        return self.looks.now_ns

    cdef char *slot(self, int r) noexcept nogil:
        return self.data + ((self.step & 1) * self.size + r) * self.stride


cdef inline uint64_t phase_a(Node nd) noexcept nogil:
    return 2 * nd.step + 1


cdef inline uint64_t phase_b(Node nd) noexcept nogil:
    return 2 * nd.step + 2


cdef int node_arrive(Context ctx, uint64_t phase, Coll *c) noexcept nogil:
    ctx.node.ctl[ctx.node.rank].fp[ctx.node.step & 1] = c.proto
    if ctx.node.spread:
        ctx.node.ctl[ctx.node.rank].cpu = sched_getcpu()
    ring_store(&ctx.node.ctl[ctx.node.rank].phase, phase)
    ring_fence()
    node_wake_all(ctx, False)
    return 0


cdef void node_wake_all(Context ctx, bint everyone) noexcept nogil:
    """Wake the ranks asleep in the segment (all of them, or all but those
    asleep for another rank's arrival: see node_sleep)."""
    cdef int j
    cdef uint32_t how
    for j in range(ctx.node.size):
        if j != ctx.node.rank:
            how = u32_load(&ctx.node.ctl[j].sleeping)
            # (Awake: it looks at the phases after raising its word, so it
            # sees ours. Swapping every awake rank's word would bounce N
            # cache lines per arrival.)
            if how == NODE_AWAKE or (
                    not everyone and how >= NODE_FOR_RANK
                    and how != NODE_FOR_RANK + <uint32_t>ctx.node.rank):
                continue
            how = flag_swap_zero(&ctx.node.ctl[j].sleeping)
            if how == NODE_ON_FUTEX or how >= NODE_FOR_RANK:
                futex_wake(&ctx.node.ctl[j].sleeping, 1)
            elif how != NODE_AWAKE:
                (<Pair>ctx._pair_ptrs[j]).wake_peer()


cdef int node_behind(Node nd, uint64_t phase, int who) noexcept nogil:
    """The first rank that has not reached `phase`, or -1 (`who` >= 0:
    only that rank counts)."""
    cdef int j
    if who >= 0:
        return who if ring_load(&nd.ctl[who].phase) < phase else -1
    for j in range(nd.size):
        if ring_load(&nd.ctl[j].phase) < phase:
            return j
    return -1


cdef int node_last_behind(Node nd, uint64_t phase, int who) noexcept nogil:
    """The last rank that has not reached `phase`, or -1 (`who` >= 0: only
    that rank counts)."""
    cdef int j
    if who >= 0:
        return who if ring_load(&nd.ctl[who].phase) < phase else -1
    for j in range(nd.size - 1, -1, -1):
        if ring_load(&nd.ctl[j].phase) < phase:
            return j
    return -1


cdef int node_wait(Context ctx, Coll *c, uint64_t phase) except -1 nogil:
    """Until every rank has reached `phase` (look, then sleep). Frames keep
    moving meanwhile: a peer may be sending to us before this call."""
    return node_wait_for(ctx, c, phase, -1)


cdef int node_wait_for(Context ctx, Coll *c, uint64_t phase, int who) except -1 nogil:
    """node_wait for rank `who` alone (-1: for every rank)."""
    cdef int64_t adapted, budget, start, t, left
    cdef bint slept = False
    if node_behind(ctx.node, phase, who) < 0:
        return 0                      # nothing to wait for: nothing learnt
    adapted = node_spin_budget(ctx)
    budget = max(adapted, ctx.node.look_floor_ns)
    start = now_ns()
    while node_behind(ctx.node, phase, who) >= 0:
        node_progress(ctx)
        t = now_ns() - start
        if t < budget:
            if t > NODE_SPIN_ALONE or t >= ctx.spin_ns:
                sched_yield()         # a peer that shares our core runs now
            pause(ctx)
            continue
        left = c.deadline - now_ns()
        if left <= 0:
            return _raise_node_timeout(ctx, c, phase, who)
        node_check_pair_calls(ctx, c, phase, who)
        slept = True
        if node_sleep(ctx, phase, who, min(node_slice_ms(ctx), left // 1000000 + 1)):
            node_check_peers(ctx, phase, who)
            _check_signals()
        if ctx.links.failed:
            return _raise_links_failed(ctx)
    node_spin_learn(ctx.node, node_look_ns(ctx), adapted, slept)
    return 0


cdef inline int64_t node_slice_ms(Context ctx) noexcept nogil:
    """How long a wait in the segment sleeps between its looks at the peers
    and at Ctrl-C: a slice, and one more per 64 ranks, as each look scans
    every rank (thousands of thread ranks that each scanned thousands ten
    times a second would fill the CPUs; arrivals wake the sleepers anyway)."""
    return POLL_SLICE_MS * (1 + (ctx.size - 1) // 64)


cdef inline int64_t node_look_ns(Context ctx) noexcept nogil:
    """The longest a wait looks before it sleeps: its spin, then its
    yielding looks."""
    return ctx.spin_ns + ctx.links.yield_ns


cdef inline int64_t node_spin_budget(Context ctx) noexcept nogil:
    """How long the next wait looks: node_look_ns on a probe (see the top
    of this file), else what the last waits left (at most that). A wait
    looks at least the node's look_floor_ns whatever this says; what it
    learns adapts this alone."""
    return looks_budget(&ctx.node.looks, node_look_ns(ctx))


cdef inline void node_spin_learn(Node nd, int64_t spin_ns, int64_t budget,
                                 bint slept) noexcept nogil:
    """A wait that looked `budget` ns ended in its look or slept (see
    learn_looks; `spin_ns` is the most a wait may look). Waits that found
    every rank there do not count: when two ranks take turns to sleep, each
    finds the other there every other call, and counting those would keep
    both looks short and never probe."""
    learn_looks(&nd.looks, spin_ns, budget, slept)


cdef int node_progress(Context ctx) except -1 nogil:
    """Move what the pairs can (frames that came or wait to leave); wake
    the threads asleep on the links (a frame we stashed may be theirs)."""
    cdef int i, moved = 0
    if ctx.links.arrivals:              # peers dialed us (lazy connections)
        install_arrivals(ctx.links)
    for i in range(ctx.size):
        if i != ctx.rank:
            moved |= (<Pair>ctx._pair_ptrs[i]).progress()
    if moved and ctx.links.nsleepers:
        ctx.links.wake()
    if ctx.links.scheds is not NULL:    # a peer may wait for one of ours
        advance_schedules(ctx.links)
    return 0


cdef bint node_frames_move(Context ctx) noexcept nogil:
    """Frames may come or go for us during this wait (a transfer posted, a
    receive from anyone, a nonblocking collective, acks owed): then the
    wait sleeps where they wake it, in poll(2) on the pairs."""
    cdef int i
    if ctx.links.wild_head is not NULL or ctx.links.scheds is not NULL:
        return True
    for i in range(ctx.size):
        if i != ctx.rank and ((<Pair>ctx._pair_ptrs[i]).busy()
                              or (<Pair>ctx._pair_ptrs[i]).acks is not NULL):
            return True
    return False


cdef enum:
    NO_WORDS = 2                  # node_sleep_words: sleep in poll(2) instead


cdef int node_sleep(Context ctx, uint64_t phase, int who, int ms) except -1 nogil:
    """Sleep up to `ms` with our `sleeping` word up, so that arriving ranks
    wake us: on the word itself (a futex) or, while frames move for us, in
    poll(2) on the pairs as block_poll() does. The word goes up before we
    look at the phases once more, so an arrival in between still wakes us.
    0 when an arrival woke us, 1 when the slice passed, a signal came or a
    pair stirred: look at the peers and Ctrl-C then."""
    cdef pollfd fds[64]
    cdef int i, n = 0, r = 0, last
    cdef uint32_t word
    cdef short ev
    cdef uint32_t *sleeping = &ctx.node.ctl[ctx.rank].sleeping
    if not node_frames_move(ctx):
        # Asleep for the last rank not there alone: the others' arrivals
        # leave us be (ranks that come in rank order, as threads started one
        # by one do, would each wake every sleeper, which would look at every
        # rank: cubic in the ranks). Waking, we look for the next one.
        last = node_last_behind(ctx.node, phase, who)
        if last < 0:
            return 0
        word = NODE_FOR_RANK + <uint32_t>last
        flag_set(sleeping, word)
        ring_fence()
        if ring_load(&ctx.node.ctl[last].phase) < phase:
            ctx.links.leave()
            r = futex_sleep(sleeping, word, <int64_t>ms * 1000000)
            r = errno if r < 0 else 0
            ctx.links.enter()
        flag_set(sleeping, NODE_AWAKE)
        return r == ETIMEDOUT or r == EINTR
    r = node_sleep_words(ctx, phase, who, ms)
    if r != NO_WORDS:
        return r
    for i in range(ctx.size):
        if i != ctx.rank:
            ev = (<Pair>ctx._pair_ptrs[i]).wait_events()
            if n < 64:
                # A peer that left has nothing more to say (and its closed
                # socket would make poll return at once, forever).
                fds[n].fd = (-1 if (<Pair>ctx._pair_ptrs[i]).peer_gone
                             else (<Pair>ctx._pair_ptrs[i]).wait_fd())
                fds[n].events = ev | POLLIN | POLLRDHUP
                fds[n].revents = 0
                n += 1
    flag_set(sleeping, NODE_IN_POLL)
    ring_fence()
    if node_behind(ctx.node, phase, who) >= 0:
        ctx.links.leave()
        poll(fds, n, ms if n == ctx.size - 1 else 1)
        ctx.links.enter()
    flag_set(sleeping, NODE_AWAKE)
    for i in range(ctx.size):
        if i != ctx.rank:
            (<Pair>ctx._pair_ptrs[i]).drain_wakeups()
    return 1


cdef inline void sleeping_word(uint32_t *sleeping, WordWait *w) noexcept nogil:
    """Our `sleeping` word as w, one of the words to sleep on, raised: an
    arrival in the segment wakes us."""
    w.val = NODE_ON_FUTEX
    w.uaddr = <uint64_t><size_t>sleeping
    w.flags = WORD_U32
    w._reserved = 0
    flag_set(sleeping, NODE_ON_FUTEX)


cdef int node_sleep_words(Context ctx, uint64_t phase, int who, int ms) except -1 nogil:
    """node_sleep while frames move, where every pair sleeps on futex words
    (shared-memory pairs): on our `sleeping` word and theirs at once
    (futex_waitv). NO_WORDS where a pair cannot (a TCP pair, one not
    connected yet: then poll(2)), else as node_sleep. (Not -1: that is
    the error return, which would make the caller look for an exception.)"""
    global words_unsupported
    cdef WordWait w[WORDS_MAX]
    cdef int i, k, n = 1, r = 0, err = 0
    cdef uint32_t *sleeping = &ctx.node.ctl[ctx.rank].sleeping
    if words_unsupported:
        return NO_WORDS
    for i in range(ctx.size):
        if i != ctx.rank:
            k = (<Pair>ctx._pair_ptrs[i]).wait_words(w + n, WORDS_MAX - n)
            if k == WORDS_NONE:
                return NO_WORDS
            if k == WORDS_READY:
                return 0              # node_wait moves it, then looks again
            n += k
    sleeping_word(sleeping, w)
    ring_fence()
    if node_behind(ctx.node, phase, who) >= 0:
        ctx.links.leave()
        r = futex_sleep_any(w, n, <int64_t>ms * 1000000)
        err = errno
        ctx.links.enter()
    flag_set(sleeping, NODE_AWAKE)
    if r < 0 and err == ENOSYS:
        words_unsupported = True
        return NO_WORDS
    return r < 0 and (err == ETIMEDOUT or err == EINTR)


cdef inline bint node_arrived_after_all(Context ctx, int i, uint64_t phase) noexcept nogil:
    """Whether rank i, found gone, reached `phase` before it left: a rank
    arrives before it closes, so read after the hang-up its phase is
    final. (Read before, it may be one the rank passed and then left
    while we looked, as a bcast's root does; the question asked under the
    GIL takes long enough.)"""
    ring_fence()
    return ring_load(&ctx.node.ctl[i].phase) >= phase


cdef int node_check_peers(Context ctx, uint64_t phase, int who) except -1 nogil:
    """PeerLostError if a peer that has not reached `phase` hung up (its
    process died; one that got there may have finished and left). `who`:
    the rank the wait is for (-1: every rank), the only one asked after
    (a tree's member waits for its parent; asking after the first rank
    behind instead, a live one waiting too, never found a dead root)."""
    cdef pollfd fds[1]
    cdef int i, unconnected = -1
    for i in range(ctx.size):
        if (i == ctx.rank or (who >= 0 and i != who)
                or ring_load(&ctx.node.ctl[i].phase) >= phase):
            continue
        fds[0].fd = (<Pair>ctx._pair_ptrs[i]).wait_fd()
        fds[0].events = POLLRDHUP
        fds[0].revents = 0
        if (fds[0].fd >= 0 and poll(fds, 1, 0) > 0
                and fds[0].revents & (POLLRDHUP | POLLHUP | POLLERR)
                and not node_arrived_after_all(ctx, i, phase)):
            # It may have told us why it stopped before it left (a peer of
            # its was lost): reading that raises the root cause instead.
            (<Pair>ctx._pair_ptrs[i]).progress()
            return _raise_node_peer_lost(ctx, i)
        if fds[0].fd < 0 and unconnected < 0:
            unconnected = i
    # A peer never connected is asked after in Python (its process, or its
    # rank thread), under the GIL: only the first one behind, as thousands of
    # waiting ranks asking after all of theirs every slice queue on the GIL
    # for seconds. Those after it are asked once it arrives (or by a rank of
    # those before it that waits for them).
    if (unconnected >= 0
            and lazy_peer_gone(ctx, unconnected, ctx.node.ctl[unconnected].pid)
            and not node_arrived_after_all(ctx, unconnected, phase)):
        return _raise_node_peer_lost(ctx, unconnected)
    return 0


cdef int node_check_fingerprints(Context ctx, Coll *c) except -1 nogil:
    return _check_fingerprints(ctx, c, ctx.node.step & 1)


cdef int _check_fingerprints(Context ctx, Coll *c, int parity) except -1 nogil:
    cdef int j
    for j in range(ctx.node.size):
        _check_fingerprint(ctx, c, parity, j)
    return 0


cdef int _check_fingerprint(Context ctx, Coll *c, int parity, int j) except -1 nogil:
    """MismatchError unless rank j's call at steps of `parity` is ours."""
    cdef Header *h = &ctx.node.ctl[j].fp[parity]
    if (h.kind != c.proto.kind or h.op != c.proto.op or h.dtype != c.proto.dtype
            or h.root != c.proto.root or h.count != c.proto.count
            or h.seq != c.proto.seq):
        return _raise_node_mismatch(ctx, c, j, h, False)
    return 0


cdef int node_ready(Context ctx, Coll *c) except -1 nogil:
    """Before a step writes: the wait our last step skipped (if it did),
    and a check of that step's fingerprints against ours."""
    cdef uint64_t owed = ctx.node.owed
    cdef Coll past
    if owed == 0:
        return 0
    node_wait(ctx, c, owed)
    ctx.node.owed = 0
    past = c[0]
    past.proto = ctx.node.ctl[ctx.rank].fp[((owed - 1) // 2) & 1]
    return _check_fingerprints(ctx, &past, ((owed - 1) // 2) & 1)


cdef int node_step_out(Context ctx, Coll *c) except -1 nogil:
    """Our slot of this step is written and we read nothing in it: arrive
    at A and go on; the wait is owed to our next step (node_ready)."""
    node_arrive(ctx, phase_a(ctx.node), c)
    ctx.node.owed = phase_a(ctx.node)
    ctx.node.step += 1
    return 0


cdef int node_step_in(Context ctx, Coll *c) except -1 nogil:
    """Our slot of this step is written: arrive at A, wait for all, check."""
    node_arrive(ctx, phase_a(ctx.node), c)
    node_wait(ctx, c, phase_a(ctx.node))
    return node_check_fingerprints(ctx, c)


cdef int node_barrier(Context ctx, Coll *c) except -1 nogil:
    node_ready(ctx, c)
    node_step_in(ctx, c)
    ctx.node.step += 1
    return 0


cdef int node_bcast(Context ctx, Coll *c, char *buf, int64_t nbytes,
                    int root) except -1 nogil:
    cdef int64_t off = 0, n
    if (nbytes >= ctx.node.bcast_cma_min and ctx.node.cma > 0
            and node_bcast_cma(ctx, c, buf, nbytes, root)):
        return 0
    while True:
        node_ready(ctx, c)
        n = min(nbytes - off, ctx.node.chunk)
        if ctx.rank == root:
            memcpy(ctx.node.slot(root), buf + off, n)
            if off + n >= nbytes:
                return node_step_out(ctx, c)
        elif off + n >= nbytes:
            # The last step needs the root alone: the other readers' arrival
            # (and their fingerprints) is owed to our next step, as the
            # root's is. Waiting for them here would chain every reader's
            # wake-up into every bcast.
            node_wait_for(ctx, c, phase_a(ctx.node), root)
            _check_fingerprint(ctx, c, ctx.node.step & 1, root)
            memcpy(buf + off, ctx.node.slot(root), n)
            return node_step_out(ctx, c)
        node_step_in(ctx, c)
        if ctx.rank != root:
            memcpy(buf + off, ctx.node.slot(root), n)
        ctx.node.step += 1
        off += n
        if off >= nbytes:
            return 0


cdef int node_allreduce(Context ctx, Coll *c, char *buf, int64_t count) except -1 nogil:
    return node_reduce_to(ctx, c, buf, count, -1)


cdef int node_reduce_to(Context ctx, Coll *c, char *buf, int64_t count,
                        int root) except -1 nogil:
    """Reduce every rank's `buf` (count elements); the result lands in the
    root's `buf` (root -1: in every rank's, an allreduce). A non-root's
    `buf` is clobbered when root >= 0."""
    cdef int64_t isz = c.itemsize, nbytes = count * c.itemsize
    cdef int64_t per_step = max(ctx.node.chunk // isz, 1)
    cdef int64_t done = 0, e, q, lo, hi, mine_lo, mine_hi
    cdef int j
    cdef bint gets = root < 0 or ctx.rank == root
    if (nbytes <= NODE_SMALL and nbytes <= ctx.node.chunk
            and nbytes * ctx.node.size <= NODE_SMALL_READS):
        # Every rank (or the root) reduces the whole vector, in rank order:
        # one step.
        node_ready(ctx, c)
        memcpy(ctx.node.slot(ctx.rank), buf, nbytes)
        if not gets:
            return node_step_out(ctx, c)
        node_step_in(ctx, c)
        if gets:
            memcpy(buf, ctx.node.slot(0), nbytes)
            for j in range(1, ctx.node.size):
                c.fn(buf, ctx.node.slot(j), count)
        ctx.node.step += 1
        return 0
    while done < count:
        # This step's elements, cut in one block per rank. Rank r reduces
        # block r: its own data (left in its buffer, never copied to the
        # slot) with the others' in rank order, publishes the result in its
        # slot, and copies the others' results out. (Built-in ops commute;
        # each block is reduced at one rank, so every rank gets its bits.)
        # Towards a root only the root copies out, and the others need not
        # wait for phase B: what they write next goes to the other parity,
        # and the step after that waits for the root at phase A.
        node_ready(ctx, c)
        e = min(count - done, per_step)
        q = (e + ctx.node.size - 1) // ctx.node.size
        mine_lo, mine_hi = min(ctx.rank * q, e), min((ctx.rank + 1) * q, e)
        memcpy(ctx.node.slot(ctx.rank), buf + done * isz, mine_lo * isz)
        memcpy(ctx.node.slot(ctx.rank) + mine_hi * isz, buf + (done + mine_hi) * isz,
               (e - mine_hi) * isz)
        node_step_in(ctx, c)
        if mine_hi > mine_lo:
            for j in range(ctx.node.size):
                if j != ctx.rank:
                    c.fn(buf + (done + mine_lo) * isz, ctx.node.slot(j) + mine_lo * isz,
                         mine_hi - mine_lo)
            if not gets or root < 0:
                memcpy(ctx.node.slot(ctx.rank) + mine_lo * isz,
                       buf + (done + mine_lo) * isz, (mine_hi - mine_lo) * isz)
        node_arrive(ctx, phase_b(ctx.node), c)
        if gets:
            node_wait(ctx, c, phase_b(ctx.node))
            for j in range(ctx.node.size):
                lo, hi = min(j * q, e), min((j + 1) * q, e)
                if j != ctx.rank and hi > lo:
                    memcpy(buf + (done + lo) * isz, ctx.node.slot(j) + lo * isz,
                           (hi - lo) * isz)
        ctx.node.step += 1
        done += e
    return 0


cdef int node_allgatherv(Context ctx, Coll *c, const char *mine, char *buf,
                         const int64_t *offs, const int64_t *sizes) except -1 nogil:
    """Rank j's sizes[j] bytes land at buf + offs[j] everywhere; ours come
    from `mine`. Step s moves bytes [s*chunk, (s+1)*chunk) of every block."""
    cdef int64_t chunk = ctx.node.chunk, off = 0, longest = 0, total = 0, n
    cdef int j
    cdef bint stream
    for j in range(ctx.node.size):
        longest = max(longest, sizes[j])
        total += sizes[j]
    stream = total >= ctx.node.stream_min     # too large to stay in cache
    if mine != buf + offs[ctx.rank]:
        copy_block(buf + offs[ctx.rank], mine, sizes[ctx.rank], stream)
    if (0 <= ctx.node.allgather_cma_min <= total and ctx.node.cma > 0
            and node_allgatherv_cma(ctx, c, buf, offs, sizes)):
        return 0
    while True:
        node_ready(ctx, c)
        n = min(max(sizes[ctx.rank] - off, 0), chunk)
        memcpy(ctx.node.slot(ctx.rank), buf + offs[ctx.rank] + off, n)
        node_step_in(ctx, c)
        for j in range(ctx.node.size):
            n = min(max(sizes[j] - off, 0), chunk)
            if j != ctx.rank and n > 0:
                copy_block(buf + offs[j] + off, ctx.node.slot(j), n, stream)
        ctx.node.step += 1
        off += chunk
        if off >= longest:
            return 0


cdef uint64_t sizes_digest(I64 sizes):
    """FNV-1a of the block sizes, for the fingerprint of a node allgather."""
    cdef uint64_t h = 14695981039346656037ULL
    cdef int i
    for i in range(sizes.n):
        h = (h ^ <uint64_t>sizes.v[i]) * 1099511628211ULL
    return h


cdef int _raise_node_timeout(Context ctx, Coll *c, uint64_t phase,
                             int who) except -1 with gil:
    late = [j for j in (range(ctx.size) if who < 0 else [who])
            if ring_load(&ctx.node.ctl[j].phase) < phase]
    e = CollectiveTimeout(
        f"rank {ctx.rank}: {describe_call(&c.proto)} timed out waiting for "
        f"rank(s) {', '.join(map(str, late))}")
    e.ranks = late
    raise e


cdef int _raise_node_peer_lost(Context ctx, int peer) except -1 with gil:
    # World ranks, as the pairs name them (a derived context's are not).
    raise PeerLostError(f"rank {ctx._world[ctx.rank]}: lost peer rank "
                        f"{ctx._world[peer]} (shared memory): its connection "
                        "closed (did its process die?)", rank=ctx._world[peer])


cdef int _raise_node_mismatch(Context ctx, Coll *c, int peer,
                              const Header *h, bint over_pairs) except -1 with gil:
    """Rank `peer` made call h where we made c (`over_pairs`: ours goes
    over the pairs, and h came through the segment)."""
    cdef Header theirs = h[0]
    cdef Header mine = c.proto
    cdef Header at
    cdef Header *past
    # Where the description shows no count (object calls, allgather: the
    # count is a digest of the block sizes), say what differs.
    cdef bint shows_count = ((c.proto.kind >> OBJ_SHIFT) == 0
                             and (c.proto.kind & KIND_MASK) != KIND_ALLGATHERV)
    if (not shows_count and h.kind == c.proto.kind and h.op == c.proto.op
            and h.dtype == c.proto.dtype and h.root == c.proto.root
            and h.seq == c.proto.seq and h.count != c.proto.count):
        raise MismatchError(f"rank {ctx.rank}: in {describe_call(&c.proto)} rank "
                            f"{peer} disagrees on the counts")
    if (h.kind == c.proto.kind and h.op == c.proto.op and h.dtype == c.proto.dtype
            and h.root == c.proto.root and h.seq == c.proto.seq
            and h.count == c.proto.count):
        # One call, two paths: the ranks asked for different algorithms.
        ways = ("over the pairs", "through the node segment")
        raise MismatchError(
            f"rank {ctx.rank} runs {describe_call(&c.proto)} "
            f"{ways[not over_pairs]} but rank {peer} {ways[over_pairs]}: the "
            "ranks asked for different algorithms")
    # Calls at other sequence numbers: name each rank's call at the same one
    # where we can (theirs over the pairs, published; ours, remembered).
    if h.seq > c.proto.seq:
        if node_pair_call_of(ctx.node, peer, c.proto.seq, &at) == 1:
            theirs = at
    elif h.seq < c.proto.seq:
        past = &ctx._recent[h.seq % 16]
        if past.seq == h.seq and past.kind:
            mine = past[0]
    if theirs.seq > mine.seq:
        raise MismatchError(f"rank {ctx.rank} called {describe_call(&mine)} but "
                            f"rank {peer} called something else there (it has "
                            f"since called {describe_call(&theirs)})")
    raise MismatchError(f"rank {ctx.rank} called {describe_call(&mine)} "
                        f"but rank {peer} called {describe_call(&theirs)}")
