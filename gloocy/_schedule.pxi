# Schedules: nonblocking collectives in the core, without a thread.
#
# I<collective> checks its arguments, writes its algorithm down as a list
# of steps -- post a send, post a receive, wait (for one transfer, or for
# every one before), reduce or copy locally -- then takes the call's
# sequence number (its frames are matched by communicator, sequence number
# and step tag, as the blocking calls' are) and runs the steps up to the
# first wait that cannot pass yet. Whatever drives the pairs afterwards
# (progress_all: a Test or Wait of any request, a blocking call on any
# communicator over the same links) runs each unfinished schedule on from
# where it stopped: weak progress, as in MPI. Several may be outstanding
# at once, interleaved with blocking collectives, since each call has its
# own sequence number. (MPICH's "sched" and libNBC work the same way.)
#
# This file holds the running of schedules (the Links' list, NbcHandle);
# the algorithms, as steps, are in _schedule_algorithms.pxi. A reduction
# step runs under its schedule's own user op (_user_ops.pxi).


cdef inline void _sched_unlinked(Sched *s) noexcept nogil:
    global schedules_running
    s.link = NULL
    schedules_running -= 1


cdef int _run(Sched *s) except -1 nogil:
    """Run s's steps until one must wait; 1 if any ran."""
    cdef Step *st
    cdef int64_t i
    cdef int ran = 0
    cdef bint user
    while s.next < s.nsteps:
        st = &s.steps[s.next]
        if st.kind == STEP_SEND:
            prepare_xfer(&s.c, &st.x, st.tag, st.src, st.nbytes)
            (<Pair>pair_of(<Context>s.ctx, st.peer)).post_send(&st.x)
        elif st.kind == STEP_RECV:
            prepare_xfer(&s.c, &st.x, st.tag, st.dst, st.nbytes)
            (<Pair>pair_of(<Context>s.ctx, st.peer)).post_recv(&st.x)
        elif st.kind == STEP_FENCE:
            for i in range(s.fence_from, s.next):
                if _pending(&s.steps[i]):
                    return ran
            s.fence_from = s.next + 1
        elif st.kind == STEP_WAIT:
            if _pending(&s.steps[st.nbytes]):
                return ran
        elif st.kind == STEP_REDUCE:
            user = s.user is not NULL
            if user:                # under this schedule's user op
                user_swap(&s.user, &s.error)
            if st.tag:              # src <op> dst: src came from lower ranks
                s.c.fn(st.src, st.dst, st.nbytes)
                memcpy(st.dst, st.src, st.nbytes * s.c.itemsize)
            else:
                s.c.fn(st.dst, st.src, st.nbytes)
            if user:                # (the thread's own back)
                user_swap(&s.user, &s.error)
        elif st.kind == STEP_COPY:
            memmove(st.dst, st.src, st.nbytes)
        s.next += 1
        ran = 1
    for i in range(s.fence_from, s.nsteps):
        if _pending(&s.steps[i]):
            return ran
    s.fence_from = s.nsteps
    s.state = SCHED_DONE
    return 1


cdef inline bint _pending(Step *st) noexcept nogil:
    return ((st.kind == STEP_SEND or st.kind == STEP_RECV)
            and st.x.state != XFER_DONE)


cdef int advance_schedules(Links links) except -1 nogil:
    cdef Sched **at = <Sched **>&links.scheds
    cdef Sched *s
    cdef int moved = 0
    while at[0] is not NULL:
        s = at[0]
        moved |= _run(s)
        if s.state == SCHED_DONE:
            at[0] = s.link
            _sched_unlinked(s)
        else:
            at = &s.link
    return moved


cdef void drop_schedules(Links links) noexcept nogil:
    cdef Sched *s = <Sched *>links.scheds
    cdef Sched *after
    links.scheds = NULL
    while s is not NULL:
        after = s.link
        s.state = SCHED_FAILED
        _sched_unlinked(s)
        s = after


cdef uint64_t schedules_low_seq(Context ctx) noexcept nogil:
    cdef Sched *s = <Sched *>ctx.links.scheds
    cdef uint64_t low = <uint64_t>-1
    while s is not NULL:
        if s.ctx == <void *>ctx and s.c.proto.seq < low:
            low = s.c.proto.seq
        s = s.link
    return low


