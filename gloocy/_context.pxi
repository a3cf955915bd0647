# The Context: this rank's view of a group: its pairs, counters, deadlines
# and first error. Its methods are its lifecycle (make, derive, close), the
# bookkeeping of one call (begin, stamp, end) and the entry points the API
# calls; the engine (_engine.pxi), failure (_failure.pxi) and every
# collective family (one file each) are module functions on a Context.


from libc.string cimport strncmp
from weakref import ref as _weak_ref

cdef extern from "<unistd.h>":
    char **environ

# What every ALGORITHM_ENV name starts with (found on first use).
cdef bytes _algorithm_env_prefix = None


cdef int _algorithm_env_set() except -1:
    """Whether any variable of the environment may be one of
    ALGORITHM_ENV's (else env_algorithms() would find none): one pass over
    the environment, cheaper than a getenv per name."""
    global _algorithm_env_prefix
    cdef char **entry = environ
    if _algorithm_env_prefix is None:
        from os.path import commonprefix
        _algorithm_env_prefix = commonprefix(
            list(ALGORITHM_ENV.values())).encode()
    cdef const char *prefix = _algorithm_env_prefix
    cdef size_t n = len(_algorithm_env_prefix)
    while entry is not NULL and entry[0] is not NULL:
        if entry[0][0] == prefix[0] and strncmp(entry[0], prefix, n) == 0:
            return True
        entry += 1
    return False


cdef extern from "_gil_queue.h":
    int gloocy_gil_queue_init()
    int gloocy_gil_queue_contexts     # Contexts alive in this process


