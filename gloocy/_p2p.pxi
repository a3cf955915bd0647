# Point-to-point: Context.send, recv, isend, irecv and probe (call_*), and
# P2PHandle, an Isend or Irecv in flight.
#
# Frames of kind P2P carry the user's tag and match by (communicator,
# source, tag) in arrival order; they are stashed when they come before
# their receive, so sends complete without waiting for it.


cdef object call_send(Context ctx, object buf, int dest, int tag,
                      object timeout):
    cdef Coll c
    cdef Xfer x
    ctx._check_peer(dest, "dest", False)
    if tag < 0:
        raise ArgumentError(f"tag: must be >= 0, got {tag}", ERR_TAG)
    if dest == ctx.rank and type(buf) is bytes:    # a pickle, to ourselves
        _send_to_self(ctx, tag, <bytes>buf)
        return
    cdef Buf b = get_buffer(buf, "buf", False)
    if dest == ctx.rank:
        _send_to_self(ctx, tag, b.ptr[:b.nbytes])
        return
    ctx.begin_p2p(&c, timeout)
    try:
        with nogil:
            post_send(ctx, &c, &x, dest, <uint64_t>tag, b.ptr, b.nbytes)
            wait_xfer(ctx, &c, &x)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()


cdef object call_recv(Context ctx, object buf, int source, int tag,
                      object timeout):
    cdef Coll c
    cdef Xfer x
    ctx._check_peer(source, "source", True)
    if tag < -1:
        raise ArgumentError(f"tag: must be >= 0 or -1 (any), got {tag}", ERR_TAG)
    cdef Buf b = get_buffer(buf, "buf", True)
    if source in (-1, ctx.rank):
        got = take_from_self(ctx, b.ptr, b.nbytes, tag)
        if got is not None:
            return got
        if source == ctx.rank or ctx.size == 1:
            raise ContextPoisoned(f"rank {ctx.rank}: recv from itself "
                                  "with no message sent to itself: it "
                                  "would wait forever")
    ctx.begin_p2p(&c, timeout)
    try:
        _p2p_want(&x, &c, b.ptr, b.nbytes, tag)
        with nogil:
            post_p2p_recv(ctx, &x, source)
            wait_xfer(ctx, &c, &x)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()
    return ctx._local[x.peer], <int64_t>x.hdr.tag, x.nbytes


cdef object call_isend(Context ctx, object buf, int dest, int tag):
    ctx._check_peer(dest, "dest", False)
    if tag < 0:
        raise ArgumentError(f"tag: must be >= 0, got {tag}", ERR_TAG)
    cdef P2PHandle h = P2PHandle.__new__(P2PHandle)
    h.ctx, h.peer, h.tag, h.is_send = ctx, dest, tag, True
    if dest == ctx.rank and type(buf) is bytes:     # a pickle, to ourselves
        _send_to_self(ctx, tag, <bytes>buf)
        h._finish(dest, tag, len(<bytes>buf))
        return h
    cdef Buf b = get_buffer(buf, "buf", False)
    h.buf = b
    if dest == ctx.rank:
        _send_to_self(ctx, tag, b.ptr[:b.nbytes])
        h._finish(dest, tag, b.nbytes)
        return h
    ctx.begin_p2p(&h.c, None)
    try:
        with nogil:
            post_send(ctx, &h.c, &h.x, dest, <uint64_t>tag, b.ptr, b.nbytes)
    except BaseException as e:
        fail(ctx, e, &h.c)
        raise
    finally:
        ctx.end()
    h.posted = True
    ctx._requests.add(h)
    return h


cdef object call_irecv(Context ctx, object buf, int source, int tag):
    ctx._check_peer(source, "source", True)
    if tag < -1:
        raise ArgumentError(f"tag: must be >= 0 or -1 (any), got {tag}", ERR_TAG)
    cdef Buf b = get_buffer(buf, "buf", True)
    cdef P2PHandle h = P2PHandle.__new__(P2PHandle)
    h.ctx, h.buf, h.peer, h.tag = ctx, b, source, tag
    if source == ctx.rank:            # from ourselves: matched at wait time
        ctx.check_usable()
        return h
    ctx.begin_p2p(&h.c, None)
    try:
        _p2p_want(&h.x, &h.c, b.ptr, b.nbytes, tag)
        if source == -1 and h._take_from_self():
            return h                  # one we sent ourselves, already here
        with nogil:
            post_p2p_recv(ctx, &h.x, source)
    except BaseException as e:
        fail(ctx, e, &h.c)
        raise
    finally:
        ctx.end()
    h.posted = True
    ctx._requests.add(h)
    return h


