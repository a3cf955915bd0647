# cython: language_level=3
"""Frames over a byte stream, for the stream transports (TCP, shared memory).

A frame is a 48-byte header and its payload. Large payloads are read
straight into the posted buffer; small frames are read ahead into a staging
buffer so that one read brings header and payload.
"""

import os

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset

from gloocy._core cimport (Pair, Xfer, Header, HEADER_SIZE, KIND_BYE,
                           KIND_ABORT, KIND_P2P, KIND_P2P_READ, P2P_SINGLE,
                           P2P_STREAMED, ABORT_MAX, XFER_DONE, XF_HEAP,
                           XF_SELF_ONLY,
                           init_header, should_park, check_header,
                           check_frame, check_unmatched, raise_peer_abort,
                           xfer_append, xfer_unlink)

from gloocy.errors import PeerLostError, ProtocolError

cdef extern from "<poll.h>" nogil:
    enum:
        POLLIN
        POLLOUT
        POLLRDHUP

cdef enum:
    STAGE_SIZE = 65536      # read-ahead buffer
    DIRECT_MIN = 16384      # payload left at least this: read into place


cdef class StreamPair(Pair):
    """A Pair over an ordered byte stream (abstract: see _stream.pxd)."""

    def __cinit__(self, *args, **kwargs):
        self.fd = -1
        self.address = ""
        self.read_ahead = STAGE_SIZE
        self.direct_min = DIRECT_MIN
        self.stage = <char *>malloc(STAGE_SIZE)
        if self.stage is NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.stage)

    cdef ssize_t stream_send(self, iovec *iov, int n) except -2 nogil:
        return self.lost("stream_send is abstract", 0)

    cdef ssize_t stream_recv(self, char *dst, size_t n) except -2 nogil:
        return self.lost("stream_recv is abstract", 0)

    cdef void stream_close(self) noexcept nogil:
        pass

    cdef int send_aside(self, Xfer *x) except -1 nogil:
        return 0

    cdef int side_frame(self) except -1 nogil:
        if (self.in_hdr.kind == KIND_P2P_READ or (self.in_hdr.kind == KIND_P2P
                and self.in_hdr.op & (P2P_SINGLE | P2P_STREAMED))):
            return self.not_carried()
        return 0

    cdef int not_carried(self) except -1 with gil:
        raise ProtocolError(f"rank {self.rank}: peer rank {self.peer} "
                            f"({self.address}) sent a single-copy frame, which "
                            f"this connection does not carry")

    cdef int lost(self, const char *what, int err) except -1 with gil:
        detail = what.decode()
        if err:
            detail += f": {os.strerror(err)}"
        where = f" ({self.address})" if self.address else ""
        raise PeerLostError(f"rank {self.rank}: lost peer rank {self.peer}"
                            f"{where}: {detail}", rank=self.peer)

    cdef bint exhausted(self) noexcept nogil:
        return (self.peer_gone and not self.parked and self.in_hdr_got == 0
                and self.st_lo == self.st_hi)

    cdef int gone(self) except -1 nogil:
        """PeerLostError for a call that needs a peer that has gone."""
        if self.peer_said_bye:
            return self.lost("the peer has left (closed its communicator)", 0)
        return self.lost("connection closed by the peer (did its process die?)", 0)

    # -- sending -------------------------------------------------------------

    cdef int post_send(self, Xfer *x) except -1 nogil:
        if self.fd < 0 or self.cut:
            return self.lost("the connection is closed" if self.fd < 0 else
                             "a frame was cut off by an earlier error", 0)
        if self.peer_gone:
            return self.gone()
        xfer_append(&self.send_head, &self.send_tail, x)
        if self.send_head is x:
            self.send_some()           # most small frames leave right here
        return 0

    cdef int send_some(self) except -1 nogil:
        cdef iovec iov[2]
        cdef Xfer *x
        cdef ssize_t n
        cdef int moved = 0
        cdef int64_t total
        cdef int aside
        while self.send_head is not NULL:
            x = self.send_head
            if x.done == 0:
                aside = self.send_aside(x)
                if aside:
                    return moved | (aside - 1)
            total = HEADER_SIZE + x.nbytes
            while x.done < total:
                if x.done < HEADER_SIZE:
                    iov[0].iov_base = <char *>&x.hdr + x.done
                    iov[0].iov_len = HEADER_SIZE - x.done
                    iov[1].iov_base = x.buf
                    iov[1].iov_len = x.nbytes
                    n = self.stream_send(iov, 2 if x.nbytes else 1)
                else:
                    iov[0].iov_base = x.buf + (x.done - HEADER_SIZE)
                    iov[0].iov_len = total - x.done
                    n = self.stream_send(iov, 1)
                if n == WOULD_BLOCK:
                    self.send_mid = x.done > 0
                    return moved
                x.done += n
                moved = 1
            self.send_mid = False
            self.send_head = x.next
            if self.send_head is NULL:
                self.send_tail = NULL
            x.next = NULL
            x.state = XFER_DONE
        return moved

    # -- receiving -----------------------------------------------------------

    cdef int post_recv(self, Xfer *x) except -1 nogil:
        if self.fd < 0 or self.cut:
            return self.lost("the connection is closed" if self.fd < 0 else
                             "a frame was cut off by an earlier error", 0)
        # A frame that came first (stashed) is the oldest match: use it.
        cdef Xfer *u = self.find_unexpected(x, True)
        if u is not NULL and u.state != XFER_DONE and self.any_source_for(u) is not NULL:
            u = NULL        # still arriving, for an older any-source receive
        if u is not NULL:
            if u.state == XFER_DONE:
                return self.take_unexpected(u, x)
            # Still arriving (u is in_x): move what came so far into x and
            # let the rest go straight there.
            check_frame(&u.hdr, x, self.rank, self.peer)
            memcpy(x.buf, u.buf, u.done)
            x.done = u.done
            x.nbytes = u.nbytes
            x.hdr = u.hdr
            x.peer = self.peer
            self.in_x = x
            self.drop_unexpected(u)
            self.matched(&x.hdr)
            return 0
        x.next = NULL
        self.check_stash(x)
        if self.exhausted():
            return self.gone()
        xfer_append(&self.recv_head, &self.recv_tail, x)
        if self.parked:
            self.start_payload()
        return 0

    cdef int start_payload(self) except -1 nogil:
        """A header is complete: hand its payload to the matching receive.
        With none posted yet, stash the frame (a copy) if it is
        point-to-point, small or of a communicator that is not running a
        call, else park it: the stream waits until that receive is posted,
        and the payload still lands in place."""
        cdef Xfer *x = self.claim(&self.in_hdr, &self.recv_head, &self.recv_tail)
        if x is NULL:
            check_unmatched(&self.in_hdr, self.recv_head, self.rank, self.peer)
            self.parked = should_park(&self.in_hdr, self.recv_head)
            if not self.parked:
                self.in_x = self.stash(&self.in_hdr)
            return 0
        check_frame(&self.in_hdr, x, self.rank, self.peer)
        x.hdr = self.in_hdr
        x.nbytes = <int64_t>self.in_hdr.length
        x.peer = self.peer
        x.done = 0
        self.in_x = x
        self.parked = False
        return 0

    cdef int64_t read_into(self, char *dst, int64_t need, bint direct) except -2 nogil:
        """Up to `need` bytes into dst: from the staging buffer if it holds
        any, else from the stream (straight into dst for large payloads).
        WOULD_BLOCK when nothing is there yet."""
        cdef ssize_t n
        if self.st_lo < self.st_hi:
            n = min(need, self.st_hi - self.st_lo)
            memcpy(dst, self.stage + self.st_lo, n)
            self.st_lo += n
            return n
        if self.peer_gone:
            return WOULD_BLOCK
        direct = direct and need >= self.direct_min
        n = self.stream_recv(dst if direct else self.stage,
                             need if direct else self.read_ahead)
        if n == WOULD_BLOCK:
            return WOULD_BLOCK
        if n == 0:
            self.peer_gone = True
            if (not self.busy() and self.in_hdr_got == 0
                    and not self.any_source_waits()):
                # Nothing of ours needed more from it: a call that does
                # raises then (post_recv); one that does not, completes.
                return WOULD_BLOCK
            if self.peer_said_bye:
                return self.lost("the peer has left (closed its "
                                 "communicator) before sending what "
                                 "this rank waits for", 0)
            return self.lost("connection closed by the peer (did its "
                             "process die?)", 0)
        if direct:
            return n
        self.st_lo = min(need, n)
        self.st_hi = n
        memcpy(dst, self.stage, self.st_lo)
        return self.st_lo

    cdef int recv_some(self) except -1 nogil:
        cdef int64_t got
        cdef int moved = 0
        cdef Xfer *x
        while True:
            if self.in_x is NULL:
                if self.parked:
                    return moved
                got = self.read_into(<char *>&self.in_hdr + self.in_hdr_got,
                                     HEADER_SIZE - self.in_hdr_got, False)
                if got == WOULD_BLOCK:
                    return moved
                moved = 1
                self.in_hdr_got += got
                if self.in_hdr_got < HEADER_SIZE:
                    continue
                check_header(&self.in_hdr, self.rank, self.peer)
                if self.in_hdr.kind == KIND_BYE:
                    self.peer_said_bye = True
                    self.in_hdr_got = 0
                    continue
                if self.in_hdr.kind == KIND_ABORT:
                    self.in_x = self.stash(&self.in_hdr)   # read, then raise
                    continue
                if self.side_frame():
                    continue
                self.start_payload()
                continue
            x = self.in_x
            while x.done < x.nbytes:
                if x.flags & XF_HEAP and x.done == x.cap:
                    self.grow_stash(x)
                got = self.read_into(x.buf + x.done,
                                     (x.cap if x.flags & XF_HEAP else x.nbytes) - x.done,
                                     True)
                if got == WOULD_BLOCK:
                    return moved
                x.done += got
                moved = 1
            if x.hdr.kind == KIND_ABORT and (x.flags & XF_HEAP):
                return raise_peer_abort(x, self.rank, self.peer)
            x.state = XFER_DONE
            self.in_x = NULL
            self.in_hdr_got = 0
            moved = 1
            if (x.flags & XF_HEAP) and self.hand_to_any_source(x):
                return moved
            if not (x.flags & XF_HEAP):
                # A receive of ours is complete: its call may be too. What
                # follows (a peer's reason for stopping, its hang-up) is for
                # the calls that still wait, or the next one.
                return moved

    cdef Xfer *any_source_for(self, Xfer *u) noexcept nogil:
        """The oldest any-source receive posted whose oldest match on this
        pair is the stashed u (receives match in the order posted), or NULL."""
        cdef Xfer *w
        if u.hdr.kind != KIND_P2P or self.wild_head is NULL:
            return NULL
        w = self.wild_head[0]
        while w is not NULL:
            if ((w.flags & XF_SELF_ONLY) == 0
                    and self.find_unexpected(w, True) is u):
                return w
            w = w.next
        return NULL

    cdef int hand_to_any_source(self, Xfer *u) except -1 nogil:
        """A stashed message has just come in full: an any-source receive
        posted while it was still arriving (post_p2p_recv takes only whole
        ones) takes it now, else nothing would. 1 if one did."""
        cdef Xfer *w = self.any_source_for(u)
        if w is NULL:
            return 0
        xfer_unlink(self.wild_head, self.wild_tail, w)
        self.take_unexpected(u, w)
        return 1

    cdef int progress(self) except -1 nogil:
        cdef int moved = 0
        if self.fd < 0:
            return self.lost("the connection is closed", 0)
        if self.send_head is not NULL and not self.send_err:
            moved = self.send_some()
        moved |= self.recv_some()
        if self.send_err:
            # What the peer sent before it went (its reason for stopping, or
            # its end of the stream) was read and raised nothing: say so.
            return self.lost("send failed", self.send_err)
        return moved

    cdef bint busy(self) noexcept nogil:
        return (self.send_head is not NULL or self.recv_head is not NULL
                or self.in_x is not NULL)

    cdef bint any_source_waits(self) noexcept nogil:
        """A receive from any rank is posted (one from ourselves only,
        XF_SELF_ONLY, waits for nothing this peer sends)."""
        cdef Xfer *w
        if self.wild_head is NULL:
            return False
        w = self.wild_head[0]
        while w is not NULL:
            if (w.flags & XF_SELF_ONLY) == 0:
                return True
            w = w.next
        return False

    cdef bint expecting(self) noexcept nogil:
        return self.recv_head is not NULL or self.in_x is not NULL

    cdef int wait_fd(self) noexcept nogil:
        return self.fd

    cdef short wait_events(self) noexcept nogil:
        cdef short ev = 0
        if self.fd < 0 or self.peer_gone:
            return 0
        if self.send_head is not NULL and not self.send_err:
            ev |= POLLOUT
        if not self.parked:
            ev |= POLLIN | POLLRDHUP    # data, or a hang-up to notice
        return ev

    cdef int say_abort(self, bytes why, int code, int culprit, int origin) except -1:
        cdef Header h
        cdef bytes text = why[:ABORT_MAX]
        cdef iovec iov[2]
        # (Never read the posted sends here: fail() calls this after the
        # failed call freed them; abandon() kept what we need.)
        if self.fd < 0 or self.peer_gone or self.send_mid or self.cut:
            return 0                      # mid-frame: the peer can't parse it
        init_header(&h)
        h.kind = KIND_ABORT
        h.op = code
        h.root = culprit
        h.tag = <uint64_t>(origin + 1)
        h.length = len(text)
        iov[0].iov_base = &h
        iov[0].iov_len = HEADER_SIZE
        iov[1].iov_base = <char *>text
        iov[1].iov_len = len(text)
        try:
            self.stream_send(iov, 2)
        except PeerLostError:
            pass                          # best effort
        return 0

    cdef bint cancel_recv(self, Xfer *x) noexcept nogil:
        # Not in the queue: matched already (or never posted).
        return xfer_unlink(&self.recv_head, &self.recv_tail, x)

    cdef void abandon(self) noexcept nogil:
        # The posted Xfers may be freed memory already (fail() runs after
        # the failed call's frames are gone): forget them without reading
        # them. A stashed frame still arriving is ours and goes on; a
        # receive's payload cut part-way, or a send cut part-way, leaves a
        # stream nobody can parse further: stop reading it (parked) and
        # writing it (cut).
        cdef Xfer *u = self.unexp_head
        while u is not NULL and u is not self.in_x:
            u = u.next
        if self.in_x is not NULL and u is NULL:
            self.cut = True
            self.parked = True
            self.in_x = NULL
        if self.send_mid:
            self.cut = True
        self.send_mid = False
        self.send_head = self.send_tail = NULL
        self.recv_head = self.recv_tail = NULL

    cdef int shutdown(self, bint clean) except -1:
        cdef Header bye
        cdef iovec iov
        if self.fd < 0:
            return 0
        if clean and not self.peer_gone and self.send_head is NULL and not self.cut:
            init_header(&bye)
            bye.kind = KIND_BYE
            iov.iov_base = &bye
            iov.iov_len = HEADER_SIZE
            try:
                self.stream_send(&iov, 1)
            except PeerLostError:
                pass                      # it left first
        self.stream_close()
        self.fd = -1
        self.closed = True
        self.abandon()
        return 0