cdef class Context:
    """This rank's view of a group: its pairs, counters and deadlines."""

    def __cinit__(self):             # (takes whatever __init__ is given)
        global gloocy_gil_queue_contexts
        self._efd = -1
        gloocy_gil_queue_contexts += 1    # (the GIL held: _gil_queue.h)

    def __init__(self, int rank, int size, list pairs=None, *,
                 Links links=None, world=None, uint32_t comm_id=0,
                 double timeout=300.0, int64_t segment=1 << 20,
                 int64_t spin_us=50, int64_t small_allreduce=1 << 16,
                 int node_fd=-1, int64_t yield_us=0):
        """A context over `pairs` (one per rank, None at `rank`), or over
        some of the `links` of another context: our rank i is their rank
        world[i] (see derive()). `node_fd`: the node segment every rank
        maps when all are on one host (see _node.pxi). A wait spins
        `spin_us`, then looks `yield_us` more yielding the CPU between
        looks, then sleeps (gloocy/waiting.py chooses both for the host);
        `yield_us` is the links', so it counts only when they are made here."""
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"rank {rank} is not in a world of size {size}")
        if segment < 1:
            raise ValueError("segment must be at least 1 byte")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if links is None:
            if len(pairs) != size:
                raise ValueError(f"pairs: expected {size} entries, got {len(pairs)}")
            _check_given_pairs(pairs, rank)
            links = Links(rank, size, list(pairs))
            links.yield_ns = max(yield_us, 0) * 1000
        elif world is None and size != links.size:
            raise ValueError(f"world: needed for {size} of the links' {links.size} ranks")
        self._setup(rank, size, links, world, comm_id, timeout, segment,
                    spin_us * 1000, small_allreduce)
        if node_fd >= 0:
            self.node = Node(node_fd, rank, size)

    cdef int _setup(self, int rank, int size, Links links, object world,
                    uint32_t comm_id, double timeout, int64_t segment,
                    int64_t spin_ns, int64_t small_allreduce) except -1:
        """The body of __init__, once the arguments are known to be good
        (derive() calls it directly: no arguments to parse). `world`: the
        links rank of each of our ranks, None for all of them in order."""
        cdef Py_ssize_t i
        cdef int w
        if self.links is not None:
            raise TypeError("a Context is initialised once")
        self.env_algorithms = env_algorithms() if _algorithm_env_set() else None
        self.links = links
        self.rank = rank
        self.size = size
        self.comm_id = comm_id
        self.timeout = timeout
        self.segment = segment
        self.spin_ns = spin_ns
        self.small_allreduce = small_allreduce
        self._to_self = []
        self._requests = set()
        self._pair_ptrs = <void **>malloc(size * sizeof(void *))
        self._conn = <void **>malloc(size * sizeof(void *))
        self._world = <int *>malloc(size * sizeof(int))
        self._local = <int *>malloc(links.size * sizeof(int))
        if (self._pair_ptrs is NULL or self._conn is NULL or self._world is NULL
                or self._local is NULL):
            raise MemoryError()
        # C loops: a world of thousands costs microseconds here
        if world is None:             # all of the links, in their order:
            # their very list (install_pair writes the same slot of it), not
            # a copy: a rank of thousands holds one list of N slots fewer,
            # for the garbage collector's full collections to walk
            self._pairs = links.pairs
            for i in range(size):
                self._world[i] = i
        else:
            self._pairs = [links.pairs[w] for w in world]
            for i, w in enumerate(world):
                self._world[i] = w
        for i in range(links.size):
            self._local[i] = -1
        for i in range(size):
            self._pair_ptrs[i] = <void *>PyList_GET_ITEM(self._pairs, i)
            self._local[self._world[i]] = i
            if i != rank and self._pair_ptrs[i] != unconnected:
                self._conn[self._nconn] = self._pair_ptrs[i]
                self._nconn += 1
        links.users += 1
        links.views.append(_weak_ref(self))   # lazy pairs are installed in us too
        return 0

    def __dealloc__(self):
        global gloocy_gil_queue_contexts
        gloocy_gil_queue_contexts -= 1
        free(self._pair_ptrs)
        free(self._conn)
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
        return self.derive_ranks([int(m) for m in members], comm_id)

    cdef Context derive_ranks(self, list members, uint32_t comm_id):
        """derive() for a list of ints (the API calls it in C)."""
        if self.closed:
            raise ContextPoisoned(f"rank {self.rank}: communicator is closed")
        world = [self._world[<int>m] for m in members]
        if self.links.next_id <= comm_id < 0x40000000:  # above: shadows, transients
            self.links.next_id = comm_id + 1
        cdef Context made = (Context.__new__(Context) if type(self) is Context
                             else type(self).__new__(type(self)))
        made._setup(members.index(self.rank), len(members), self.links, world,
                    comm_id, self.timeout, self.segment, self.spin_ns,
                    self.small_allreduce)
        return made

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
        if self.hier is not None:           # its two-level contexts
            (<Hier>self.hier).close()
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
        if self.node_wanted and kind != KIND_P2P:
            # A derived context makes its node segment at its first
            # collective, which every member reaches in the same order, so
            # that a Dup that runs none stays cheap. Cleared first: the
            # set-up's own collectives come back here.
            self.node_wanted = False
            share_node_segment(self, timeout)
        cdef double t = self.seconds(timeout)
        if not self.links.try_enter():      # free almost always: keep the GIL
            with nogil:
                self.links.enter()
        try:
            self.stamp(c, kind, op, dtype, root, count, t)
        except BaseException:
            self.links.leave()
            raise
        return 0

    cdef double seconds(self, object timeout) except -1:
        """The deadline of a call, in seconds from now, once the context is
        known to be usable."""
        self.check_usable()
        cdef double t = self.timeout if timeout is None else timeout
        if not t > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        return t

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
        cdef int peer, i
        seq = min(seq, schedules_low_seq(self))   # theirs may wait in the stash
        for i in range(self._nconn):         # (only connected pairs get frames)
            stale = (<Pair>self._conn[i]).find_stale(self.comm_id, seq)
            if stale is not NULL:
                peer = self._local[(<Pair>self._conn[i]).peer]
                break
        if stale is NULL:
            return 0
        past = &self._recent[stale.hdr.seq % 16]
        mine = (f"called {describe_call(past)}"
                if past.seq == stale.hdr.seq and past.kind
                else f"made call #{stale.hdr.seq} without taking it")
        e = MismatchError(f"rank {self.rank} {mine} but rank {peer} "
                          f"called {describe_call(&stale.hdr)}")
        fail(self, e, c)
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
        c.watch = False
        c.itemsize = DTYPE_SIZES[dtype] if 0 <= dtype < DT_LAST else 1
        return 0

    cdef int begin_p2p(self, Coll *c, object timeout) except -1:
        """Like begin() for point-to-point: no collective sequence number."""
        cdef uint64_t seq = self.seq
        self.begin(c, KIND_P2P, OP_NONE, DT_BYTES, -1, 0, timeout)
        self.seq = seq
        c.proto.seq = 0
        return 0

    cdef int _check_root(self, int root) except -1:
        if not 0 <= root < self.size:
            raise ArgumentError(f"root: {root} is not a rank of this "
                                f"communicator (size {self.size})", ERR_ROOT)
        return 0

    cdef int _check_peer(self, int rank, str name, bint any_ok) except -1:
        if not (0 <= rank < self.size or (any_ok and rank == -1)):
            raise ArgumentError(f"{name}: {rank} is not a rank of this "
                                f"communicator (size {self.size})", ERR_RANK)
        return 0

    # -- entry points ---------------------------------------------------------
    # Thin: each is the body of call_<name> in its family's file, which
    # checks its arguments before anything is sent, stamps the call, and
    # runs the algorithm without the GIL. Anything raised after the stamp
    # poisons the context (see fail()).

    cpdef barrier(self, timeout=None, algorithm=None):
        """Block until every rank has entered the barrier. `algorithm`: a
        name in BARRIER_ALGORITHMS (None: automatic)."""
        return call_barrier(self, timeout, algorithm)

    cpdef bcast(self, buf, int root, timeout=None, algorithm=None):
        """Copy root's `buf` into every other rank's `buf` (same byte size).
        `algorithm`: a name in BCAST_ALGORITHMS (None: automatic)."""
        return call_bcast(self, buf, root, timeout, algorithm)

    cpdef allreduce(self, sendbuf, recvbuf, int op, timeout=None,
                  algorithm=None):
        """recvbuf = op over every rank's sendbuf (recvbuf's own contents
        when sendbuf is None: in place)."""
        return call_allreduce(self, sendbuf, recvbuf, op, timeout, algorithm)

    cpdef allgatherv(self, sendbuf, recvbuf, counts, displs=None, timeout=None, algorithm=None):
        """Every rank's sendbuf lands in every recvbuf: rank i's block is
        counts[i] bytes at byte displs[i] (default: end to end). sendbuf
        None: our block is already in place in recvbuf. `algorithm`: a name
        in ALLGATHER_ALGORITHMS (None: automatic; recursive doubling falls
        back to the ring unless the size is a power of two and the blocks
        lie end to end)."""
        return call_allgatherv(self, sendbuf, recvbuf, counts, displs, timeout,
                               algorithm)

    cpdef reduce(self, sendbuf, recvbuf, int op, int root, timeout=None,
               algorithm=None):
        """recvbuf at root = op over every rank's sendbuf. Non-roots may pass
        recvbuf None; the root may pass sendbuf None (in place)."""
        return call_reduce(self, sendbuf, recvbuf, op, root, timeout, algorithm)

    cpdef reduce_scatter(self, sendbuf, recvbuf, counts, int op, timeout=None, algorithm=None):
        """Reduce every rank's sendbuf (sum(counts) elements) and leave block
        i (counts[i] elements) on rank i, in recvbuf. sendbuf None: recvbuf
        holds the whole input (in place). `algorithm`: a name in
        REDUCE_SCATTER_ALGORITHMS (None: automatic)."""
        return call_reduce_scatter(self, sendbuf, recvbuf, counts, op, timeout,
                                   algorithm)

    cpdef scan(self, sendbuf, recvbuf, int op, bint exclusive=False,
             timeout=None, algorithm=None):
        """recvbuf on rank r = op over ranks 0..r (exclusive: 0..r-1; rank
        0's recvbuf is left as it is). sendbuf None: in place."""
        return call_scan(self, sendbuf, recvbuf, op, exclusive, timeout, algorithm)

    cpdef gatherv(self, sendbuf, recvbuf, counts, displs, int root,
                  timeout=None, algorithm=None, bint uniform=False):
        """Rank i's sendbuf lands in root's recvbuf at byte displs[i]
        (counts[i] bytes). The root may pass sendbuf None (its block is in
        place); non-roots may pass recvbuf None."""
        return call_gatherv(self, sendbuf, recvbuf, counts, displs, root,
                            timeout, algorithm, uniform)

    cpdef scatterv(self, sendbuf, recvbuf, counts, displs, int root,
                   timeout=None, algorithm=None, bint uniform=False):
        """Root's sendbuf block i (counts[i] bytes at displs[i]) lands in
        rank i's recvbuf. The root may pass recvbuf None (it keeps its
        block); non-roots may pass sendbuf None."""
        return call_scatterv(self, sendbuf, recvbuf, counts, displs, root,
                             timeout, algorithm, uniform)

    cpdef alltoallv(self, sendbuf, sendcounts, senddispls, recvbuf,
                    recvcounts, recvdispls, timeout=None, algorithm=None,
                    bint uniform=False):
        """Block i of sendbuf (bytes) goes to rank i; rank i's block for us
        lands at recvdispls[i]. sendbuf None: recvbuf holds the blocks to
        send, laid out as recvcounts/recvdispls (in place)."""
        return call_alltoallv(self, sendbuf, sendcounts, senddispls, recvbuf,
                              recvcounts, recvdispls, timeout, algorithm,
                              uniform)

    # Nonblocking collectives (start_* in _schedule.pxi): the same
    # arguments as the blocking ones (no timeout: the request's Wait has
    # it); each returns an NbcHandle.

    cpdef ibarrier(self):
        return start_barrier(self)

    cpdef ibcast(self, buf, int root):
        return start_bcast(self, buf, root)

    cpdef iallreduce(self, sendbuf, recvbuf, int op):
        return start_allreduce(self, sendbuf, recvbuf, op)

    cpdef ireduce(self, sendbuf, recvbuf, int op, int root):
        return start_reduce(self, sendbuf, recvbuf, op, root)

    cpdef iallgatherv(self, sendbuf, recvbuf, counts, displs=None):
        return start_allgatherv(self, sendbuf, recvbuf, counts, displs)

    cpdef igatherv(self, sendbuf, recvbuf, counts, displs, int root):
        return start_gatherv(self, sendbuf, recvbuf, counts, displs, root)

    cpdef iscatterv(self, sendbuf, recvbuf, counts, displs, int root):
        return start_scatterv(self, sendbuf, recvbuf, counts, displs, root)

    cpdef ialltoallv(self, sendbuf, sendcounts, senddispls, recvbuf,
                     recvcounts, recvdispls):
        return start_alltoallv(self, sendbuf, sendcounts, senddispls,
                               recvbuf, recvcounts, recvdispls)

    cpdef ireduce_scatter(self, sendbuf, recvbuf, counts, int op):
        return start_reduce_scatter(self, sendbuf, recvbuf, counts, op)

    cpdef iscan(self, sendbuf, recvbuf, int op, bint exclusive=False):
        return start_scan(self, sendbuf, recvbuf, op, exclusive)

    cpdef send(self, buf, int dest, int tag=0, timeout=None, bint sync=False):
        """Send buf's bytes to rank `dest` with `tag` (>= 0); `sync`: return
        only once the receiver has matched it (Ssend)."""
        return call_send(self, buf, dest, tag, timeout, sync)

    cpdef recv(self, buf, int source=-1, int tag=-1, timeout=None):
        """Receive into buf from `source` (-1: any rank) with `tag` (-1: any
        tag). Returns (source, tag, nbytes received)."""
        return call_recv(self, buf, source, tag, timeout)

    cpdef isend(self, buf, int dest, int tag=0, bint sync=False):
        """Start sending buf to `dest`; returns a P2PHandle to wait on. buf
        must not change until then. `sync`: done only once the receiver has
        matched it (Issend)."""
        return call_isend(self, buf, dest, tag, sync)

    cpdef irecv(self, buf, int source=-1, int tag=-1):
        """Start receiving into buf from `source` (-1: any) with `tag` (-1:
        any); returns a P2PHandle to wait on."""
        return call_irecv(self, buf, source, tag)

    cpdef probe(self, int source=-1, int tag=-1, bint block=True,
              timeout=None):
        """(source, tag, nbytes) of the next message a recv(source, tag)
        would get, without receiving it; None if `block` is False and
        there is none yet."""
        return call_probe(self, source, tag, block, timeout)


