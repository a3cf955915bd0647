# cython: language_level=3
"""TCP transport: one authenticated connection per peer, full mesh.

Connections are set up in Python (the store, the handshake) and then handed
to `TcpPair`, whose data path runs without the GIL on a non-blocking socket:
frames are a 48-byte header plus a payload read straight into the posted
buffer; small frames are read ahead into a staging buffer so that one read
brings header and payload.
"""

import hashlib
import hmac
import os
import queue
import secrets
import socket
import struct
import threading
import time

from libc.errno cimport errno, EINTR, EAGAIN
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset
from posix.unistd cimport close as c_close

from gloocy._core cimport (Pair, Xfer, Header, HEADER_SIZE, KIND_BYE,
                           KIND_P2P, KIND_ABORT, ABORT_MAX, XFER_DONE,
                           XFER_POSTED, XF_HEAP, init_header, should_park,
                           check_header, check_frame,
                           check_unmatched, raise_peer_abort, xfer_append,
                           xfer_unlink)

from gloocy.errors import PeerLostError, ProtocolError, RendezvousError

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len

cdef extern from "<sys/socket.h>" nogil:
    struct msghdr:
        void *msg_name
        unsigned int msg_namelen
        iovec *msg_iov
        size_t msg_iovlen
        void *msg_control
        size_t msg_controllen
        int msg_flags
    ssize_t recv(int fd, void *buf, size_t n, int flags)
    ssize_t sendmsg(int fd, const msghdr *msg, int flags)
    enum:
        MSG_NOSIGNAL
        MSG_DONTWAIT

cdef extern from "<poll.h>" nogil:
    enum:
        POLLIN
        POLLOUT
        POLLRDHUP

cdef enum:
    STAGE_SIZE = 65536      # read-ahead buffer
    DIRECT_MIN = 16384      # payload left at least this: read into place
    WOULD_BLOCK = -1


