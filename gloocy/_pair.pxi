# The abstract Pair: what every transport implements (see _core.pxd).

cdef int _abstract(str what) except -1 with gil:
    raise NotImplementedError(f"Pair.{what} is abstract")


cdef class Pair:
    """Tagged, ordered, reliable byte messages to one peer (abstract)."""

    def __cinit__(self, *args, **kwargs):
        self.rank = -1
        self.peer = -1

    cdef int post_send(self, Xfer *x) except -1 nogil:
        return _abstract("post_send")

    cdef int post_recv(self, Xfer *x) except -1 nogil:
        return _abstract("post_recv")

    cdef int progress(self) except -1 nogil:
        return _abstract("progress")

    cdef bint busy(self) noexcept nogil:
        return False

    cdef bint expecting(self) noexcept nogil:
        return False

    cdef int wait_fd(self) noexcept nogil:
        return -1

    cdef short wait_events(self) noexcept nogil:
        return 0

    cdef int wait_words(self, WordWait *w, int room) noexcept nogil:
        return WORDS_NONE

    cdef bint exhausted(self) noexcept nogil:
        return False

    cdef int gone(self) except -1 nogil:
        return 0

    cdef void abandon(self) noexcept nogil:
        pass

    cdef bint cancel_recv(self, Xfer *x) noexcept nogil:
        return False

    cdef int say_abort(self, bytes why, int code, int culprit, int origin) except -1:
        return 0

    cdef void wake_peer(self) noexcept nogil:
        pass

    cdef void drain_wakeups(self) noexcept nogil:
        pass

    cdef int shutdown(self, bint clean) except -1:
        self.closed = True
        return 0

    def __dealloc__(self):
        cdef Ack *a
        while self.acks is not NULL:
            a = self.acks
            self.acks = a.link
            free(a)
        while self.unexp_head is not NULL:
            self.drop_unexpected(self.unexp_head)

    cdef Xfer *stash(self, const Header *h) except NULL nogil:
        cdef Xfer *u = <Xfer *>_alloc(sizeof(Xfer))
        memset(u, 0, sizeof(Xfer))
        u.cap = <int64_t>min(h.length, <uint64_t>EAGER_MAX)
        u.buf = <char *>malloc(u.cap if u.cap else 1)
        if u.buf is NULL:
            free(u)
            _raise_nomem()
        u.hdr = h[0]
        u.nbytes = <int64_t>h.length
        u.flags = XF_HEAP
        u.peer = self.peer
        u.state = XFER_POSTED
        xfer_append(&self.unexp_head, &self.unexp_tail, u)
        return u

    cdef int grow_stash(self, Xfer *u) except -1 nogil:
        cdef int64_t cap = min(u.nbytes, 2 * u.cap)
        cdef char *more = <char *>realloc(u.buf, cap)
        if more is NULL:
            return _raise_stash_nomem(self, u)
        u.buf = more
        u.cap = cap
        return 0

    cdef Xfer *find_unexpected(self, const Xfer *want, bint partial) noexcept nogil:
        cdef Xfer *u = self.unexp_head
        while u is not NULL:
            if frame_matches(&u.hdr, want):
                return u if (partial or u.state == XFER_DONE) else NULL
            u = u.next
        return NULL

    cdef void drop_unexpected(self, Xfer *u) noexcept nogil:
        if xfer_unlink(&self.unexp_head, &self.unexp_tail, u):
            free(u.buf)
            free(u)

    cdef int take_unexpected(self, Xfer *u, Xfer *x) except -1 nogil:
        check_frame(&u.hdr, x, self.rank, self.peer)
        memcpy(x.buf, u.buf, u.nbytes)
        x.nbytes = u.nbytes
        x.done = u.nbytes
        x.hdr = u.hdr
        x.peer = self.peer
        x.state = XFER_DONE
        self.drop_unexpected(u)
        self.matched(&x.hdr)
        return 0

    cdef char *unstash(self, Xfer *u) noexcept nogil:
        cdef char *buf = u.buf
        xfer_unlink(&self.unexp_head, &self.unexp_tail, u)
        self.matched(&u.hdr)
        free(u)
        return buf

    cdef void matched(self, const Header *h) noexcept nogil:
        cdef Ack *a
        if h.kind != KIND_P2P or (h.op & P2P_SYNC) == 0:
            return
        a = <Ack *>malloc(sizeof(Ack))
        if a is NULL:
            self.acks_lost += 1       # flush_acks raises MemoryError
            return
        memset(a, 0, sizeof(Ack))
        init_header(&a.x.hdr)
        a.x.hdr.kind = KIND_P2P_ACK
        a.x.hdr.comm_id = h.comm_id
        a.x.hdr.seq = h.seq
        a.x.state = XFER_POSTED
        a.link = self.acks
        self.acks = a

    cdef int flush_acks(self) except -1 nogil:
        cdef Ack *a = self.acks
        cdef Ack **at = &self.acks
        cdef int posted = 0
        if self.acks_lost:
            self.acks_lost = 0
            _raise_nomem()
        while a is not NULL:
            if not a.posted:
                if self.closed or self.peer_gone:
                    a.x.state = XFER_DONE     # nobody to tell
                else:
                    a.posted = True
                    self.post_send(&a.x)
                    posted = 1
            if a.x.state == XFER_DONE:
                at[0] = a.link
                free(a)
            else:
                at = &a.link
            a = at[0]
        return posted

    cdef int check_stash(self, const Xfer *x) except -1 nogil:
        cdef Xfer *u = self.unexp_head
        while u is not NULL:
            check_unmatched(&u.hdr, x, self.rank, self.peer)
            u = u.next
        return 0

    cdef Xfer *claim(self, const Header *h, Xfer **posted, Xfer **posted_tail) noexcept nogil:
        cdef Xfer *x = _first_match(posted[0], h)
        cdef Xfer *w
        if h.kind == KIND_P2P and self.wild_head is not NULL:
            w = self.wild_head[0]
            while w is not NULL and (not frame_matches(h, w)
                                     or (w.flags & XF_SELF_ONLY) != 0):
                w = w.next
            if w is not NULL and (x is NULL or w.order < x.order):
                xfer_unlink(self.wild_head, self.wild_tail, w)
                self.matched(h)
                return w
        if x is not NULL:
            xfer_unlink(posted, posted_tail, x)
            self.matched(h)
        return x

    cdef Xfer *find_stale(self, uint32_t comm_id, uint64_t seq) noexcept nogil:
        cdef Xfer *u = self.unexp_head
        while u is not NULL:
            if (u.hdr.kind != KIND_P2P and u.hdr.kind != KIND_P2P_ACK
                    and u.hdr.comm_id == comm_id
                    and u.hdr.seq < seq):
                return u
            u = u.next
        return NULL

    def close(self, clean=True):
        self.shutdown(clean)

    def held_fds(self):
        """The fds this pair holds (for leak checks): its wait_fd; a
        transport that holds more says so."""
        fd = self.wait_fd()
        return {fd} if fd >= 0 else set()

    def __repr__(self):
        return (f"<{type(self).__name__} rank {self.rank} -> peer "
                f"{self.peer}{' closed' if self.closed else ''}>")