# -- lazy connections (see LazyPair, _links.pxi) ------------------------------

cdef int install_pair(Links links, int peer, Pair pair) except -1:
    cdef Context ctx
    cdef int i
    links.pairs[peer] = pair
    pair.wild_head = &links.wild_head
    pair.wild_tail = &links.wild_tail
    alive = []
    for view in links.views:
        ctx = view()
        if ctx is None:
            continue
        alive.append(view)
        i = ctx._local[peer]
        if i >= 0:
            _install_in(ctx, i, pair)
    links.views = alive
    return 0


cdef int _install_in(Context ctx, int i, Pair pair) except -1:
    """Our rank i's pair is `pair` now: a connected one more, or (never
    twice in _conn, which holds size - 1 at most) the one it replaces."""
    cdef int k
    cdef void *old = ctx._pair_ptrs[i]
    ctx._pairs[i] = pair
    ctx._pair_ptrs[i] = <void *>pair
    if old != unconnected:
        for k in range(ctx._nconn):
            if ctx._conn[k] == old:
                ctx._conn[k] = <void *>pair
                return 0
    if ctx._nconn >= ctx.size - 1:
        raise RuntimeError(f"rank {ctx.rank}: more connected pairs than peers")
    ctx._conn[ctx._nconn] = <void *>pair
    ctx._nconn += 1
    return 0


