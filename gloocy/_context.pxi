# The Context: this rank's pairs, sequence counter, deadlines and first error,
# and the wait loop that drives pairs without the GIL: spin briefly (cheap when
# ranks <= cores), then block in poll(2) in slices so Ctrl-C and deadlines work.

from libc.errno cimport errno, EINTR
from cpython.exc cimport PyErr_CheckSignals
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    enum:
        POLLIN
        POLLRDHUP
        POLLHUP
        POLLERR

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef enum:
    POLL_SLICE_MS = 100       # longest uninterrupted block: Ctrl-C latency

# After a timeout, how long to listen for the other ranks' reasons to find
# the rank that never came (seconds; see Context.trace_timeout).
TRACE_GRACE = 0.3


cdef inline int64_t now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef list waited_for(Context ctx):
    """The ranks we wait for: in a node collective, those that have not
    arrived where we are; else those whose data we wait for (or, when
    none, whose reading)."""
    cdef Pair p
    cdef uint64_t mine
    if ctx.node is not None:
        mine = ring_load(&ctx.node.ctl[ctx.rank].phase)
        behind = [j for j in range(ctx.size)
                  if ring_load(&ctx.node.ctl[j].phase) < mine]
        if behind:
            return behind
    expecting, busy = [], []
    for i, pair in enumerate(ctx._pairs):
        if pair is not None:
            p = <Pair>pair
            if p.expecting():
                expecting.append(i)
            if p.busy():
                busy.append(i)
    return expecting or busy


cdef int _raise_timeout(Context ctx, Coll *c) except -1 with gil:
    waiting = waited_for(ctx)
    e = CollectiveTimeout(
        f"rank {ctx.rank}: {describe_call(&c.proto)} timed out waiting for "
        f"rank(s) {', '.join(map(str, waiting)) or '?'}")
    e.ranks = waiting
    raise e


cdef int _raise_poll_error(int err) except -1 with gil:
    raise OSError(err, "poll failed")


cdef int _check_signals() except -1 with gil:
    return PyErr_CheckSignals()


cdef int _raise_links_failed(Context ctx) except -1 with gil:
    raise ContextPoisoned(
        f"rank {ctx.rank}: a call on another communicator over the same "
        f"connections failed: {ctx.links.error}")


