# Point-to-point: Context.send, recv, isend, irecv and probe (call_*), and
# P2PHandle, an Isend or Irecv in flight.
#
# Frames of kind P2P carry the user's tag and match by (communicator,
# source, tag) in arrival order; they are stashed when they come before
# their receive, so sends complete without waiting for it.


cdef uint64_t _ack_ids = 0          # ids of synchronous sends (GIL held)


class _SyncBytes(bytes):
    """A synchronous send's message to ourselves: whoever takes it out of
    _to_self finishes `handle`, the send."""


cdef int _taken(object data) except -1:
    """A message to ourselves was matched: finish its synchronous send."""
    cdef P2PHandle h
    if type(data) is not bytes:
        h = getattr(data, "handle", None)
        if h is not None and not h.finished:
            h._finish(h.peer, h.tag, len(data))
    return 0


cdef bint _only_self(Context ctx, int source) noexcept:
    """Only this process can send what a receive from `source` waits for."""
    return source == ctx.rank or ctx.size == 1


cdef bint _lone_thread() except -1:
    """No other thread of this process could send (gloocy's listener and
    store threads never do)."""
    return threading.active_count() == 1 or lone_thread()


cdef int _lone_thread_deadlock(Context ctx, str what) except -1:
    """A receive only this process can satisfy, and no other thread of it
    that could: MPI would hang; say so instead."""
    if _lone_thread():
        raise ContextPoisoned(f"rank {ctx.rank}: {what} with no message "
                              "sent to itself and no other thread that "
                              "could send one: it would wait forever")
    return 0


cdef str _p2p_call(bint is_send, int64_t nbytes, int peer, int tag):
    """What the user called, for messages: e.g. 'recv of 8 bytes from any
    source (any tag)', 'send of 16 bytes to rank 2 (tag 5)'."""
    if is_send:
        who = f"to rank {peer}"
    else:
        who = "from any source" if peer < 0 else f"from rank {peer}"
    size = "a message" if nbytes < 0 else f"{nbytes} bytes"
    mark = "any tag" if tag < 0 else f"tag {tag}"
    return f"{'send' if is_send else 'recv'} of {size} {who} ({mark})"


cdef int _reword_timeout(Context ctx, BaseException e, Coll *c,
                         str call) except -1:
    """fail() names a timed-out call by its frame ('send/recv #0
    (count=0)'), and says 'rank(s) ?' when no pair was mid-message (a
    receive from any source): say what the user called instead."""
    if not isinstance(e, CollectiveTimeout) or not e.args:
        return 0
    text = str(e.args[0]).replace(describe_call(&c.proto), call, 1)
    text = text.replace(f"; rank {ctx.rank} was waiting for rank(s) ?", "", 1)
    text = text.replace(" timed out waiting for rank(s) ?", " timed out", 1)
    e.args = (text,) + e.args[1:]
    return 0


cdef int _enter_links(Context ctx) except -1:
    """Take the links' lock while holding the GIL (to look at _to_self)."""
    if not ctx.links.try_enter():       # free almost always: keep the GIL
        with nogil:
            ctx.links.enter()
    return 0


cdef int _post_sync(Context ctx, Coll *c, Xfer *ack, int dest) except -1:
    """Make the send about to be posted with c.proto synchronous: a fresh
    ack id in its seq, and the receive of the acknowledgement posted."""
    global _ack_ids
    _ack_ids += 1
    c.proto.op = P2P_SYNC
    c.proto.seq = _ack_ids
    memset(ack, 0, sizeof(Xfer))
    ack.hdr = c.proto
    ack.hdr.kind = KIND_P2P_ACK
    ack.hdr.op = OP_NONE
    ack.hdr.tag = 0
    ack.hdr.length = 0
    ack.state = XFER_POSTED
    with nogil:
        (<Pair>pair_of(ctx, dest)).post_recv(ack)
    return 0