cdef void *pair_of(Context ctx, int i) except NULL nogil:
    if ctx._pair_ptrs[i] != unconnected:
        return ctx._pair_ptrs[i]
    return connect_slot(ctx, i)


cdef void *connect_slot(Context ctx, int i) except NULL with gil:
    cdef Links links = ctx.links
    cdef int peer = ctx._world[i]
    if links.connector is None:
        raise ContextPoisoned(f"rank {links.rank}: no connection to rank {peer} "
                              "(the communicator is closed)")
    if links.arrivals:
        install_arrivals(links)
        if ctx._pair_ptrs[i] != unconnected:
            return ctx._pair_ptrs[i]
    install_pair(links, peer, links.connector.pair(peer))
    return ctx._pair_ptrs[i]


cdef int _check_given_pairs(list pairs, int rank) except -1:
    """Context's `pairs`: a Pair to rank i at i (or UNCONNECTED), None at
    `rank` (a C loop: thousands of ranks cost microseconds)."""
    cdef Py_ssize_t i
    for i in range(len(pairs)):
        if <void *>PyList_GET_ITEM(pairs, i) == unconnected and i != rank:
            continue                    # (no reference counted: the common slot)
        p = pairs[i]
        if i == rank:
            if p is not None:
                raise ValueError("pairs[rank] must be None")
        elif p is not unconnected_pair and (
                not isinstance(p, Pair) or (<Pair>p).peer != i):
            raise ValueError(f"pairs[{i}] is not a Pair to rank {i}")
    return 0