cdef object call_probe(Context ctx, int source, int tag, bint block,
                       object timeout):
    cdef Coll c
    cdef Xfer x
    cdef int found
    ctx._check_peer(source, "source", True)
    if source in (-1, ctx.rank):
        for t, data in ctx._to_self:
            if tag == -1 or t == tag:
                return ctx.rank, t, len(data)
        if source == ctx.rank or ctx.size == 1:
            if not block:
                return None
            raise ContextPoisoned(f"rank {ctx.rank}: probe of itself "
                                  "with no message sent to itself")
    ctx.begin_p2p(&c, timeout)
    try:
        _p2p_want(&x, &c, NULL, 0, tag)
        with nogil:
            found = probe_stashed(ctx, &c, &x, source, block)
    except BaseException as e:
        fail(ctx, e, &c)
        raise
    finally:
        ctx.end()
    if not found:
        return None
    return ctx._local[x.peer], <int64_t>x.hdr.tag, x.nbytes


cdef object call_recv_new(Context ctx, int source, int tag, bint block,
                          object timeout):
    """Receive the next message from `source` with `tag` into new memory
    (a pickle, whose size only its frame tells): (data, source, tag), or
    None when `block` is False and none is there."""
    cdef int i
    cdef bytes data
    if source == -1 or source == ctx.rank:
        for i in range(len(ctx._to_self)):
            t, data = ctx._to_self[i]
            if tag == -1 or t == tag:
                del ctx._to_self[i]
                return data, ctx.rank, t
    probed = call_probe(ctx, source, tag, block, timeout)
    if probed is None:
        return None
    src, t, n = probed
    out = bytearray(n)
    got = call_recv(ctx, out, src, t, timeout)
    return out, got[0], got[1]


