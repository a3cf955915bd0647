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
        POLLRDHUP

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef enum:
    POLL_SLICE_MS = 100       # longest uninterrupted block: Ctrl-C latency


cdef inline int64_t now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef int _raise_timeout(Context ctx, Coll *c) except -1 with gil:
    waiting = [(<Pair>p).peer for p in ctx._pairs
               if p is not None and (<Pair>p).busy()]
    raise CollectiveTimeout(
        f"rank {ctx.rank}: {describe_call(&c.proto)} timed out waiting for "
        f"rank(s) {', '.join(map(str, waiting)) or '?'}")


cdef int _raise_poll_error(int err) except -1 with gil:
    raise OSError(err, "poll failed")


cdef int _check_signals() except -1 with gil:
    return PyErr_CheckSignals()


cdef class Context:
    """This rank's view of a group: its pairs, counters and deadlines."""

    def __cinit__(self, int rank, int size, list pairs, *, uint32_t comm_id=0,
                  double timeout=300.0, int64_t segment=1 << 18,
                  int64_t spin_us=50, int64_t small_allreduce=1 << 16):
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"rank {rank} is not in a world of size {size}")
        if len(pairs) != size:
            raise ValueError(f"pairs: expected {size} entries, got {len(pairs)}")
        if segment < 1:
            raise ValueError("segment must be at least 1 byte")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        for i, p in enumerate(pairs):
            if i == rank:
                if p is not None:
                    raise ValueError("pairs[rank] must be None")
            elif not isinstance(p, Pair) or (<Pair>p).peer != i:
                raise ValueError(f"pairs[{i}] is not a Pair to rank {i}")
        self.rank = rank
        self.size = size
        self.comm_id = comm_id
        self.timeout = timeout
        self.segment = segment
        self.spin_ns = spin_us * 1000
        self.small_allreduce = small_allreduce
        self._pairs = list(pairs)
        self._pair_ptrs = <void **>malloc(size * sizeof(void *))
        if self._pair_ptrs is NULL:
            raise MemoryError()
        for i, p in enumerate(self._pairs):
            self._pair_ptrs[i] = <void *>p

    def __dealloc__(self):
        free(self._pair_ptrs)
        free(self._scratch)

    cdef char *scratch(self, int64_t nbytes) except NULL nogil:
        """Temporary space for one call. Kept between calls: fresh pages of
        a large malloc cost a page fault each, every time."""
        if nbytes > self._scratch_size or self._scratch is NULL:
            free(self._scratch)
            self._scratch_size = 0
            self._scratch = <char *>_alloc(max(nbytes, 4096))
            self._scratch_size = max(nbytes, 4096)
        return self._scratch

    @property
    def closed(self):
        return all(p is None or (<Pair>p).closed for p in self._pairs)

    def close(self, *, double linger=1.0):
        """Close every pair; peers are told goodbye unless we are poisoned.

        After losing a peer, wait up to `linger` seconds for the others to
        hang up first: they are then sure to notice the lost peer itself
        rather than our leaving, and name the right rank."""
        if isinstance(self.error, PeerLostError) and linger > 0:
            with nogil:
                self._linger(now_ns() + <int64_t>(linger * 1e9))
        for p in self._pairs:
            if p is not None:
                (<Pair>p).shutdown(self.error is None)

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
        if self.error is not None:
            raise ContextPoisoned(
                f"rank {self.rank}: communicator unusable after an earlier "
                f"error: {self.error}")
        if any(p is not None and (<Pair>p).closed for p in self._pairs):
            raise ContextPoisoned(f"rank {self.rank}: communicator is closed")
        cdef double t = self.timeout if timeout is None else timeout
        if not t > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        init_header(&c.proto)
        c.proto.kind = kind
        c.proto.op = op
        c.proto.dtype = dtype
        c.proto.root = root
        c.proto.count = count
        c.proto.comm_id = self.comm_id
        c.proto.seq = self.seq
        self.seq += 1
        # Clamp: converting a double beyond int64 (inf) to int64 is undefined.
        c.deadline = now_ns() + <int64_t>min(t * 1e9, 4e18)
        c.fn = NULL
        c.itemsize = DTYPE_SIZES[dtype] if 0 <= dtype < DT_LAST else 1
        return 0

    cdef int fail(self, BaseException exc, Coll *c) except -1:
        """Something raised mid-call: the streams are in an unknown state, so
        the context is poisoned and the pairs forget the call's transfers."""
        if self.error is None:
            self.error = exc
        for p in self._pairs:
            if p is not None:
                (<Pair>p).abandon()
        return 0

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
        x.state = XFER_POSTED
        return (<Pair>self._pair_ptrs[peer]).post_recv(x)

    cdef int progress_all(self) except -1 nogil:
        cdef int i, moved = 0
        for i in range(self.size):
            if i != self.rank and (<Pair>self._pair_ptrs[i]).busy():
                moved |= (<Pair>self._pair_ptrs[i]).progress()
        return moved

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
                continue
            self.block(c)
            spin_until = 0
        return 0

    cdef int waitall(self, Coll *c, Xfer *xs, int64_t n) except -1 nogil:
        cdef int64_t i
        for i in range(n):
            self.wait(c, &xs[i])
        return 0

    cdef int block(self, Coll *c) except -1 nogil:
        """Sleep in poll(2) until some pair can move, a slice passes or the
        deadline comes; then give pending signals (Ctrl-C) a chance."""
        cdef pollfd fds[64]
        cdef pollfd *pfds = fds
        cdef int i, n = 0, r, err
        cdef short events
        cdef int64_t left = c.deadline - now_ns()
        if left <= 0:
            return _raise_timeout(self, c)
        if self.size > 64:
            pfds = <pollfd *>malloc(self.size * sizeof(pollfd))
            if pfds is NULL:
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
                    n += 1
            r = poll(pfds, n, <int>min(POLL_SLICE_MS, left // 1000000 + 1))
            err = errno
            if r < 0 and err != EINTR:
                return _raise_poll_error(err)
            if r <= 0:
                _check_signals()
            elif n:
                # Pairs with nothing posted are polled only to notice a peer
                # that hangs up; let them read what woke them.
                n = 0
                for i in range(self.size):
                    if i == self.rank:
                        continue
                    if (<Pair>self._pair_ptrs[i]).wait_events():
                        if (pfds[n].revents
                                and not (<Pair>self._pair_ptrs[i]).busy()):
                            (<Pair>self._pair_ptrs[i]).progress()
                        n += 1
        finally:
            if pfds is not fds:
                free(pfds)
        return 0

    # -- collectives (Python entry points) ------------------------------------
    # Each checks its arguments before anything is sent, stamps the call, and
    # runs the algorithm without the GIL. Anything raised after the stamp
    # poisons the context (see fail()).

    cdef int _check_root(self, int root) except -1:
        if not 0 <= root < self.size:
            raise ValueError(f"root: {root} is not a rank of this "
                             f"communicator (size {self.size})")
        return 0

    def barrier(self, *, timeout=None):
        """Block until every rank has entered the barrier."""
        cdef Coll c
        self.begin(&c, KIND_BARRIER, OP_NONE, DT_BYTES, -1, 0, timeout)
        try:
            with nogil:
                run_barrier(self, &c)
        except BaseException as e:
            self.fail(e, &c)
            raise

    def bcast(self, buf, int root, *, timeout=None):
        """Copy root's `buf` into every other rank's `buf` (same byte size)."""
        cdef Coll c
        self._check_root(root)
        cdef Buf b = get_buffer(buf, "buf", self.rank != root)
        self.begin(&c, KIND_BCAST, OP_NONE, DT_BYTES, root, b.nbytes, timeout)
        try:
            with nogil:
                run_bcast(self, &c, b.ptr, b.nbytes)
        except BaseException as e:
            self.fail(e, &c)
            raise

    def allreduce(self, sendbuf, recvbuf, int op, *, timeout=None,
                  algorithm=None):
        """recvbuf = op over every rank's sendbuf (recvbuf's own contents
        when sendbuf is None: in place)."""
        cdef Coll c
        cdef Buf sb = None
        cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
        rb.require_dtype()
        cdef reduce_fn fn = kernel_for(op, rb.dtype)
        cdef int algo = _allreduce_algorithm(algorithm)
        if sendbuf is not None:
            sb = get_buffer(sendbuf, "sendbuf", False)
            if sb.nbytes != rb.nbytes:
                raise ValueError(f"sendbuf has {sb.nbytes} bytes but recvbuf "
                                 f"has {rb.nbytes}")
            if sb.dtype != rb.dtype:
                raise TypeError(f"sendbuf is {sb.format!r} but recvbuf is "
                                f"{rb.format!r}")
        self.begin(&c, KIND_ALLREDUCE, op, rb.dtype, -1, rb.count, timeout)
        c.fn = fn
        try:
            with nogil:
                if sb is not None and sb.ptr != rb.ptr:
                    memmove(rb.ptr, sb.ptr, rb.nbytes)
                run_allreduce(self, &c, rb.ptr, rb.count, algo)
        except BaseException as e:
            self.fail(e, &c)
            raise

    def allgatherv(self, sendbuf, recvbuf, counts, *, timeout=None):
        """Concatenate every rank's sendbuf, in rank order, into recvbuf.
        `counts[i]` is rank i's contribution in bytes (sendbuf None: our
        block is already in place in recvbuf)."""
        cdef Coll c
        cdef Buf sb = None
        cdef Buf rb = get_buffer(recvbuf, "recvbuf", True)
        if len(counts) != self.size:
            raise ValueError(f"counts: expected {self.size} entries, got "
                             f"{len(counts)}")
        sizes = [int(n) for n in counts]
        if any(n < 0 for n in sizes):
            raise ValueError("counts: sizes must not be negative")
        if sum(sizes) != rb.nbytes:
            raise ValueError(f"recvbuf has {rb.nbytes} bytes but counts add "
                             f"up to {sum(sizes)}")
        if sendbuf is not None:
            sb = get_buffer(sendbuf, "sendbuf", False)
            if sb.nbytes != sizes[self.rank]:
                raise ValueError(f"sendbuf has {sb.nbytes} bytes but "
                                 f"counts[{self.rank}] is {sizes[self.rank]}")
        cdef int64_t *offs = <int64_t *>malloc(2 * self.size * sizeof(int64_t))
        if offs is NULL:
            raise MemoryError()
        cdef int64_t total = 0
        for i, n in enumerate(sizes):
            offs[i] = total
            offs[self.size + i] = n
            total += n
        try:
            self.begin(&c, KIND_ALLGATHERV, OP_NONE, DT_BYTES, -1, total,
                       timeout)
            try:
                with nogil:
                    if sb is not None:
                        memmove(rb.ptr + offs[self.rank], sb.ptr, sb.nbytes)
                    run_allgatherv(self, &c, rb.ptr, offs, offs + self.size)
            except BaseException as e:
                self.fail(e, &c)
                raise
        finally:
            free(offs)


ALGORITHMS = {"auto": 0, "ring": 1, "recursive_doubling": 2}

cdef int _allreduce_algorithm(object name) except -1:
    if name is None:
        return 0
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"algorithm: {name!r} is not one of "
                         f"{', '.join(ALGORITHMS)}") from None