cdef class TcpPair(Pair):
    """A Pair over one connected TCP socket (takes ownership of `fd`)."""

    def __cinit__(self, int fd, int rank, int peer, str address=""):
        self.fd = fd
        self.rank = rank
        self.peer = peer
        self.address = address
        self.stage = <char *>malloc(STAGE_SIZE)
        if self.stage is NULL:
            raise MemoryError()

    def __dealloc__(self):
        if self.fd >= 0:
            c_close(self.fd)
        free(self.stage)

    cdef int lost(self, const char *what, int err) except -1 with gil:
        detail = what.decode()
        if err:
            detail += f": {os.strerror(err)}"
        raise PeerLostError(f"rank {self.rank}: lost peer rank {self.peer} "
                            f"({self.address}): {detail}", rank=self.peer)

    # -- sending -------------------------------------------------------------

    cdef int post_send(self, Xfer *x) except -1 nogil:
        if self.fd < 0:
            return self.lost("the connection is closed", 0)
        xfer_append(&self.send_head, &self.send_tail, x)
        if self.send_head is x:
            self.send_some()           # most small frames leave right here
        return 0

    cdef int send_some(self) except -1 nogil:
        cdef iovec iov[2]
        cdef msghdr msg
        cdef Xfer *x
        cdef ssize_t n
        cdef int err, moved = 0
        cdef int64_t total
        memset(&msg, 0, sizeof(msg))
        msg.msg_iov = iov
        while self.send_head is not NULL:
            x = self.send_head
            total = HEADER_SIZE + x.nbytes
            while x.done < total:
                if x.done < HEADER_SIZE:
                    iov[0].iov_base = <char *>&x.hdr + x.done
                    iov[0].iov_len = HEADER_SIZE - x.done
                    iov[1].iov_base = x.buf
                    iov[1].iov_len = x.nbytes
                    msg.msg_iovlen = 2 if x.nbytes else 1
                else:
                    iov[0].iov_base = x.buf + (x.done - HEADER_SIZE)
                    iov[0].iov_len = total - x.done
                    msg.msg_iovlen = 1
                n = sendmsg(self.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT)
                if n < 0:
                    err = errno
                    if err == EINTR:
                        continue
                    if err == EAGAIN:
                        return moved
                    return self.lost("send failed", err)
                x.done += n
                moved = 1
            self.send_head = x.next
            if self.send_head is NULL:
                self.send_tail = NULL
            x.next = NULL
            x.state = XFER_DONE
        return moved

    # -- receiving -----------------------------------------------------------

    cdef int post_recv(self, Xfer *x) except -1 nogil:
        if self.fd < 0:
            return self.lost("the connection is closed", 0)
        # A frame that came first (stashed) is the oldest match: use it.
        cdef Xfer *u = self.find_unexpected(x, True)
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
            return 0
        x.next = NULL
        self.check_stash(x)
        if (self.peer_gone and not self.parked and self.in_hdr_got == 0
                and self.st_lo == self.st_hi):
            return self.lost("the peer has left (closed its communicator)", 0)
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
        any, else from the socket (straight into dst for large payloads).
        WOULD_BLOCK when nothing is there yet."""
        cdef ssize_t n
        cdef int err
        if self.st_lo < self.st_hi:
            n = min(need, self.st_hi - self.st_lo)
            memcpy(dst, self.stage + self.st_lo, n)
            self.st_lo += n
            return n
        if self.peer_gone:
            return WOULD_BLOCK
        direct = direct and need >= DIRECT_MIN
        while True:
            n = recv(self.fd, dst if direct else self.stage,
                     need if direct else STAGE_SIZE, 0)
            if n > 0:
                break
            if n == 0:
                self.peer_gone = True
                if (self.peer_said_bye and self.in_x is NULL
                        and self.in_hdr_got == 0 and self.recv_head is NULL):
                    return WOULD_BLOCK     # a clean goodbye, nothing pending
                if self.peer_said_bye:
                    return self.lost("the peer has left (closed its "
                                     "communicator) before sending what "
                                     "this rank waits for", 0)
                return self.lost("connection closed by the peer (did its "
                                 "process die?)", 0)
            err = errno
            if err == EINTR:
                continue
            if err == EAGAIN:
                return WOULD_BLOCK
            self.peer_gone = True
            return self.lost("receive failed", err)
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
                self.start_payload()
                continue
            x = self.in_x
            while x.done < x.nbytes:
                got = self.read_into(x.buf + x.done, x.nbytes - x.done, True)
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

    cdef int progress(self) except -1 nogil:
        cdef int moved = 0
        if self.fd < 0:
            return self.lost("the connection is closed", 0)
        if self.send_head is not NULL:
            moved = self.send_some()
        return self.recv_some() | moved

    cdef bint busy(self) noexcept nogil:
        return (self.send_head is not NULL or self.recv_head is not NULL
                or self.in_x is not NULL)

    cdef int wait_fd(self) noexcept nogil:
        return self.fd

    cdef short wait_events(self) noexcept nogil:
        cdef short ev = 0
        if self.fd < 0 or self.peer_gone:
            return 0
        if self.send_head is not NULL:
            ev |= POLLOUT
        if not self.parked:
            ev |= POLLIN | POLLRDHUP    # data, or a hang-up to notice
        return ev

    cdef int say_abort(self, bytes why) except -1:
        cdef Header h
        cdef bytes text = why[:ABORT_MAX]
        cdef iovec iov[2]
        cdef msghdr msg
        if (self.fd < 0 or self.peer_gone
                or (self.send_head is not NULL and self.send_head.done > 0)):
            return 0                      # mid-frame: the peer can't parse it
        init_header(&h)
        h.kind = KIND_ABORT
        h.length = len(text)
        memset(&msg, 0, sizeof(msg))
        iov[0].iov_base = &h
        iov[0].iov_len = HEADER_SIZE
        iov[1].iov_base = <char *>text
        iov[1].iov_len = len(text)
        msg.msg_iov = iov
        msg.msg_iovlen = 2
        sendmsg(self.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT)
        return 0

    cdef bint cancel_recv(self, Xfer *x) noexcept nogil:
        # Not in the queue: matched already (or never posted).
        return xfer_unlink(&self.recv_head, &self.recv_tail, x)

    cdef void abandon(self) noexcept nogil:
        self.send_head = self.send_tail = NULL
        self.recv_head = self.recv_tail = NULL
        self.in_x = NULL

    cdef int shutdown(self, bint clean) except -1:
        cdef Header bye
        if self.fd < 0:
            return 0
        if clean and not self.peer_gone and self.send_head is NULL:
            init_header(&bye)
            bye.kind = KIND_BYE
            _send_all_nowait(self.fd, <char *>&bye, HEADER_SIZE)
        c_close(self.fd)
        self.fd = -1
        self.closed = True
        self.abandon()
        return 0


cdef void _send_all_nowait(int fd, char *p, ssize_t n) noexcept nogil:
    cdef iovec iov
    cdef msghdr msg
    memset(&msg, 0, sizeof(msg))
    iov.iov_base = p
    iov.iov_len = n
    msg.msg_iov = &iov
    msg.msg_iovlen = 1
    sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT)


# -- connection set-up ---------------------------------------------------------
#
# Every rank listens on an ephemeral port of its interface and publishes
# host:port in the store; rank r connects to every lower rank and accepts the
# higher ones. The handshake proves both ends know the job secret:
#
#   connector -> HELLO: magic, version, its rank, wanted rank, size, job tag, nonce_c
#   acceptor  -> nonce_a, HMAC(secret, "acceptor"  | HELLO | nonce_a)
#   connector -> HMAC(secret, "connector" | HELLO | nonce_a)
#   acceptor  -> b"\x01" (accepted)
#
# A connection that fails any step is closed; the job goes on without it.

_HELLO = struct.Struct("<8sIiiI16s32s")
_HELLO_MAGIC = b"GLCYHELO"
_HELLO_VERSION = 1
_HANDSHAKE_TIMEOUT = 5.0      # per incoming connection: a stranger can't stall us long


def _mac(secret, label, *parts):
    return hmac.new(secret, label + b"".join(parts), hashlib.sha256).digest()


def _recv_exact(sock, n):
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ProtocolError("connection closed during the handshake")
        data += chunk
    return bytes(data)


def _job_tag(job):
    return hashlib.sha256(job.encode()).digest()[:16]


def _accept_one(sock, secret, rank, size, job):
    """Authenticate an incoming connection; returns the peer's rank."""
    hello = _recv_exact(sock, _HELLO.size)
    magic, version, peer, wanted, peer_size, tag, _nonce = _HELLO.unpack(hello)
    if magic != _HELLO_MAGIC or version != _HELLO_VERSION:
        raise ProtocolError("not a gloocy handshake")
    if wanted != rank or peer_size != size or tag != _job_tag(job):
        raise ProtocolError(f"handshake for another job or rank ({peer}->{wanted})")
    if not rank < peer < size:
        raise ProtocolError(f"rank {peer} should not connect to rank {rank}")
    nonce = secrets.token_bytes(32)
    sock.sendall(nonce + _mac(secret, b"acceptor", hello, nonce))
    proof = _recv_exact(sock, 32)
    if not hmac.compare_digest(proof, _mac(secret, b"connector", hello, nonce)):
        raise ProtocolError(f"rank {peer} failed authentication")
    sock.sendall(b"\x01")
    return peer


