# cython: language_level=3
"""TCP transport: one connection per peer.

Connections are set up and authenticated in Python (`handshake.py`) and
then handed to `TcpPair`, whose data path (framing in _stream.pyx) runs
without the GIL on a non-blocking socket.
"""

import ipaddress
import socket

from libc.errno cimport errno, EINTR, EAGAIN, ECONNRESET, EPIPE
from libc.string cimport memset
from posix.unistd cimport close as c_close

from gloocy.transport._stream cimport StreamPair, iovec, WOULD_BLOCK


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


def tcp_pair(sock, int rank, int peer, str address, *, int dead_s=0):
    """Hand a connected socket over to a TcpPair (which owns it then).

    With `dead_s` > 0, TCP keepalive finds a peer dead that answers nothing
    for `dead_s` seconds while we have no data in flight to it: the next
    call then fails at once with PeerLostError (see _keepalive). Not
    between two ends on this host: the kernel closes a dead process's
    connections itself, and probes over a loopback device swamped by
    thousands of rank threads get dropped, failing live connections."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if dead_s > 0 and not _same_host(sock):
        _keepalive(sock, dead_s)
    sock.setblocking(False)
    return TcpPair(sock.detach(), rank, peer, address)


def _same_host(sock):
    """Whether both ends of `sock` are on this host (a loopback address,
    or the peer's address is ours)."""
    try:
        ours, theirs = sock.getsockname()[0], sock.getpeername()[0]
    except (OSError, IndexError, TypeError):
        return False
    return theirs == ours or ipaddress.ip_address(theirs.split("%")[0]).is_loopback


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