cdef int install_arrivals(Links links) except -1 with gil:
    links.arrivals = 0
    if links.connector is None:
        return 0
    got = links.connector.arrived()
    for peer, pair in got:
        install_pair(links, peer, pair)
    return 1 if got else 0


cdef int lazy_peer_gone(Context ctx, int i, int pid) except -1 with gil:
    connector = ctx.links.connector
    try:
        return connector is not None and connector.process_gone(ctx._world[i], pid)
    except Exception:
        return 0                        # not known: the deadline tells
    # (a KeyboardInterrupt raised meanwhile goes on: the caller's call stops)


# A rank that stops connects to the members it never spoke to, to tell them
# why (connect_members), up to this many: past it, where every rank stops at
# once (a peer lost to all), that would be a connection per pair of them,
# all at once. There, the others learn from the slices of their waits (a
# member that left) or from their deadlines.
TELL_ALL_MAX = 64


cdef int connect_members(Context ctx) except -1:
    cdef int i, w
    connector = ctx.links.connector
    if connector is None or ctx.size > TELL_ALL_MAX:
        return 0
    from gloocy.rendezvous.store import capped
    # Within the failure path's store budget: the store that tells where
    # they listen may have ended with the rank that failed (rank 0 served it).
    until = connector.failing()
    with capped(until):
        for i in range(ctx.size):
            w = ctx._world[i]
            left = until - time.monotonic()
            if left <= 0:
                break
            if i != ctx.rank and ctx.links.pairs[w] is unconnected_pair:
                try:
                    install_pair(ctx.links, w, connector.pair(w, timeout=left))
                except Exception:
                    pass                # gone, or slow: it learns otherwise
    return 0