cdef object call_send(Context ctx, object buf, int dest, int tag,
                      object timeout, bint sync):
    cdef Coll c
    cdef Xfer x, ack
    ctx._check_peer(dest, "dest", False)
    if tag < 0:
        raise ArgumentError(f"tag: must be >= 0, got {tag}", ERR_TAG)
    if dest == ctx.rank and sync:          # done once a receive takes it
        call_isend(ctx, buf, dest, tag, True).wait(timeout)
        return
    if dest == ctx.rank and type(buf) is bytes:    # a pickle, to ourselves
        _send_to_self(ctx, tag, <bytes>buf)
        return
    cdef Buf b = get_buffer(buf, "buf", False)
    if dest == ctx.rank:
        _send_to_self(ctx, tag, b.ptr[:b.nbytes])
        return
    ctx.begin_p2p(&c, timeout)
    try:
        if sync:
            _post_sync(ctx, &c, &ack, dest)
        with nogil:
            post_send(ctx, &c, &x, dest, <uint64_t>tag, b.ptr, b.nbytes)
            wait_xfer(ctx, &c, &x)
            if sync:
                wait_xfer(ctx, &c, &ack)
    except BaseException as e:
        fail(ctx, e, &c)
        _reword_timeout(ctx, e, &c, _p2p_call(True, b.nbytes, dest, tag))
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
    cdef bint only_self = _only_self(ctx, source)
    cdef bint lonely = False
    got = err = None
    ctx.begin_p2p(&c, timeout)
    try:
        # Under the links' lock, so that no thread's send to ourselves can
        # slip between this look and the receive being posted.
        if source in (-1, ctx.rank):
            try:
                got = take_from_self(ctx, b.ptr, b.nbytes, tag)
            except MismatchError as e:      # truncated: nothing on the wire
                err = e
            if got is not None:
                return got
            lonely = err is None and only_self and _lone_thread()
        if not lonely and err is None:
            _p2p_want(&x, &c, b.ptr, b.nbytes, tag)
            if only_self:
                x.flags |= XF_SELF_ONLY
            with nogil:
                post_p2p_recv(ctx, &x, source)
                wait_xfer(ctx, &c, &x)
    except BaseException as e:
        fail(ctx, e, &c)
        _reword_timeout(ctx, e, &c, _p2p_call(False, b.nbytes, source, tag))
        raise
    finally:
        ctx.end()
    if lonely:
        _lone_thread_deadlock(ctx, "recv from itself")
    if err is not None:
        raise err
    return ctx._local[x.peer], <int64_t>x.hdr.tag, x.nbytes


cdef object call_isend(Context ctx, object buf, int dest, int tag, bint sync):
    ctx._check_peer(dest, "dest", False)
    if tag < 0:
        raise ArgumentError(f"tag: must be >= 0, got {tag}", ERR_TAG)
    cdef P2PHandle h = P2PHandle.__new__(P2PHandle)
    h.ctx, h.peer, h.tag, h.is_send = ctx, dest, tag, True
    if dest == ctx.rank and sync:         # done once a receive takes it
        if type(buf) is bytes:
            data = _SyncBytes(<bytes>buf)
        else:
            h.buf = get_buffer(buf, "buf", False)
            data = _SyncBytes(h.buf.ptr[:h.buf.nbytes])
        data.handle = h
        h.sync = True
        _send_to_self(ctx, tag, data)
        return h
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
        if sync:
            _post_sync(ctx, &h.c, &h.ack, dest)
            h.sync = True
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
    err = None
    ctx.begin_p2p(&h.c, None)
    try:
        _p2p_want(&h.x, &h.c, b.ptr, b.nbytes, tag)
        if source in (-1, ctx.rank):
            try:
                if h._take_from_self():
                    return h          # one we sent ourselves, already here
            except MismatchError as e:      # truncated: nothing on the wire
                err = e
        if err is None:
            if _only_self(ctx, source):
                h.x.flags |= XF_SELF_ONLY
            with nogil:
                post_p2p_recv(ctx, &h.x, source)
    except BaseException as e:
        fail(ctx, e, &h.c)
        raise
    finally:
        ctx.end()
    if err is not None:
        raise err
    h.posted = True
    ctx._requests.add(h)
    return h