cdef class P2PHandle:
    """An Isend or Irecv in flight. Its Xfer lives here, so the Context keeps
    the handle (and through it the buffer) alive until it is done or
    cancelled. Progress is made by any wait on the communicator."""
    @property
    def done(self):
        return self.finished or self._cancelled

    @property
    def result(self):
        """(source or dest, tag, nbytes) once done, else None."""
        if not self.finished:
            return None
        return self.got_source, self.got_tag, self.got_nbytes

    cdef void _finish(self, int source, int tag, int64_t nbytes) noexcept:
        self.finished = True
        self.got_source, self.got_tag, self.got_nbytes = source, tag, nbytes

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
        return self.withdraw() == 1

    cdef int withdraw(self) except -1:
        cdef bint withdrawn = True
        if self.finished or self._cancelled or self.is_send:
            return 0
        if self.posted:
            with nogil:
                self.ctx.links.enter()
                withdrawn = cancel_p2p_recv(self.ctx, &self.x, self.peer)
                self.ctx.links.leave()
        if not withdrawn:
            return 0
        self._cancelled = True
        self.ctx._requests.discard(self)
        return 1

    cdef bint _take_from_self(self) except -1:
        """A receive from ourselves (or anyone): messages we sent us."""
        got = take_from_self(self.ctx, self.buf.ptr, self.buf.nbytes, self.tag)
        if got is None:
            return False
        self._finish(got[0], got[1], got[2])
        return True

    cdef int _step(self, bint block, object timeout) except -1:
        """One attempt to finish; 1 when done."""
        cdef Context ctx = self.ctx
        cdef int found = 0
        if self.finished or self._cancelled:
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
            self._finish(ctx._local[self.x.peer], <int64_t>self.x.hdr.tag,
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
                    wait_xfer(ctx, &self.c, &self.x)
                elif self.x.state != XFER_DONE:
                    progress_all(ctx)
                found = self.x.state == XFER_DONE
        except BaseException as e:
            fail(ctx, e, &self.c)
            raise
        finally:
            ctx.end()
        if not found:
            return 0
        self._finish(self.peer if self.is_send else ctx._local[self.x.peer],
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


cdef int post_p2p_recv(Context ctx, Xfer *x, int source) except -1 nogil:
    cdef int peer
    cdef Xfer *u
    x.order = ctx.links.order
    ctx.links.order += 1
    if source >= 0:
        return (<Pair>ctx._pair_ptrs[source]).post_recv(x)
    u = find_stashed(ctx, x, -1, &peer)     # a frame that came first
    if u is not NULL:
        return (<Pair>ctx._pair_ptrs[peer]).take_unexpected(u, x)
    xfer_append(&ctx.links.wild_head, &ctx.links.wild_tail, x)
    return 0


cdef bint cancel_p2p_recv(Context ctx, Xfer *x, int source) noexcept nogil:
    if source >= 0:
        return (<Pair>ctx._pair_ptrs[source]).cancel_recv(x)
    return xfer_unlink(&ctx.links.wild_head, &ctx.links.wild_tail, x)


cdef Xfer *find_stashed(Context ctx, const Xfer *x, int source, int *peer) noexcept nogil:
    cdef int i
    cdef Xfer *u
    for i in range(ctx.size):
        if i != ctx.rank and (source < 0 or i == source):
            u = (<Pair>ctx._pair_ptrs[i]).find_unexpected(x, False)
            if u is not NULL:
                peer[0] = i
                return u
    return NULL


cdef int probe_stashed(Context ctx, Coll *c, Xfer *x, int source,
                       bint block) except -1 nogil:
    cdef int i, moved, peer
    cdef int64_t spin_until = 0
    cdef Xfer *u
    while True:
        u = find_stashed(ctx, x, source, &peer)
        if u is not NULL:
            x.hdr = u.hdr
            x.nbytes = u.nbytes
            x.peer = ctx._world[peer]
            return 1
        # Read whatever has arrived, from every pair that may send it.
        moved = 0
        for i in range(ctx.size):
            if i != ctx.rank and (source < 0 or i == source):
                moved |= (<Pair>ctx._pair_ptrs[i]).progress()
        if moved:
            if ctx.links.nsleepers:
                ctx.links.wake()
            spin_until = 0
            continue
        if not block:
            return 0
        if spin_until == 0:
            spin_until = now_ns() + ctx.spin_ns
        if now_ns() >= spin_until:
            block_poll(ctx, c)
            spin_until = 0
        else:
            pause(ctx)


cdef object take_from_self(Context ctx, char *buf, int64_t nbytes, int tag):
    for i, (t, data) in enumerate(ctx._to_self):
        if tag == -1 or t == tag:
            if len(data) > nbytes:
                raise MismatchError(
                    f"rank {ctx.rank}: a message of {len(data)} bytes "
                    f"from rank {ctx.rank} (tag {t}) does not fit the "
                    f"{nbytes}-byte receive buffer", ERR_TRUNCATE)
            del ctx._to_self[i]
            memcpy(buf, <const char *>data, len(data))
            return ctx.rank, t, len(data)
    return None


cdef int _send_to_self(Context ctx, int tag, bytes data) except -1:
    """A message to ourselves: to the oldest any-source receive posted
    that takes it, else kept for a later receive."""
    if not ctx.links.try_enter():       # free almost always: keep the GIL
        with nogil:
            ctx.links.enter()
    try:
        _deliver_to_self(ctx, tag, data)
    finally:
        ctx.links.leave()
    return 0


cdef int _deliver_to_self(Context ctx, int tag, bytes data) except -1:
    cdef Header h
    cdef Xfer *x = ctx.links.wild_head
    init_header(&h)
    h.kind = KIND_P2P
    h.comm_id = ctx.comm_id
    h.tag = <uint64_t>tag
    h.length = len(data)
    while x is not NULL and not frame_matches(&h, x):
        x = x.next
    if x is NULL:
        ctx._to_self.append((tag, data))
        return 0
    check_frame(&h, x, ctx.rank, ctx.rank)
    cancel_p2p_recv(ctx, x, -1)
    memcpy(x.buf, <const char *>data, len(data))
    x.hdr = h
    x.nbytes = len(data)
    x.peer = ctx._world[ctx.rank]
    x.state = XFER_DONE
    return 0