cdef int _raise_stash_nomem(Pair pair, const Xfer *u) except -1 with gil:
    raise MemoryError(f"rank {pair.rank}: no memory to keep a {u.nbytes}-byte "
                      f"message from rank {pair.peer} that came before its receive")


cdef Xfer *_first_match(Xfer *x, const Header *h) noexcept nogil:
    while x is not NULL and not frame_matches(h, x):
        x = x.next
    return x


cdef void xfer_append(Xfer **head, Xfer **tail, Xfer *x) noexcept nogil:
    x.next = NULL
    if tail[0] is NULL:
        head[0] = x
    else:
        tail[0].next = x
    tail[0] = x


cdef bint xfer_unlink(Xfer **head, Xfer **tail, Xfer *x) noexcept nogil:
    """Take x out of the queue; False if it was not in it."""
    cdef Xfer *prev = NULL
    cdef Xfer *it = head[0]
    while it is not NULL and it is not x:
        prev = it
        it = it.next
    if it is NULL:
        return False
    if prev is NULL:
        head[0] = x.next
    else:
        prev.next = x.next
    if tail[0] is x:
        tail[0] = prev
    x.next = NULL
    return True


# Unfinished nonblocking collectives in this process (_schedule.pxi):
# while there are, early frames are stashed, never parked (the frame a
# schedule needs next may sit behind a parked one, from a call that has
# not started here).
cdef int64_t schedules_running = 0


cdef bint should_park(const Header *h, const Xfer *posted) noexcept nogil:
    if h.kind == KIND_P2P or h.length <= EAGER_MAX or schedules_running:
        return False
    while posted is not NULL:
        if posted.hdr.comm_id == h.comm_id and posted.hdr.kind != KIND_P2P:
            return True
        posted = posted.next
    return False