cdef class Context:
    """This rank's view of a group: its pairs, counters and deadlines."""

    def __cinit__(self, int rank, int size, list pairs=None, *,
                  Links links=None, world=None, uint32_t comm_id=0,
                  double timeout=300.0, int64_t segment=1 << 20,
                  int64_t spin_us=50, int64_t small_allreduce=1 << 16,
                  int node_fd=-1):
        """A context over `pairs` (one per rank, None at `rank`), or over
        some of the `links` of another context: our rank i is their rank
        world[i] (see derive()). `node_fd`: the node segment every rank
        maps when all are on one host (see _node.pxi)."""
        self._efd = -1
        self.env_algorithms = env_algorithms()
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"rank {rank} is not in a world of size {size}")
        if segment < 1:
            raise ValueError("segment must be at least 1 byte")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if links is None:
            if len(pairs) != size:
                raise ValueError(f"pairs: expected {size} entries, got {len(pairs)}")
            for i, p in enumerate(pairs):
                if i == rank:
                    if p is not None:
                        raise ValueError("pairs[rank] must be None")
                elif not isinstance(p, Pair) or (<Pair>p).peer != i:
                    raise ValueError(f"pairs[{i}] is not a Pair to rank {i}")
            links = Links(rank, size, list(pairs))
            world = range(size)
        self.links = links
        self.rank = rank
        self.size = size
        self.comm_id = comm_id
        self.timeout = timeout
        self.segment = segment
        self.spin_ns = spin_us * 1000
        self.small_allreduce = small_allreduce
        self._pairs = [links.pairs[w] for w in world]
        self._to_self = []
        self._requests = set()
        self._pair_ptrs = <void **>malloc(size * sizeof(void *))
        self._world = <int *>malloc(size * sizeof(int))
        self._local = <int *>malloc(links.size * sizeof(int))
        if self._pair_ptrs is NULL or self._world is NULL or self._local is NULL:
            raise MemoryError()
        for i in range(links.size):
            self._local[i] = -1
        for i, w in enumerate(world):
            self._pair_ptrs[i] = <void *>self._pairs[i]
            self._world[i] = w
            self._local[w] = i
        if node_fd >= 0:
            self.node = Node(node_fd, rank, size)
        links.users += 1

    def __dealloc__(self):
        free(self._pair_ptrs)
        free(self._world)
        free(self._local)
        free(self._space[0])
        free(self._space[1])
        if self._efd >= 0:
            c_close(self._efd)

    cdef bint has_efd(self) noexcept nogil:
        """The eventfd other threads wake us by, made the first time we
        sleep while the links are shared (False: none could be made)."""
        if self._efd < 0:
            self._efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)
        return self._efd >= 0

    @property
    def next_comm_id(self):
        """The lowest communicator id never used by this process."""
        return self.links.next_id

    def derive(self, members, uint32_t comm_id):
        """A context of our ranks `members` (in that order; ours among them)
        over the same connections, tagged `comm_id`: an id every member
        agreed on and none of them has used (>= their next_comm_id)."""
        if self.closed:
            raise ContextPoisoned(f"rank {self.rank}: communicator is closed")
        members = [int(m) for m in members]
        world = [self._world[m] for m in members]
        if self.links.next_id <= comm_id < 0x40000000:  # above: shadows, transients
            self.links.next_id = comm_id + 1
        return type(self)(members.index(self.rank), len(members), links=self.links,
                          world=world, comm_id=comm_id, timeout=self.timeout,
                          segment=self.segment, spin_us=self.spin_ns // 1000,
                          small_allreduce=self.small_allreduce)

    @property
    def object_call(self):
        """The object collective (a lower-case method) this context's calls
        belong to, "" for none: their fingerprints carry it."""
        return OBJECT_CALLS[self.obj_call]

    @object_call.setter
    def object_call(self, str name):
        self.obj_call = OBJECT_CALLS.index(name)

    def world_rank(self, int rank):
        """The rank of our rank `rank` in the first context of the links."""
        return self._world[rank]

    cdef char *space(self, int slot, int64_t nbytes) except NULL nogil:
        """Temporary space, kept between calls: fresh pages of a large
        malloc cost a page fault each, every time."""
        if nbytes > self._space_size[slot] or self._space[slot] is NULL:
            free(self._space[slot])
            self._space_size[slot] = 0
            self._space[slot] = <char *>_alloc(max(nbytes, 4096))
            self._space_size[slot] = max(nbytes, 4096)
        return self._space[slot]

    cdef char *scratch(self, int64_t nbytes) except NULL nogil:
        return self.space(0, nbytes)

    cdef char *work(self, int64_t nbytes) except NULL nogil:
        return self.space(1, nbytes)

    def close(self, *, double linger=1.0):
        """Close every pair; peers are told goodbye unless we are poisoned.

        After losing a peer, wait up to `linger` seconds for the others to
        hang up first: they are then sure to notice the lost peer itself
        rather than our leaving, and name the right rank."""
        if self.closed:
            return
        self.closed = True
        if self._efd >= 0:
            c_close(self._efd)
            self._efd = -1
        self.links.users -= 1
        if self.links.users > 0:
            return                    # other contexts still use the links
        self._close_links(linger)

    def close_all(self, *, double linger=1.0):
        """Close the connections under this context and every context
        derived from it, at once: what a process does when it leaves (exit,
        Finalize). Peers are told goodbye, so that a peer still finishing
        the calls we finished never takes our leaving for a crash."""
        self.close(linger=linger)
        self._close_links(linger)

    def _close_links(self, double linger):
        if self.links.closed:
            return
        error = self.links.error
        if isinstance(error, PeerLostError) and linger > 0:
            with nogil:
                self._linger(now_ns() + <int64_t>(linger * 1e9))
        self.links.close(error is None)

    cdef void _linger(self, int64_t deadline) noexcept nogil:
        cdef pollfd fds[64]
        cdef int i, n = 0, kept
        cdef int64_t left
        if self.size > 64:
            return
        for i in range(self.size):
            if i != self.rank and (<Pair>self._pair_ptrs[i]).wait_fd() >= 0:
                fds[n].fd = (<Pair>self._pair_ptrs[i]).wait_fd()
                fds[n].events = POLLRDHUP
                n += 1
        while n > 0:
            left = (deadline - now_ns()) // 1000000
            if left <= 0:
                return
            for i in range(n):
                fds[i].revents = 0
            if poll(fds, n, <int>min(left, POLL_SLICE_MS)) < 0 and errno != EINTR:
                return
            kept = 0
            for i in range(n):                # drop the peers that hung up
                if fds[i].revents == 0:
                    fds[kept] = fds[i]
                    kept += 1
            n = kept

    # -- one call --------------------------------------------------------

    cdef int begin(self, Coll *c, int kind, int op, int dtype, int root,
                   uint64_t count, object timeout) except -1:
        """Check we may run, then stamp the call's header and deadline."""
        self.check_usable()
        cdef double t = self.timeout if timeout is None else timeout
        if not t > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        if not self.links.try_enter():      # free almost always: keep the GIL
            with nogil:
                self.links.enter()
        try:
            self.stamp(c, kind, op, dtype, root, count, t)
        except BaseException:
            self.links.leave()
            raise
        return 0

    cdef void end(self) noexcept:
        self.links.leave()

    cdef int check_usable(self) except -1:
        error = self.error if self.error is not None else self.links.error
        if error is not None:
            raise ContextPoisoned(
                f"rank {self.rank}: communicator unusable after an earlier "
                f"error: {error}")
        if self.closed or self.links.closed:
            raise ContextPoisoned(f"rank {self.rank}: communicator is closed"
                                  + (" (this process left the job: Finalize or "
                                     "exit)" if self.links.closed else ""))
        return 0

    cdef int check_stale(self, Coll *c, uint64_t seq) except -1:
        """A stashed frame of a call of ours before `seq`, never taken: the
        ranks called different collectives there (ones that only send)."""
        cdef Xfer *stale = NULL
        cdef Header *past
        cdef int peer
        for peer in range(self.size):
            if peer != self.rank:
                stale = (<Pair>self._pair_ptrs[peer]).find_stale(self.comm_id, seq)
                if stale is not NULL:
                    break
        if stale is NULL:
            return 0
        past = &self._recent[stale.hdr.seq % 16]
        mine = (f"called {describe_call(past)}"
                if past.seq == stale.hdr.seq and past.kind
                else f"made call #{stale.hdr.seq} without taking it")
        e = MismatchError(f"rank {self.rank} {mine} but rank {peer} "
                          f"called {describe_call(&stale.hdr)}")
        self.fail(e, c)
        raise e

    cdef int sweep(self, Coll *c) except -1:
        """After a node collective, which moves no frames: read what came
        over the pairs (all sent before the peers joined this call), and
        take a frame of an earlier call as the pair algorithms would."""
        with nogil:
            node_progress(self)
        return self.check_stale(c, c.proto.seq)

    cdef int stamp(self, Coll *c, int kind, int op, int dtype, int root,
                   uint64_t count, double t) except -1:
        if kind != KIND_P2P:
            self.check_stale(c, self.seq)
        init_header(&c.proto)
        c.proto.kind = kind if kind == KIND_P2P else kind | (self.obj_call << OBJ_SHIFT)
        c.proto.op = op
        c.proto.dtype = dtype
        c.proto.root = root
        c.proto.count = count
        c.proto.comm_id = self.comm_id
        c.proto.seq = self.seq
        self.seq += 1
        if kind != KIND_P2P:
            self._recent[c.proto.seq % 16] = c.proto
        # Clamp: converting a double beyond int64 (inf) to int64 is undefined.
        c.deadline = now_ns() + <int64_t>min(t * 1e9, 4e18)
        c.fn = NULL
        c.itemsize = DTYPE_SIZES[dtype] if 0 <= dtype < DT_LAST else 1
        return 0

    cdef int begin_p2p(self, Coll *c, object timeout) except -1:
        """Like begin() for point-to-point: no collective sequence number."""
        cdef uint64_t seq = self.seq
        self.begin(c, KIND_P2P, OP_NONE, DT_BYTES, -1, 0, timeout)
        self.seq = seq
        c.proto.seq = 0
        return 0

    cdef Xfer *find_stashed(self, const Xfer *x, int source, int *peer) noexcept nogil:
        cdef int i
        cdef Xfer *u
        for i in range(self.size):
            if i != self.rank and (source < 0 or i == source):
                u = (<Pair>self._pair_ptrs[i]).find_unexpected(x, False)
                if u is not NULL:
                    peer[0] = i
                    return u
        return NULL

    cdef int probe_stashed(self, Coll *c, Xfer *x, int source,
                           bint block) except -1 nogil:
        cdef int i, moved, peer
        cdef int64_t spin_until = 0
        cdef Xfer *u
        while True:
            u = self.find_stashed(x, source, &peer)
            if u is not NULL:
                x.hdr = u.hdr
                x.nbytes = u.nbytes
                x.peer = self._world[peer]
                return 1
            # Read whatever has arrived, from every pair that may send it.
            moved = 0
            for i in range(self.size):
                if i != self.rank and (source < 0 or i == source):
                    moved |= (<Pair>self._pair_ptrs[i]).progress()
            if moved:
                if self.links.nsleepers:
                    self.links.wake()
                spin_until = 0
                continue
            if not block:
                return 0
            if spin_until == 0:
                spin_until = now_ns() + self.spin_ns
            if now_ns() >= spin_until:
                self.block(c)
                spin_until = 0
            else:
                self.pause()

    cdef object take_from_self(self, char *buf, int64_t nbytes, int tag):
        for i, (t, data) in enumerate(self._to_self):
            if tag == -1 or t == tag:
                if len(data) > nbytes:
                    raise MismatchError(
                        f"rank {self.rank}: a message of {len(data)} bytes "
                        f"from rank {self.rank} (tag {t}) does not fit the "
                        f"{nbytes}-byte receive buffer", ERR_TRUNCATE)
                del self._to_self[i]
                memcpy(buf, <const char *>data, len(data))
                return self.rank, t, len(data)
        return None

    cdef int fail(self, BaseException exc, Coll *c) except -1:
        """Something raised mid-call: the streams are in an unknown state, so
        the context is poisoned and the pairs forget the call's transfers.
        Every context over the same links is poisoned with it: their
        transfers are forgotten too. Called with the links' lock held.

        First, every peer we can still reach is told why we stop (once, at
        the first failure; a reason a peer told us is passed on), so that
        each rank names the root cause, not a rank that only gave up because
        of it. A timeout is traced to the rank that never came."""
        if self.error is None:
            self.error = exc
        links = self.links
        first = links.error is None
        if first:
            links.error = exc
        links.failed = True
        links.wild_head = links.wild_tail = NULL
        told = getattr(exc, "_abort", None)     # why, code, culprit, origin, waits
        if first and c is not NULL and isinstance(exc, CollectiveTimeout):
            self.trace_timeout(exc, c, told)
        elif first:
            why, code, culprit, origin = (told or self.abort_reason(exc))[:4]
            for p in links.pairs:
                if p is not None and (<Pair>p).peer != origin:
                    (<Pair>p).say_abort(why, code, culprit, origin)
        if told is not None and c is not NULL and not isinstance(exc, CollectiveTimeout):
            exc.args = (f"{exc}; rank {self.rank} was in "
                        f"{describe_call(&c.proto)}",) + exc.args[1:]
        for p in links.pairs:
            if p is not None:
                (<Pair>p).abandon()
        links.wake()
        return 0

    cdef tuple abort_reason(self, BaseException exc):
        """(why, AbortCode, world rank at fault or -1, -1) of our own error."""
        why = (str(exc) if isinstance(exc, GloocyError) or not str(exc)
               else f"{type(exc).__name__}: {exc}")
        why = (why or type(exc).__name__).encode()
        if isinstance(exc, MismatchError):
            return why, ABORT_MISMATCH, -1, -1
        if isinstance(exc, PeerLostError):
            return why, ABORT_PEER_LOST, -1 if exc.rank is None else exc.rank, -1
        if isinstance(exc, ProtocolError):
            return why, ABORT_PROTOCOL, -1, -1
        return why, ABORT_OTHER, -1, -1

    cdef int trace_timeout(self, object exc, Coll *c, object told) except -1:
        """Our call timed out (`told` is None), or a peer's did and told us.
        The ranks we wait for may themselves wait for others (a ring, a
        tree): tell every peer whom we wait for and listen TRACE_GRACE for
        theirs (they time out about now too, or hear of it from us). The
        ranks someone waits for that never speak are the ones that never
        came: the message names them, `culprit` is the first."""
        cdef int me = self._world[self.rank]
        late = list(exc.ranks) if told is None else waited_for(self)
        waits = {me: {self._world[i] for i in late}}    # world rank -> whom it waits for
        if told is not None:
            waits[told[3]] = set(told[4])
        call = describe_call(&c.proto)
        mine = ", ".join(map(str, late)) or "?"
        why = (f"rank {self.rank}: {call} timed out waiting for rank(s) {mine}".encode()
               + b"\0" + ",".join(map(str, sorted(waits[me]))).encode())
        live = []
        for p in self.links.pairs:
            if p is not None:
                (<Pair>p).say_abort(why, ABORT_TIMEOUT, -1, -1)
                live.append(p)
        deadline = time.monotonic() + TRACE_GRACE
        while live and time.monotonic() < deadline:
            for p in list(live):
                try:
                    (<Pair>p).progress()
                except GloocyError as e:
                    live.remove(p)
                    heard = getattr(e, "_abort", None)
                    if heard is not None and heard[1] == ABORT_TIMEOUT:
                        waits[heard[3]] = set(heard[4])
            time.sleep(0.002)
        missing = sorted(set().union(*waits.values()) - set(waits))
        if told is None:
            text = f"rank {self.rank}: {call} timed out waiting for rank(s) {mine}"
        else:
            text = (f"rank {self.rank}: {call} stopped when "
                    f"{self.rank_name(told[3])} timed out")
            if late:
                text += f"; rank {self.rank} was waiting for rank(s) {mine}"
        if missing:
            exc.culprit = missing[0]
            if told is not None or [self._world[i] for i in late] != missing:
                text += "; " + ", ".join(map(self.rank_name, missing)) + " never came"
        exc.args = (text,) + exc.args[1:]
        return 0

    cdef str rank_name(self, int world):
        """How our messages name the process of `world` rank."""
        if self._local[world] >= 0:
            return f"rank {self._local[world]}"
        return f"world rank {world}"

    # -- transfers ---------------------------------------------------------

    cdef int post_send(self, Coll *c, Xfer *x, int peer, uint64_t tag,
                       const char *buf, int64_t n) except -1 nogil:
        x.buf = <char *>buf
        x.nbytes = n
        x.done = 0
        x.hdr = c.proto
        x.hdr.tag = tag
        x.hdr.length = <uint64_t>n
        x.next = NULL
        x.flags = 0
        x.state = XFER_POSTED
        return (<Pair>self._pair_ptrs[peer]).post_send(x)

    cdef int post_recv(self, Coll *c, Xfer *x, int peer, uint64_t tag,
                       char *buf, int64_t n) except -1 nogil:
        x.buf = buf
        x.nbytes = n
        x.done = 0
        x.hdr = c.proto
        x.hdr.tag = tag
        x.hdr.length = <uint64_t>n
        x.next = NULL
        x.flags = 0
        x.state = XFER_POSTED
        return (<Pair>self._pair_ptrs[peer]).post_recv(x)

    cdef int progress_all(self) except -1 nogil:
        cdef int i, moved = 0
        cdef bint everyone = self.links.wild_head is not NULL  # any source may send
        for i in range(self.size):
            if i != self.rank and (everyone or (<Pair>self._pair_ptrs[i]).busy()):
                moved |= (<Pair>self._pair_ptrs[i]).progress()
        if moved and self.links.nsleepers:
            self.links.wake()
        return moved

    cdef int post_p2p_recv(self, Xfer *x, int source) except -1 nogil:
        cdef int peer
        cdef Xfer *u
        x.order = self.links.order
        self.links.order += 1
        if source >= 0:
            return (<Pair>self._pair_ptrs[source]).post_recv(x)
        u = self.find_stashed(x, -1, &peer)     # a frame that came first
        if u is not NULL:
            return (<Pair>self._pair_ptrs[peer]).take_unexpected(u, x)
        xfer_append(&self.links.wild_head, &self.links.wild_tail, x)
        return 0

    cdef bint cancel_p2p_recv(self, Xfer *x, int source) noexcept nogil:
        if source >= 0:
            return (<Pair>self._pair_ptrs[source]).cancel_recv(x)
        return xfer_unlink(&self.links.wild_head, &self.links.wild_tail, x)

    cdef int wait(self, Coll *c, Xfer *x) except -1 nogil:
        cdef int64_t spin_until = 0
        while x.state != XFER_DONE:
            if self.progress_all():
                spin_until = 0
                continue
            if x.state == XFER_DONE:
                break
            if spin_until == 0:
                spin_until = now_ns() + self.spin_ns
            if now_ns() < spin_until:
                self.pause()
                continue
            self.block(c)
            spin_until = 0
        return 0

    cdef int pause(self) except -1 nogil:
        """Between two spins: let another thread at the links, and stop if
        one of them failed (our transfers are forgotten then)."""
        if self.links.users > 1:
            self.links.leave()
            self.links.enter()
        if self.links.failed:
            return _raise_links_failed(self)
        return 0

    cdef int waitall(self, Coll *c, Xfer *xs, int64_t n) except -1 nogil:
        cdef int64_t i
        for i in range(n):
            self.wait(c, &xs[i])
        return 0

    cdef int block(self, Coll *c) except -1 nogil:
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
            return _raise_timeout(self, c)
        if self.size > 64:
            pfds = <pollfd *>malloc((self.size + 1) * sizeof(pollfd))
            pairs_at = <int *>malloc((self.size + 1) * sizeof(int))
            if pfds is NULL or pairs_at is NULL:
                free(pfds)
                free(pairs_at)
                with gil:
                    raise MemoryError()
        try:
            for i in range(self.size):
                if i == self.rank:
                    continue
                events = (<Pair>self._pair_ptrs[i]).wait_events()
                if events:
                    pfds[n].fd = (<Pair>self._pair_ptrs[i]).wait_fd()
                    pfds[n].events = events
                    pfds[n].revents = 0
                    pairs_at[n] = i
                    n += 1
            if self.links.users > 1:
                # Others may move our bytes while we sleep: let them wake us.
                if self.has_efd() and self.links.add_sleeper(self._efd):
                    sleeping = True
                    pfds[n].fd = self._efd
                    pfds[n].events = POLLIN
                    pfds[n].revents = 0
                    pairs_at[n] = -1
                    n += 1
                elif n == 0:
                    left = 1          # cannot be woken: nap, look again
            self.links.leave()
            r = poll(pfds, n, <int>min(POLL_SLICE_MS, left // 1000000 + 1))
            err = errno
            self.links.enter()
            if sleeping:
                self.links.drop_sleeper(self._efd)
                c_read(self._efd, &drained, sizeof(drained))
            if self.links.failed:
                return _raise_links_failed(self)
            if r < 0 and err != EINTR:
                return _raise_poll_error(err)
            if r <= 0:
                self.links.leave()
                try:
                    _check_signals()
                finally:
                    self.links.enter()
            else:
                # Pairs with nothing posted are polled only to notice a peer
                # that hangs up; let them read what woke them.
                for i in range(n):
                    if (pairs_at[i] >= 0 and pfds[i].revents
                            and not (<Pair>self._pair_ptrs[pairs_at[i]]).busy()):
                        (<Pair>self._pair_ptrs[pairs_at[i]]).progress()
        finally:
            if pfds is not fds:
                free(pfds)
                free(pairs_at)
        return 0

    # -- collectives (Python entry points) ------------------------------------
    # Each checks its arguments before anything is sent, stamps the call, and
    # runs the algorithm without the GIL. Anything raised after the stamp
    # poisons the context (see fail()).

    cdef int _check_root(self, int root) except -1:
        if not 0 <= root < self.size:
            raise ArgumentError(f"root: {root} is not a rank of this "
                                f"communicator (size {self.size})", ERR_ROOT)
        return 0

    cpdef barrier(self, timeout=None):
        """Block until every rank has entered the barrier."""
        cdef Coll c
        self.begin(&c, KIND_BARRIER, OP_NONE, DT_BYTES, -1, 0, timeout)
        try:
            if self.node is not None:
                with nogil:
                    node_barrier(self, &c)
                self.sweep(&c)
            else:
                with nogil:
                    run_barrier(self, &c)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()

    cpdef bcast(self, buf, int root, timeout=None, algorithm=None):
        """Copy root's `buf` into every other rank's `buf` (same byte size).
        `algorithm`: a name in BCAST_ALGORITHMS (None: automatic)."""
        cdef Coll c
        self._check_root(root)
        cdef Buf b = get_buffer(buf, "buf", self.rank != root)
        cdef int algo = _algorithm("bcast", algorithm, self.env_algorithms)
        self.begin(&c, KIND_BCAST, OP_NONE, DT_BYTES, root, b.nbytes, timeout)
        try:
            algo = node_choice(self, algo, b.nbytes, NODE_ALWAYS)
            if algo == ALGO_SHM:
                self.last_algorithm = "shm"
                with nogil:
                    node_bcast(self, &c, b.ptr, b.nbytes, root)
                self.sweep(&c)
                return
            algo = pick_bcast(self, b.nbytes, algo)
            self.last_algorithm = ALGORITHM_NAMES[algo]
            with nogil:
                run_bcast(self, &c, b.ptr, b.nbytes, algo)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()

    cpdef allreduce(self, sendbuf, recvbuf, int op, timeout=None,
                  algorithm=None):
        """recvbuf = op over every rank's sendbuf (recvbuf's own contents
        when sendbuf is None: in place)."""
        cdef Coll c
        cdef Buf sb = None
        cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
        rb.require_dtype()
        cdef reduce_fn fn = kernel_for(op, rb.dtype)
        cdef int algo = _algorithm("allreduce", algorithm, self.env_algorithms)
        cdef bint on_node
        if sendbuf is not None:
            sb = get_buffer(sendbuf, "sendbuf", False)
            _same_layout(sb, rb)
        self.begin(&c, KIND_ALLREDUCE, op, rb.dtype, -1, rb.count, timeout)
        try:
            c.fn = fn
            on_node = node_choice(self, algo, rb.nbytes, NODE_ALWAYS) == ALGO_SHM
            if on_node:
                self.last_algorithm = "shm"
            else:
                algo = pick_allreduce(self, rb.count, c.itemsize,
                                      ALGO_AUTO if algo == ALGO_SHM else algo)
                self.last_algorithm = ALGORITHM_NAMES[algo]
            with nogil:
                if sb is not None and sb.ptr != rb.ptr:
                    memmove(rb.ptr, sb.ptr, rb.nbytes)
                if on_node:
                    node_allreduce(self, &c, rb.ptr, rb.count)
                else:
                    run_allreduce(self, &c, rb.ptr, rb.count, algo)
            if on_node:
                self.sweep(&c)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()

    cpdef allgatherv(self, sendbuf, recvbuf, counts, displs=None, timeout=None, algorithm=None):
        """Every rank's sendbuf lands in every recvbuf: rank i's block is
        counts[i] bytes at byte displs[i] (default: end to end). sendbuf
        None: our block is already in place in recvbuf. `algorithm`: a name
        in ALLGATHER_ALGORITHMS (None: automatic; recursive doubling falls
        back to the ring unless the size is a power of two and the blocks
        lie end to end)."""
        cdef Coll c
        cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
        cdef I64 sizes, offs
        sizes, offs = _layout(counts, displs, self.size, rb, "recvbuf")
        cdef Buf sb = None
        if sendbuf is not None:
            sb = get_buffer(sendbuf, "sendbuf", False)
            if sb.nbytes != sizes.v[self.rank]:
                raise ValueError(f"sendbuf has {sb.nbytes} bytes but "
                                 f"counts[{self.rank}] is {sizes.v[self.rank]}")
        cdef int algo = _algorithm("allgather", algorithm, self.env_algorithms)
        self.begin(&c, KIND_ALLGATHERV, OP_NONE, DT_BYTES, -1, 0, timeout)
        try:
            algo = node_choice(self, algo, 0, NODE_ALWAYS)
            if algo == ALGO_SHM:
                self.last_algorithm = "shm"
                c.proto.count = sizes_digest(sizes)   # every rank's view of them
                with nogil:
                    node_allgatherv(self, &c, sb.ptr if sb is not None else
                                    rb.ptr + offs.v[self.rank], rb.ptr, offs.v, sizes.v)
                self.sweep(&c)
                return
            algo = pick_allgather(self, offs.v, sizes.v, algo)
            self.last_algorithm = ALGORITHM_NAMES[algo]
            with nogil:
                if sb is not None:
                    memmove(rb.ptr + offs.v[self.rank], sb.ptr, sb.nbytes)
                run_allgatherv(self, &c, rb.ptr, offs.v, sizes.v, algo)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()

    # -- point-to-point ------------------------------------------------------
    # Frames of kind P2P carry the user's tag and match by (communicator,
    # source, tag) in arrival order; they are stashed when they come before
    # their receive, so sends complete without waiting for it.

    cdef int _check_peer(self, int rank, str name, bint any_ok) except -1:
        if not (0 <= rank < self.size or (any_ok and rank == -1)):
            raise ArgumentError(f"{name}: {rank} is not a rank of this "
                                f"communicator (size {self.size})", ERR_RANK)
        return 0

    cpdef send(self, buf, int dest, int tag=0, timeout=None):
        """Send buf's bytes to rank `dest` with `tag` (>= 0)."""
        cdef Coll c
        cdef Xfer x
        self._check_peer(dest, "dest", False)
        if tag < 0:
            raise ArgumentError(f"tag: must be >= 0, got {tag}", ERR_TAG)
        cdef Buf b = get_buffer(buf, "buf", False)
        if dest == self.rank:
            self._send_to_self(tag, bytes(b.ptr[:b.nbytes]))
            return
        self.begin_p2p(&c, timeout)
        try:
            with nogil:
                self.post_send(&c, &x, dest, <uint64_t>tag, b.ptr, b.nbytes)
                self.wait(&c, &x)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()

    cpdef recv(self, buf, int source=-1, int tag=-1, timeout=None):
        """Receive into buf from `source` (-1: any rank) with `tag` (-1: any
        tag). Returns (source, tag, nbytes received)."""
        cdef Coll c
        cdef Xfer x
        self._check_peer(source, "source", True)
        if tag < -1:
            raise ArgumentError(f"tag: must be >= 0 or -1 (any), got {tag}", ERR_TAG)
        cdef Buf b = get_buffer(buf, "buf", True)
        if source in (-1, self.rank):
            got = self.take_from_self(b.ptr, b.nbytes, tag)
            if got is not None:
                return got
            if source == self.rank or self.size == 1:
                raise ContextPoisoned(f"rank {self.rank}: recv from itself "
                                      "with no message sent to itself: it "
                                      "would wait forever")
        self.begin_p2p(&c, timeout)
        try:
            _p2p_want(&x, &c, b.ptr, b.nbytes, tag)
            with nogil:
                self.post_p2p_recv(&x, source)
                self.wait(&c, &x)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()
        return self._local[x.peer], <int64_t>x.hdr.tag, x.nbytes

    cpdef isend(self, buf, int dest, int tag=0):
        """Start sending buf to `dest`; returns a P2PHandle to wait on. buf
        must not change until then."""
        self._check_peer(dest, "dest", False)
        if tag < 0:
            raise ArgumentError(f"tag: must be >= 0, got {tag}", ERR_TAG)
        cdef Buf b = get_buffer(buf, "buf", False)
        cdef P2PHandle h = P2PHandle.__new__(P2PHandle)
        h.ctx, h.buf, h.peer, h.tag, h.is_send = self, b, dest, tag, True
        if dest == self.rank:
            self._send_to_self(tag, bytes(b.ptr[:b.nbytes]))
            h.result = (dest, tag, b.nbytes)
            return h
        self.begin_p2p(&h.c, None)
        try:
            with nogil:
                self.post_send(&h.c, &h.x, dest, <uint64_t>tag, b.ptr, b.nbytes)
        except BaseException as e:
            self.fail(e, &h.c)
            raise
        finally:
            self.end()
        h.posted = True
        self._requests.add(h)
        return h

    cpdef irecv(self, buf, int source=-1, int tag=-1):
        """Start receiving into buf from `source` (-1: any) with `tag` (-1:
        any); returns a P2PHandle to wait on."""
        self._check_peer(source, "source", True)
        if tag < -1:
            raise ArgumentError(f"tag: must be >= 0 or -1 (any), got {tag}", ERR_TAG)
        cdef Buf b = get_buffer(buf, "buf", True)
        cdef P2PHandle h = P2PHandle.__new__(P2PHandle)
        h.ctx, h.buf, h.peer, h.tag = self, b, source, tag
        self.begin_p2p(&h.c, None)
        try:
            _p2p_want(&h.x, &h.c, b.ptr, b.nbytes, tag)
            if source == self.rank or (source == -1 and h._take_from_self()):
                return h                  # from ourselves: matched at wait time
            with nogil:
                self.post_p2p_recv(&h.x, source)
        except BaseException as e:
            self.fail(e, &h.c)
            raise
        finally:
            self.end()
        h.posted = True
        self._requests.add(h)
        return h

    cdef int _send_to_self(self, int tag, bytes data) except -1:
        """A message to ourselves: to the oldest any-source receive posted
        that takes it, else kept for a later receive."""
        with nogil:
            self.links.enter()
        try:
            self._deliver_to_self(tag, data)
        finally:
            self.links.leave()
        return 0

    cdef int _deliver_to_self(self, int tag, bytes data) except -1:
        cdef Header h
        cdef Xfer *x = self.links.wild_head
        init_header(&h)
        h.kind = KIND_P2P
        h.comm_id = self.comm_id
        h.tag = <uint64_t>tag
        h.length = len(data)
        while x is not NULL and not frame_matches(&h, x):
            x = x.next
        if x is NULL:
            self._to_self.append((tag, data))
            return 0
        check_frame(&h, x, self.rank, self.rank)
        self.cancel_p2p_recv(x, -1)
        memcpy(x.buf, <const char *>data, len(data))
        x.hdr = h
        x.nbytes = len(data)
        x.peer = self._world[self.rank]
        x.state = XFER_DONE
        return 0

    cpdef probe(self, int source=-1, int tag=-1, bint block=True,
              timeout=None):
        """(source, tag, nbytes) of the next message a recv(source, tag)
        would get, without receiving it; None if `block` is False and
        there is none yet."""
        cdef Coll c
        cdef Xfer x
        cdef int found
        self._check_peer(source, "source", True)
        if source in (-1, self.rank):
            for t, data in self._to_self:
                if tag == -1 or t == tag:
                    return self.rank, t, len(data)
            if source == self.rank or self.size == 1:
                if not block:
                    return None
                raise ContextPoisoned(f"rank {self.rank}: probe of itself "
                                      "with no message sent to itself")
        self.begin_p2p(&c, timeout)
        try:
            _p2p_want(&x, &c, NULL, 0, tag)
            with nogil:
                found = self.probe_stashed(&c, &x, source, block)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()
        if not found:
            return None
        return self._local[x.peer], <int64_t>x.hdr.tag, x.nbytes

    cpdef reduce(self, sendbuf, recvbuf, int op, int root, timeout=None,
               algorithm=None):
        """recvbuf at root = op over every rank's sendbuf. Non-roots may pass
        recvbuf None; the root may pass sendbuf None (in place)."""
        cdef Coll c
        self._check_root(root)
        cdef bint at_root = self.rank == root
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
        cdef int algo = _algorithm("reduce", algorithm, self.env_algorithms)
        cdef char *acc
        cdef char *out = rb.ptr if rb is not None else NULL
        self.begin(&c, KIND_REDUCE, op, ref.dtype, root, ref.count, timeout)
        try:
            c.fn = fn
            algo = pick_reduce(self, ref.count, c.itemsize, node_choice(
                self, algo, ref.nbytes, NODE_REDUCE_MIN))
            self.last_algorithm = ALGORITHM_NAMES[algo]
            with nogil:
                if at_root:
                    acc = out
                    if sb is not None and sb.ptr != out:
                        memmove(acc, sb.ptr, ref.nbytes)
                else:
                    # Our contribution is clobbered: work on a copy, kept
                    # apart from the scratch the algorithms use.
                    acc = self.work(ref.nbytes)
                    memcpy(acc, sb.ptr, ref.nbytes)
                if algo == ALGO_SHM:
                    node_reduce_to(self, &c, acc, ref.count, root)
                else:
                    run_reduce(self, &c, acc, ref.count, out, algo)
            if algo == ALGO_SHM:
                self.sweep(&c)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()

    cpdef reduce_scatter(self, sendbuf, recvbuf, counts, int op, timeout=None, algorithm=None):
        """Reduce every rank's sendbuf (sum(counts) elements) and leave block
        i (counts[i] elements) on rank i, in recvbuf. sendbuf None: recvbuf
        holds the whole input (in place). `algorithm`: a name in
        REDUCE_SCATTER_ALGORITHMS (None: automatic)."""
        cdef Coll c
        cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
        cdef Buf sb = (get_buffer(sendbuf, "sendbuf", False)
                       if sendbuf is not None else rb)
        sb.require_dtype()
        if sendbuf is not None:
            _same_dtype(sb, rb)
        cdef reduce_fn fn = kernel_for(op, sb.dtype)
        cdef I64 lens = I64(_counts(counts, self.size, "recvcounts"))
        cdef I64 offs = lens.prefix()
        cdef int64_t total = lens.total()
        if sb.count != total:
            raise ValueError(f"sendbuf has {sb.count} elements but recvcounts "
                             f"add up to {total}")
        if rb.count < lens.v[self.rank]:
            raise ValueError(f"recvbuf has {rb.count} elements but "
                             f"recvcounts[{self.rank}] is {lens.v[self.rank]}")
        cdef int algo = _algorithm("reduce_scatter", algorithm, self.env_algorithms)
        cdef int64_t isz = sb.itemsize, mine = lens.v[self.rank] * isz
        cdef char *acc
        self.begin(&c, KIND_REDUCE_SCATTER, op, sb.dtype, -1, total, timeout)
        try:
            c.fn = fn
            algo = pick_reduce_scatter(self, total * isz, node_choice(
                self, algo, total * isz, NODE_ALWAYS))
            self.last_algorithm = ALGORITHM_NAMES[algo]
            with nogil:
                acc = self.work(total * isz)
                memcpy(acc, sb.ptr, total * isz)
                if algo == ALGO_SHM:
                    node_reduce_scatter(self, &c, acc, offs.v, lens.v)
                else:
                    run_reduce_scatter(self, &c, acc, offs.v, lens.v, algo)
                memcpy(rb.ptr, acc + offs.v[self.rank] * isz, mine)
            if algo == ALGO_SHM:
                self.sweep(&c)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()

    cpdef scan(self, sendbuf, recvbuf, int op, bint exclusive=False,
             timeout=None):
        """recvbuf on rank r = op over ranks 0..r (exclusive: 0..r-1; rank
        0's recvbuf is left as it is). sendbuf None: in place."""
        cdef Coll c
        cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
        cdef Buf sb = (get_buffer(sendbuf, "sendbuf", False)
                       if sendbuf is not None else rb)
        rb.require_dtype()
        if sendbuf is not None:
            _same_layout(sb, rb)
        cdef reduce_fn fn = kernel_for(op, rb.dtype)
        cdef char *x
        self.begin(&c, KIND_EXSCAN if exclusive else KIND_SCAN, op, rb.dtype,
                   -1, rb.count, timeout)
        try:
            c.fn = fn
            with nogil:
                x = self.work(rb.nbytes)
                memcpy(x, sb.ptr, rb.nbytes)
                run_scan(self, &c, x, rb.count, rb.ptr, exclusive)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()

    cpdef gatherv(self, sendbuf, recvbuf, counts, displs, int root,
                  timeout=None, algorithm=None):
        """Rank i's sendbuf lands in root's recvbuf at byte displs[i]
        (counts[i] bytes). The root may pass sendbuf None (its block is in
        place); non-roots may pass recvbuf None."""
        cdef Coll c
        self._check_root(root)
        cdef bint at_root = self.rank == root
        if sendbuf is None and not at_root:
            raise ArgumentError("sendbuf: only the root may gather in place", ERR_BUFFER)
        cdef Buf sb = (get_buffer(sendbuf, "sendbuf", False)
                       if sendbuf is not None else None)
        cdef Buf rb = None
        cdef I64 sizes = None, offs = None
        if at_root:
            rb = get_buffer(recvbuf, "recvbuf", True)
            sizes, offs = _layout(counts, displs, self.size, rb, "recvbuf")
            if sb is not None and sb.nbytes != sizes.v[root]:
                raise ValueError(f"sendbuf has {sb.nbytes} bytes but the "
                                 f"root's block is {sizes.v[root]}")
        cdef int algo = _algorithm("gather", algorithm, self.env_algorithms)
        self.begin(&c, KIND_GATHERV, OP_NONE, DT_BYTES, root, 0, timeout)
        try:
            algo = node_choice(self, algo, 0, NODE_FORCED_ONLY)
            self.last_algorithm = ALGORITHM_NAMES[ALGO_DIRECT if algo == ALGO_AUTO else algo]
            with nogil:
                if algo == ALGO_SHM:
                    node_gatherv(self, &c, sb.ptr if sb is not None else NULL,
                                 sb.nbytes if sb is not None else 0,
                                 rb.ptr if at_root else NULL,
                                 offs.v if at_root else NULL,
                                 sizes.v if at_root else NULL)
                else:
                    run_gatherv(self, &c, sb.ptr if sb is not None else NULL,
                                sb.nbytes if sb is not None else 0,
                                rb.ptr if at_root else NULL,
                                offs.v if at_root else NULL,
                                sizes.v if at_root else NULL)
            if algo == ALGO_SHM:
                self.sweep(&c)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()

    cpdef scatterv(self, sendbuf, recvbuf, counts, displs, int root,
                   timeout=None, algorithm=None):
        """Root's sendbuf block i (counts[i] bytes at displs[i]) lands in
        rank i's recvbuf. The root may pass recvbuf None (it keeps its
        block); non-roots may pass sendbuf None."""
        cdef Coll c
        self._check_root(root)
        cdef bint at_root = self.rank == root
        if recvbuf is None and not at_root:
            raise ArgumentError("recvbuf: only the root may scatter in place", ERR_BUFFER)
        cdef Buf rb = (get_buffer(recvbuf, "recvbuf", True)
                       if recvbuf is not None else None)
        cdef Buf sb = None
        cdef I64 sizes = None, offs = None
        if at_root:
            sb = get_buffer(sendbuf, "sendbuf", False)
            sizes, offs = _layout(counts, displs, self.size, sb, "sendbuf")
            if rb is not None and rb.nbytes != sizes.v[root]:
                raise ValueError(f"recvbuf has {rb.nbytes} bytes but the "
                                 f"root's block is {sizes.v[root]}")
        cdef int algo = _algorithm("scatter", algorithm, self.env_algorithms)
        self.begin(&c, KIND_SCATTERV, OP_NONE, DT_BYTES, root, 0, timeout)
        try:
            algo = node_choice(self, algo, 0, NODE_FORCED_ONLY)
            self.last_algorithm = ALGORITHM_NAMES[ALGO_DIRECT if algo == ALGO_AUTO else algo]
            with nogil:
                if algo == ALGO_SHM:
                    node_scatterv(self, &c, sb.ptr if at_root else NULL,
                                  offs.v if at_root else NULL,
                                  sizes.v if at_root else NULL,
                                  rb.ptr if rb is not None else NULL,
                                  rb.nbytes if rb is not None else 0)
                else:
                    run_scatterv(self, &c, sb.ptr if at_root else NULL,
                                 offs.v if at_root else NULL,
                                 sizes.v if at_root else NULL,
                                 rb.ptr if rb is not None else NULL,
                                 rb.nbytes if rb is not None else 0)
            if algo == ALGO_SHM:
                self.sweep(&c)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()

    cpdef alltoallv(self, sendbuf, sendcounts, senddispls, recvbuf,
                    recvcounts, recvdispls, timeout=None, algorithm=None):
        """Block i of sendbuf (bytes) goes to rank i; rank i's block for us
        lands at recvdispls[i]. sendbuf None: recvbuf holds the blocks to
        send, laid out as recvcounts/recvdispls (in place)."""
        cdef Coll c
        cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
        cdef I64 rsizes, roffs, ssizes, soffs
        rsizes, roffs = _layout(recvcounts, recvdispls, self.size, rb, "recvbuf")
        cdef Buf sb
        if sendbuf is None:
            sendbuf = bytes(rb.ptr[:rb.nbytes])    # a copy: blocks move
            ssizes, soffs = rsizes, roffs
        else:
            sb = get_buffer(sendbuf, "sendbuf", False)
            ssizes, soffs = _layout(sendcounts, senddispls, self.size, sb,
                                    "sendbuf")
        sb = get_buffer(sendbuf, "sendbuf", False)
        if ssizes.v[self.rank] != rsizes.v[self.rank]:
            raise ValueError(f"sendbuf block {self.rank} has "
                             f"{ssizes.v[self.rank]} bytes but recvbuf block "
                             f"{self.rank} has {rsizes.v[self.rank]}: rank "
                             f"{self.rank} sends itself one and receives the "
                             f"other")
        cdef int algo = _algorithm("alltoall", algorithm, self.env_algorithms)
        self.begin(&c, KIND_ALLTOALLV, OP_NONE, DT_BYTES, -1, 0, timeout)
        try:
            algo = node_choice(self, algo, 0, NODE_ALWAYS)
            self.last_algorithm = ALGORITHM_NAMES[ALGO_DIRECT if algo == ALGO_AUTO else algo]
            with nogil:
                if algo == ALGO_SHM:
                    node_alltoallv(self, &c, sb.ptr, soffs.v, ssizes.v, rb.ptr,
                                   roffs.v, rsizes.v)
                else:
                    run_alltoallv(self, &c, sb.ptr, soffs.v, ssizes.v, rb.ptr,
                                  roffs.v, rsizes.v)
            if algo == ALGO_SHM:
                self.sweep(&c)
        except BaseException as e:
            self.fail(e, &c)
            raise
        finally:
            self.end()


cdef class P2PHandle:
    """An Isend or Irecv in flight. Its Xfer lives here, so the Context keeps
    the handle (and through it the buffer) alive until it is done or
    cancelled. Progress is made by any wait on the communicator."""
    cdef Context ctx
    cdef Buf buf
    cdef Coll c
    cdef Xfer x
    cdef int peer           # dest, or source (-1: any)
    cdef int tag            # receives: the wanted tag (-1: any)
    cdef bint is_send
    cdef bint posted        # x sits in a pair's queue
    cdef bint _cancelled
    cdef object result      # (source or dest, tag, nbytes) once done

    @property
    def done(self):
        return self.result is not None or self._cancelled

    @property
    def cancelled(self):
        return self._cancelled

    def wait(self, timeout=None):
        """Block until done; (source, tag, nbytes), None if cancelled."""
        while not self._step(True, timeout):
            pass
        return self.result

    def test(self):
        """Make progress without blocking; (source, tag, nbytes) if done."""
        self._step(False, None)
        return self.result

    def cancel(self):
        """Withdraw a receive that nothing has arrived for; True if it was
        (sends cannot be withdrawn)."""
        cdef bint withdrawn = True
        if self.done or self.is_send:
            return False
        if self.posted:
            with nogil:
                self.ctx.links.enter()
                withdrawn = self.ctx.cancel_p2p_recv(&self.x, self.peer)
                self.ctx.links.leave()
        if not withdrawn:
            return False
        self._cancelled = True
        self.ctx._requests.discard(self)
        return True

    cdef bint _take_from_self(self) except -1:
        """A receive from ourselves (or anyone): messages we sent us."""
        self.result = self.ctx.take_from_self(self.buf.ptr, self.buf.nbytes,
                                              self.tag)
        return self.result is not None

    cdef int _step(self, bint block, object timeout) except -1:
        """One attempt to finish; 1 when done."""
        cdef Context ctx = self.ctx
        cdef int found = 0
        if self.done:
            return 1
        if not self.is_send and not self.posted:   # a receive from ourselves
            if self._take_from_self():
                return 1
            if block:
                raise ContextPoisoned(
                    f"rank {ctx.rank}: waiting for a message from itself "
                    "that was never sent: it would wait forever")
            return 0
        if self.posted and self.x.state == XFER_DONE:  # sent to us by us
            self.result = (ctx._local[self.x.peer], <int64_t>self.x.hdr.tag,
                           self.x.nbytes)
            ctx._requests.discard(self)
            return 1
        ctx.check_usable()
        cdef double t = ctx.timeout if timeout is None else timeout
        self.c.deadline = now_ns() + <int64_t>min(t * 1e9, 4e18)
        with nogil:
            ctx.links.enter()
        try:
            with nogil:
                if block:
                    ctx.wait(&self.c, &self.x)
                elif self.x.state != XFER_DONE:
                    ctx.progress_all()
                found = self.x.state == XFER_DONE
        except BaseException as e:
            ctx.fail(e, &self.c)
            raise
        finally:
            ctx.end()
        if not found:
            return 0
        self.result = (self.peer if self.is_send else ctx._local[self.x.peer],
                       <int64_t>self.x.hdr.tag, self.x.nbytes)
        ctx._requests.discard(self)
        return 1


cdef void _p2p_want(Xfer *x, Coll *c, char *buf, int64_t nbytes,
                    int tag) noexcept:
    """A point-to-point receive, ready to post or to probe with."""
    memset(x, 0, sizeof(Xfer))
    x.buf = buf
    x.nbytes = nbytes
    x.hdr = c.proto
    x.hdr.tag = <uint64_t>max(tag, 0)
    x.hdr.length = <uint64_t>nbytes
    x.flags = XF_ANY_TAG if tag < 0 else 0
    x.state = XFER_POSTED


cdef class I64:
    """A malloc'd array of int64 (counts, offsets) that frees itself."""
    cdef int64_t *v
    cdef Py_ssize_t n

    def __cinit__(self, values):
        self.n = len(values)
        self.v = <int64_t *>malloc(max(self.n, 1) * sizeof(int64_t))
        if self.v is NULL:
            raise MemoryError()
        for i, x in enumerate(values):
            self.v[i] = x

    def __dealloc__(self):
        free(self.v)

    @staticmethod
    cdef I64 zeros(Py_ssize_t n):
        cdef I64 z = I64(())
        free(z.v)
        z.v = <int64_t *>calloc(max(n, 1), sizeof(int64_t))
        if z.v is NULL:
            raise MemoryError()
        z.n = n
        return z

    cdef int64_t total(self):
        cdef int64_t t = 0
        for i in range(self.n):
            t += self.v[i]
        return t

    cdef I64 prefix(self):
        """Offsets of blocks of these sizes laid end to end."""
        out, at = [], 0
        for i in range(self.n):
            out.append(at)
            at += self.v[i]
        return I64(out)


cdef list _counts(object counts, int size, str name, str what=""):
    """`size` non-negative ints; errors name them as `name what`."""
    try:
        values = [int(n) for n in counts]
    except (TypeError, ValueError):
        raise TypeError(f"{_label(name, what)}: expected {size} integers, "
                        f"got {counts!r}") from None
    if len(values) != size:
        raise ValueError(f"{_label(name, what)}: expected {size} entries, "
                         f"got {len(values)}")
    for n in values:
        if n < 0:
            raise ValueError(f"{_label(name, what)}: counts must not be "
                             "negative")
    return values


cdef str _label(str name, str what):
    return f"{name} {what}" if what else name


cdef tuple _layout(object counts, object displs, int size, Buf b, str name):
    """(sizes, offsets) in bytes of `size` blocks inside buffer b (offsets
    default: end to end), checked to lie inside it."""
    cdef I64 sizes = I64(_counts(counts, size, name, "counts"))
    cdef I64 offs
    cdef int i
    if displs is None:
        offs = I64.zeros(size)
        for i in range(1, size):
            offs.v[i] = offs.v[i - 1] + sizes.v[i - 1]
    else:
        offs = I64(_counts(displs, size, name, "displacements"))
    for i in range(size):
        if offs.v[i] > b.nbytes or sizes.v[i] > b.nbytes - offs.v[i]:
            raise ValueError(f"{name}: block {i} ({sizes.v[i]} bytes at "
                             f"{offs.v[i]}) ends past the buffer's "
                             f"{b.nbytes} bytes")
    return sizes, offs


cdef int _same_dtype(Buf a, Buf b) except -1:
    if a.dtype != b.dtype:
        raise ValueError(f"{a.name} is {a.format!r} but {b.name} is "
                         f"{b.format!r}: the datatypes differ")
    return 0


cdef int _same_layout(Buf a, Buf b) except -1:
    if a.nbytes != b.nbytes:
        raise ValueError(f"{a.name} has {a.nbytes} bytes but {b.name} has "
                         f"{b.nbytes}")
    return _same_dtype(a, b)


def reduce_into(src, acc, int op):
    """acc = src <op> acc elementwise, in place (MPI_Reduce_local): both
    buffers of one dtype and size."""
    cdef Buf sb = get_buffer(src, "inbuf", False)
    cdef Buf ab = get_buffer(acc, "inoutbuf", True)
    ab.require_dtype()
    _same_layout(sb, ab)
    cdef reduce_fn fn = kernel_for(op, ab.dtype)
    with nogil:
        if ab.count:
            fn(ab.ptr, sb.ptr, ab.count)