def _connect_one(addr, secret, rank, peer, size, job, deadline):
    """Connect to `peer` at (host, port) and authenticate both ways."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RendezvousError(f"rank {rank}: could not connect to rank "
                                  f"{peer} at {_fmt(addr)} before the deadline")
        try:
            sock = socket.create_connection(addr, timeout=min(left, 5.0))
            break
        except (ConnectionRefusedError, socket.timeout, OSError):
            time.sleep(min(0.05, max(left, 0)))
    try:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        hello = _HELLO.pack(_HELLO_MAGIC, _HELLO_VERSION, rank, peer, size,
                            _job_tag(job), secrets.token_bytes(32))
        sock.sendall(hello)
        reply = _recv_exact(sock, 64)
        nonce, mac = reply[:32], reply[32:]
        if not hmac.compare_digest(mac, _mac(secret, b"acceptor", hello, nonce)):
            raise ProtocolError(f"rank {rank}: the process at {_fmt(addr)} "
                                f"failed authentication as rank {peer}")
        sock.sendall(_mac(secret, b"connector", hello, nonce))
        if _recv_exact(sock, 1) != b"\x01":
            raise ProtocolError(f"rank {peer} refused the handshake")
        return sock
    except BaseException:
        sock.close()
        raise


def _fmt(addr):
    host, port = addr[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _parse_addr(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def _tune(sock):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)


def connect_mesh(int rank, int size, bytes secret, publish, lookup, *,
                 str host="127.0.0.1", int port=0, str advertise=None,
                 str job="", double timeout=300.0):
    """Connect this rank to every other one; returns a list of TcpPair
    indexed by rank (None at `rank`). We listen on host:port (port 0: any
    free one) and `publish(address)` makes "host:port", or `advertise` when
    given (a forwarded address), known to the others (a store, an
    allgather...); `lookup(peer, timeout)` returns a peer's."""
    deadline = time.monotonic() + timeout
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((host, port))
        except OSError as e:
            raise RendezvousError(f"rank {rank}: cannot listen on "
                                  f"{_fmt((host, port))}: {e.strerror}") from None
        listener.listen(max(16, size))
        publish(advertise or _fmt(listener.getsockname()))
    except BaseException:
        listener.close()
        raise

    socks = {}
    failure = []

    def accept_higher():
        # Each incoming connection is authenticated in a thread of its own,
        # so a stranger that connects and stays silent delays nobody.
        missing = set(range(rank + 1, size))
        done = queue.SimpleQueue()

        def handshake(sock, addr):
            try:
                sock.settimeout(_HANDSHAKE_TIMEOUT)
                done.put((_accept_one(sock, secret, rank, size, job), sock,
                          _fmt(addr)))
            except (OSError, ProtocolError, struct.error):
                sock.close()              # a stranger; the job goes on

        try:
            while missing:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RendezvousError(
                        f"rank {rank}: rank(s) {sorted(missing)} did not "
                        f"connect before the deadline")
                listener.settimeout(min(left, 0.05))
                try:
                    sock, addr = listener.accept()
                    threading.Thread(target=handshake, args=(sock, addr),
                                     daemon=True).start()
                except socket.timeout:
                    pass
                while not done.empty():
                    peer, sock, address = done.get()
                    if peer in missing:
                        missing.discard(peer)
                        socks[peer] = (sock, address)
                    else:
                        sock.close()      # a second claim to a rank
        except BaseException as e:
            failure.append(e)

    acceptor = threading.Thread(target=accept_higher, daemon=True,
                                name=f"gloocy-accept-{rank}")
    acceptor.start()
    try:
        for peer in range(rank):
            addr = _parse_addr(lookup(peer, max(deadline - time.monotonic(),
                                                0.001)))
            socks[peer] = (_connect_one(addr, secret, rank, peer, size, job,
                                        deadline), _fmt(addr))
        acceptor.join()
        if failure:
            raise failure[0]
        pairs = [None] * size
        for peer, (sock, address) in socks.items():
            _tune(sock)
            pairs[peer] = TcpPair(sock.detach(), rank, peer, address)
        return pairs
    except BaseException:
        for sock, _ in socks.values():
            sock.close()
        raise
    finally:
        listener.close()
