# cython: language_level=3
"""TCP transport: one authenticated connection per peer, full mesh.

Connections are set up in Python (the store, the handshake) and then handed
to `TcpPair`, whose data path (framing in _stream.pyx) runs without the GIL
on a non-blocking socket.
"""

import hashlib
import hmac
import queue
import secrets
import socket
import struct
import threading
import time

from libc.errno cimport errno, EINTR, EAGAIN, ECONNRESET, EPIPE
from libc.string cimport memset
from posix.unistd cimport close as c_close

from gloocy.transport._stream cimport StreamPair, iovec, WOULD_BLOCK

from gloocy.errors import ProtocolError, RendezvousError

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


cdef class TcpPair(StreamPair):
    """A Pair over one connected TCP socket (takes ownership of `fd`)."""

    def __cinit__(self, int fd, int rank, int peer, str address=""):
        self.fd = fd
        self.rank = rank
        self.peer = peer
        self.address = address

    def __dealloc__(self):
        if self.fd >= 0:
            c_close(self.fd)

    cdef ssize_t stream_send(self, iovec *iov, int n) except -2 nogil:
        cdef msghdr msg
        cdef ssize_t sent
        cdef int err
        memset(&msg, 0, sizeof(msg))
        msg.msg_iov = iov
        msg.msg_iovlen = n
        while True:
            sent = sendmsg(self.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT)
            if sent >= 0:
                return sent
            err = errno
            if err == EAGAIN:
                return WOULD_BLOCK
            if err == EPIPE or err == ECONNRESET:
                self.send_err = err       # raised by progress() after reading
                return WOULD_BLOCK
            if err != EINTR:
                return self.lost("send failed", err)

    cdef ssize_t stream_recv(self, char *dst, size_t n) except -2 nogil:
        cdef ssize_t got
        cdef int err
        while True:
            got = recv(self.fd, dst, n, 0)
            if got >= 0:
                return got
            err = errno
            if err == EAGAIN:
                return WOULD_BLOCK
            if err == ECONNRESET and self.peer_said_bye:
                return 0                  # it said goodbye: the reset is its exit
            if err != EINTR:
                self.peer_gone = True
                return self.lost("receive failed", err)

    cdef void stream_close(self) noexcept nogil:
        # Closing a socket with unread bytes makes the kernel send a reset,
        # which can destroy what the peer has not read yet: read them first.
        cdef char sink[4096]
        cdef int i
        for i in range(64):
            if recv(self.fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0:
                break
        c_close(self.fd)


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


def recv_exact(sock, n, what="the handshake"):
    """Exactly n bytes from a blocking socket; ProtocolError if it closes."""
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ProtocolError(f"connection closed while reading {what}")
        data += chunk
    return bytes(data)


def _job_tag(job):
    return hashlib.sha256(job.encode()).digest()[:16]


def _accept_one(sock, secret, rank, size, job):
    """Authenticate an incoming connection; returns the peer's rank."""
    hello = recv_exact(sock, _HELLO.size)
    magic, version, peer, wanted, peer_size, tag, _nonce = _HELLO.unpack(hello)
    if magic != _HELLO_MAGIC or version != _HELLO_VERSION:
        raise ProtocolError("not a gloocy handshake")
    if wanted != rank or peer_size != size or tag != _job_tag(job):
        raise ProtocolError(f"handshake for another job or rank ({peer}->{wanted})")
    if not rank < peer < size:
        raise ProtocolError(f"rank {peer} should not connect to rank {rank}")
    nonce = secrets.token_bytes(32)
    sock.sendall(nonce + _mac(secret, b"acceptor", hello, nonce))
    proof = recv_exact(sock, 32)
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
    who = f"rank {rank}: the process at {_fmt(addr)}"
    hello = _HELLO.pack(_HELLO_MAGIC, _HELLO_VERSION, rank, peer, size,
                        _job_tag(job), secrets.token_bytes(32))
    authentic = accepted = False
    try:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(hello)
        reply = recv_exact(sock, 64)
        nonce, mac = reply[:32], reply[32:]
        authentic = hmac.compare_digest(mac, _mac(secret, b"acceptor", hello, nonce))
        if authentic:
            sock.sendall(_mac(secret, b"connector", hello, nonce))
            accepted = recv_exact(sock, 1) == b"\x01"
    except socket.timeout:            # a listener that stays silent
        sock.close()
        raise RendezvousError(f"{who} did not finish the handshake as rank "
                              f"{peer} before the deadline") from None
    except (OSError, ProtocolError) as e:   # it hung up or reset
        sock.close()
        raise ProtocolError(f"{who} broke off the handshake as rank {peer} "
                            f"({e})") from None
    except BaseException:
        sock.close()
        raise
    if not accepted:
        sock.close()
        raise ProtocolError(f"{who} failed authentication as rank {peer}"
                            if not authentic else
                            f"{who} refused the handshake as rank {peer}")
    return sock


def _fmt(addr):
    host, port = addr[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _parse_addr(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def tcp_pair(sock, int rank, int peer, str address, *, int dead_s=0):
    """Hand a connected socket over to a TcpPair (which owns it then).

    With `dead_s` > 0, TCP keepalive finds a peer dead that answers nothing
    for `dead_s` seconds while we have no data in flight to it: the next
    call then fails at once with PeerLostError (see _keepalive)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if dead_s > 0:
        _keepalive(sock, dead_s)
    sock.setblocking(False)
    return TcpPair(sock.detach(), rank, peer, address)


def _keepalive(sock, int dead_s):
    """Probe a connection once nothing has arrived on it for half of
    `dead_s`, then up to 5 times over the other half; the kernel fails the
    socket (ETIMEDOUT) when none is answered, at most `dead_s` seconds
    after the last packet from the peer. A live peer's kernel answers even
    while its process is busy or stopped. (TCP_USER_TIMEOUT is not set:
    it would also fail a connection whose peer is alive but does not read
    for that long -- a zero window -- which a rank late for a collective
    causes routinely.)"""
    cdef int idle = max(1, dead_s // 2)
    cdef int count = max(1, min(5, dead_s - idle))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL,
                    max(1, (dead_s - idle) // count))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)


def connect_sockets(int rank, int size, bytes secret, publish, lookup, *,
                 str host="127.0.0.1", int port=0, str advertise=None,
                 str job="", double timeout=300.0):
    """Connect this rank to every other one; returns {peer: (socket,
    "host:port")} of authenticated blocking sockets. We listen on host:port (port 0: any
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
        return socks
    except BaseException:
        for sock, _ in socks.values():
            sock.close()
        raise
    finally:
        listener.close()