cdef object _match(Context ctx, int source, int tag, bint block,
                   object timeout, bint take):
    """The oldest message a receive from `source` with `tag` would get:
    (source, tag, nbytes), or with `take` (data, source, tag), the message
    then taken; None when `block` is False and there is none yet."""
    cdef Coll c
    cdef Xfer x
    cdef int found
    cdef int i
    cdef uint64_t seen = 0
    cdef object data
    ctx._check_peer(source, "source", True)
    if tag < -1:
        raise ArgumentError(f"tag: must be >= 0 or -1 (any), got {tag}", ERR_TAG)
    cdef bint only_self = _only_self(ctx, source)
    cdef double limit = time.monotonic() + ctx.seconds(timeout)
    while True:
        if source in (-1, ctx.rank):
            _enter_links(ctx)
            try:
                seen = ctx.self_sent
                for i in range(len(ctx._to_self)):
                    t, data = ctx._to_self[i]
                    if tag == -1 or t == tag:
                        if not take:
                            return ctx.rank, t, len(data)
                        del ctx._to_self[i]
                        _taken(data)
                        return data, ctx.rank, t
            finally:
                ctx.links.leave()
            if only_self:
                if not block:
                    return None
                _lone_thread_deadlock(ctx, "probe of itself")
                if time.monotonic() > limit:
                    raise CollectiveTimeout(
                        f"rank {ctx.rank}: no message from itself (tag "
                        f"{tag}) within the timeout")
                time.sleep(0.0002)
                continue
        ctx.begin_p2p(&c, timeout)
        try:
            _p2p_want(&x, &c, NULL, 0, tag)
            with nogil:
                if block and source >= 0 and source != ctx.rank:
                    # connected (as a receive's post does), so that a peer
                    # gone before we ever spoke is named now, not at the deadline
                    pair_of(ctx, source)
                found = probe_stashed(ctx, &c, &x, source, block, take,
                                      source == -1, seen)
        except BaseException as e:
            fail(ctx, e, &c)
            what = _p2p_call(False, -1, source, tag)
            _reword_timeout(ctx, e, &c,
                            what if take else what.replace("recv", "probe", 1))
            raise
        finally:
            ctx.end()
        if found == 2:
            continue                  # a message to ourselves came meanwhile
        if not found:
            return None
        if not take:
            return ctx._local[x.peer], <int64_t>x.hdr.tag, x.nbytes
        try:
            data = <bytes>x.buf[:x.nbytes]
        finally:
            free(x.buf)
        return data, ctx._local[x.peer], <int64_t>x.hdr.tag


cdef object call_probe(Context ctx, int source, int tag, bint block,
                       object timeout):
    return _match(ctx, source, tag, block, timeout, False)


cdef object call_recv_new(Context ctx, int source, int tag, bint block,
                          object timeout):
    """Receive the next message from `source` with `tag` into new memory
    (a pickle, whose size only its frame tells): (data, source, tag), or
    None when `block` is False and none is there."""
    return _match(ctx, source, tag, block, timeout, True)


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

    cdef int _wait_taken(self, bint block, object timeout) except -1:
        """A synchronous send to ourselves: done once a receive took it."""
        cdef Context ctx = self.ctx
        if not block:
            return 0
        cdef double limit = time.monotonic() + ctx.seconds(timeout)
        while not self.finished:
            if ctx.obj_receives:        # receives posted before: they match
                for r in list(ctx.obj_receives):
                    r._poll()
                if self.finished:
                    break
            _lone_thread_deadlock(ctx, "a synchronous send to itself")
            if time.monotonic() > limit:
                raise CollectiveTimeout(
                    f"rank {ctx.rank}: no receive took its synchronous send "
                    f"to itself (tag {self.tag}) within the timeout")
            time.sleep(0.0002)
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
        if self.is_send and not self.posted:    # a synchronous send to ourselves
            return self._wait_taken(block, timeout)
        if self.posted and self.x.state == XFER_DONE and not self.sync:
            self._finish(ctx._local[self.x.peer], <int64_t>self.x.hdr.tag,
                         self.x.nbytes)
            ctx._requests.discard(self)
            return 1
        ctx.check_usable()
        if (block and not self.is_send and _only_self(ctx, self.peer)
                and self.x.state != XFER_DONE):
            _lone_thread_deadlock(ctx, "waiting for a message from itself")
        cdef double t = ctx.timeout if timeout is None else timeout
        self.c.deadline = now_ns() + <int64_t>min(t * 1e9, 4e18)
        with nogil:
            ctx.links.enter()
        try:
            with nogil:
                if block:
                    wait_xfer(ctx, &self.c, &self.x)
                    if self.sync:
                        wait_xfer(ctx, &self.c, &self.ack)
                elif self.x.state != XFER_DONE or (
                        self.sync and self.ack.state != XFER_DONE):
                    progress_all(ctx)
                found = self.x.state == XFER_DONE and (
                    not self.sync or self.ack.state == XFER_DONE)
        except BaseException as e:
            fail(ctx, e, &self.c)
            _reword_timeout(ctx, e, &self.c, _p2p_call(
                self.is_send, self.buf.nbytes if self.buf is not None else -1,
                self.peer, self.tag))
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
    """Post a receive: on its pair, or in the any-source list (a receive
    from anyone, or one from ourselves: XF_SELF_ONLY)."""
    cdef int peer
    cdef Xfer *u
    x.order = ctx.links.order
    ctx.links.order += 1
    if source >= 0 and source != ctx.rank:
        (<Pair>pair_of(ctx, source)).post_recv(x)
        (<Pair>ctx._pair_ptrs[source]).flush_acks()
        return 0
    if (x.flags & XF_SELF_ONLY) == 0:
        u = find_stashed(ctx, x, -1, &peer)     # a frame that came first
        if u is not NULL:
            (<Pair>ctx._pair_ptrs[peer]).take_unexpected(u, x)
            (<Pair>ctx._pair_ptrs[peer]).flush_acks()
            return 0
    xfer_append(&ctx.links.wild_head, &ctx.links.wild_tail, x)
    return 0