cdef int _wait_schedule(Context ctx, Sched *s) except -1 nogil:
    """Drive every pair (and so every schedule) until s is done, spinning
    then sleeping as wait_xfer does."""
    cdef int64_t since = 0, budget = look_budget(ctx)
    while s.state == SCHED_RUNNING:
        if progress_all(ctx):
            since = 0
            continue
        if s.state != SCHED_RUNNING:
            break
        if since == 0:
            since = now_ns()
        if keep_looking(ctx, since, budget):
            continue
        block_poll(ctx, &s.c)
    return 0


@cython.no_gc_clear
cdef class NbcHandle:
    """A nonblocking collective in flight: its schedule, and the buffers
    its steps point into. While it runs, its Context keeps it (and so the
    buffers) alive; any progress on the links moves it."""

    def __cinit__(self):
        self.s = <Sched *>calloc(1, sizeof(Sched))
        if self.s is NULL:
            raise MemoryError()

    def __dealloc__(self):
        cdef int i
        if self.s is NULL:
            return
        if self.s.state == SCHED_RUNNING:
            # Its transfers sit in the pairs' queues: the memory must stay
            # (only a Context dropped with collectives unfinished gets here).
            Py_INCREF(self.keep)
            return
        self._free_steps()
        if self.s.error is not NULL:
            Py_DECREF(<object>self.s.error)
        free(self.s)

    cdef void _free_steps(self) noexcept:
        cdef int i
        for i in range(self.s.nmem):
            free(self.s.mem[i])
        free(self.s.mem)
        free(self.s.steps)
        self.s.mem = NULL
        self.s.nmem = 0
        self.s.steps = NULL
        self.s.nsteps = self.s.cap = 0

    @property
    def done(self):
        return self.finished

    def wait(self, timeout=None):
        while not self._step(True, timeout):
            pass

    def test(self):
        return self._step(False, None) == 1

    # -- building ----------------------------------------------------------------

    cdef Step *_add(self, int kind) except NULL:
        cdef Sched *s = self.s
        cdef Step *more
        cdef int64_t cap
        if s.nsteps == s.cap:
            cap = max(16, 2 * s.cap)
            more = <Step *>realloc(s.steps, cap * sizeof(Step))
            if more is NULL:
                raise MemoryError()
            s.steps, s.cap = more, cap
        cdef Step *st = &s.steps[s.nsteps]
        memset(st, 0, sizeof(Step))
        st.kind = kind
        s.nsteps += 1
        return st

    cdef int send(self, int peer, uint64_t tag, const char *src, int64_t n) except -1:
        cdef Step *st = self._add(STEP_SEND)
        st.peer, st.tag, st.src, st.nbytes = peer, tag, <char *>src, n
        return 0

    cdef int recv(self, int peer, uint64_t tag, char *dst, int64_t n) except -1:
        cdef Step *st = self._add(STEP_RECV)
        st.peer, st.tag, st.dst, st.nbytes = peer, tag, dst, n
        return 0

    cdef int fence(self) except -1:
        self._add(STEP_FENCE)
        return 0

    cdef int64_t wait_for(self, int64_t step) except -1:
        """Wait for the transfer of step number `step`."""
        self._add(STEP_WAIT).nbytes = step
        return 0

    cdef int reduce(self, char *dst, const char *src, int64_t count,
                    bint src_first) except -1:
        cdef Step *st = self._add(STEP_REDUCE)
        st.dst, st.src, st.nbytes, st.tag = dst, <char *>src, count, src_first
        return 0

    cdef int copy(self, char *dst, const char *src, int64_t n) except -1:
        cdef Step *st
        if dst != src and n > 0:
            st = self._add(STEP_COPY)
            st.dst, st.src, st.nbytes = dst, <char *>src, n
        return 0

    cdef char *alloc(self, int64_t nbytes) except NULL:
        cdef Sched *s = self.s
        cdef void **more = <void **>realloc(s.mem, (s.nmem + 1) * sizeof(void *))
        if more is NULL:
            raise MemoryError()
        s.mem = more
        cdef char *p = <char *>_alloc(nbytes)
        s.mem[s.nmem] = p
        s.nmem += 1
        return p

    # -- running ------------------------------------------------------------------

    cdef int launch(self, int kind, int op, int dtype, int root,
                    uint64_t count, reduce_fn fn) except -1:
        """Take the call's sequence number and run what can run now."""
        cdef Context ctx = self.ctx
        cdef Sched *s = self.s
        if op == OP_USER:           # the current one (set_user_op), kept
            if gloocy_user_op is NULL:
                raise OpError("op: a user op's schedule with no user op set")
            s.user = gloocy_user_op
            self.keep = (self.keep or []) + [<object>s.user]
        ctx.begin(&s.c, kind, op, dtype, root, count, None)
        try:
            s.c.fn = fn
            self.start()
        except BaseException as e:
            fail(ctx, e, &s.c)
            raise
        finally:
            ctx.end()
        return 0

    cdef int start(self) except -1:
        global schedules_running
        cdef Sched *s = self.s
        cdef Links links = self.ctx.links
        cdef Sched **at
        s.state = SCHED_RUNNING
        with nogil:
            _run(s)
        if s.state == SCHED_DONE:
            self._finished()        # (_step raises a user op's error)
            return 0
        at = <Sched **>&links.scheds         # last: runs in the order started
        while at[0] is not NULL:
            at = &at[0].link
        at[0] = s
        schedules_running += 1
        self.ctx._requests.add(self)
        return 0

    cdef void _finished(self) noexcept:
        self.finished = True
        self._free_steps()
        self.keep = None

    cdef int _raise_user_error(self) except -1:
        """What the schedule's user op raised, if it did."""
        cdef void *e = self.s.error
        if e is not NULL:
            self.s.error = NULL
            error = <object>e
            Py_DECREF(error)
            raise error
        return 0

    cdef int _step(self, bint block, object timeout) except -1:
        cdef Context ctx = self.ctx
        cdef Sched *s = self.s
        if self.finished:
            self._raise_user_error()
            return 1
        if s.state == SCHED_DONE:
            ctx._requests.discard(self)
            self._finished()
            self._raise_user_error()
            return 1
        ctx.check_usable()
        if s.state != SCHED_RUNNING:
            raise ContextPoisoned(f"rank {ctx.rank}: {describe_call(&s.c.proto)} "
                                  "was abandoned after an error")
        cdef double t = ctx.timeout if timeout is None else timeout
        s.c.deadline = now_ns() + <int64_t>min(t * 1e9, 4e18)
        if not ctx.links.try_enter():
            with nogil:
                ctx.links.enter()
        try:
            with nogil:
                if block:
                    _wait_schedule(ctx, s)
                else:
                    progress_all(ctx)
        except BaseException as e:
            fail(ctx, e, &s.c)
            raise
        finally:
            ctx.end()
        if s.state != SCHED_DONE:
            return 0
        ctx._requests.discard(self)
        self._finished()
        self._raise_user_error()
        return 1


cdef NbcHandle _handle(Context ctx, list keep):
    cdef NbcHandle h = NbcHandle.__new__(NbcHandle)
    ctx.check_usable()
    h.ctx = ctx
    h.keep = keep
    h.s.ctx = <void *>ctx
    return h


def finish_schedules(Context ctx):
    """Run every unfinished nonblocking collective over ctx's links to its
    end, each within the timeout (a process that leaves completes what it
    started, as MPI_Finalize does). A failure poisons the links, as in any
    call, and ends this quietly: the process is leaving."""
    cdef Sched *s
    cdef Context owner
    cdef Links links = ctx.links
    while links.scheds is not NULL and not links.failed and not links.closed:
        s = <Sched *>links.scheds
        owner = <Context>s.ctx
        s.c.deadline = now_ns() + <int64_t>min(owner.timeout * 1e9, 4e18)
        if not links.try_enter():
            with nogil:
                links.enter()
        try:
            with nogil:
                _wait_schedule(owner, s)
        except GloocyError as e:
            fail(owner, e, &s.c)
            return
        finally:
            links.leave()