cdef bint cancel_p2p_recv(Context ctx, Xfer *x, int source) noexcept nogil:
    if source >= 0 and source != ctx.rank:
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
                       bint block, bint take, bint watch_self,
                       uint64_t seen) except -1 nogil:
    """Wait for a complete stashed frame matching x (1), or none when not
    `block` (0); with `watch_self`, 2 as soon as a message to ourselves
    was kept (a receive from anyone may want it). Found: x has its header,
    size and rank; with `take` the frame is taken out of its pair (a
    synchronous send's is acknowledged) and x.buf is its malloc'ed copy."""
    cdef int i, moved, peer
    cdef int64_t since = 0
    cdef Xfer *u
    while True:
        if watch_self and ctx.self_sent != seen:
            return 2
        u = find_stashed(ctx, x, source, &peer)
        if u is not NULL:
            x.hdr = u.hdr
            x.nbytes = u.nbytes
            x.peer = ctx._world[peer]
            if take:
                x.buf = (<Pair>ctx._pair_ptrs[peer]).unstash(u)
                (<Pair>ctx._pair_ptrs[peer]).flush_acks()
            return 1
        # Read whatever has arrived, from every pair that may send it
        # (and put in place those peers connected to send it: lazy set-up).
        moved = install_arrivals(ctx.links) if ctx.links.arrivals else 0
        if source >= 0:
            if source != ctx.rank:
                moved |= (<Pair>ctx._pair_ptrs[source]).progress()
        else:                         # the connected pairs (see progress_all)
            for i in range(ctx._nconn):
                moved |= (<Pair>ctx._conn[i]).progress()
        if moved:
            if ctx.links.nsleepers:
                ctx.links.wake()
            since = 0
            continue
        if not block:
            return 0
        if since == 0:
            since = now_ns()
        if not keep_looking(ctx, since, ctx.spin_ns + ctx.links.yield_ns):
            _check_sources_live(ctx, source)
            block_poll(ctx, c)


cdef int _check_sources_live(Context ctx, int source) except -1 nogil:
    """Before a probe sleeps: PeerLostError once `source` has gone with
    nothing left to read, or (any source) once a rank has died without
    saying goodbye. (Ranks that left cleanly do not stop a probe of any
    source: a message to ourselves may still come.)"""
    cdef int i
    for i in range(ctx.size):
        if i == ctx.rank or (source >= 0 and i != source):
            continue
        if ((<Pair>ctx._pair_ptrs[i]).exhausted() and
                (source >= 0 or not (<Pair>ctx._pair_ptrs[i]).peer_said_bye)):
            return (<Pair>ctx._pair_ptrs[i]).gone()
    return 0


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
            _taken(data)
            return ctx.rank, t, len(data)
    return None


cdef int _send_to_self(Context ctx, int tag, object data) except -1:
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


cdef int _deliver_to_self(Context ctx, int tag, object data) except -1:
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
        ctx.self_sent += 1
        if ctx.links.nsleepers:       # a thread may be probing for it
            ctx.links.wake()
        return 0
    check_frame(&h, x, ctx.rank, ctx.rank)
    cancel_p2p_recv(ctx, x, -1)
    memcpy(x.buf, <const char *>data, len(data))
    x.hdr = h
    x.nbytes = len(data)
    x.peer = ctx._world[ctx.rank]
    x.state = XFER_DONE
    _taken(data)
    if ctx.links.nsleepers:           # its thread may be asleep
        ctx.links.wake()
    return 0
