# cython: language_level=3
"""TCP transport: one connection per peer.

Connections are set up and authenticated in Python (`handshake.py`,
`listener.py`) and then handed to `TcpPair`, whose data path (framing in
_stream.pyx) runs without the GIL on a non-blocking socket.

The set-up's socket calls are here too (`connect_now`, `accept_now`,
`recv_now`, `send_now`, `close_now`, `wait_fd`): non-blocking, they keep the
GIL, unlike Python's socket methods, which release it around every call.
A process with hundreds of rank threads (thread worlds at scale) pays a
GIL hand-off for each release (a wake-up and a context switch, often a wait
behind other threads): a dial is answered at one GIL hold per batch of
ready sockets, and a dial waits (`wait_fd`, without the GIL) only for its
peer's answers: from its HELLO on in one stretch (`DialAuth`: the
listener's challenge, our proof computed in C, its verdict), so that it
takes the GIL back once.
"""

import hmac
import os
import socket

from libc.errno cimport errno, EINTR, EAGAIN, ECONNRESET, EPIPE, EINPROGRESS
from libc.stdlib cimport malloc, free
from libc.string cimport memset, memcmp, memcpy
from posix.unistd cimport close as c_close
from cpython.bytes cimport PyBytes_FromStringAndSize

from gloocy.transport._stream cimport StreamPair, iovec, WOULD_BLOCK

include "_hmac.pxi"


# A dial's waits without the GIL (DialAuth.run, wait_fd) take it back
# through a queue, as _core's waits do (see gloocy/_gil_queue.h: with
# hundreds of rank threads in a process, each waiter for the GIL itself
# wakes every 5 ms). This extension's copy of the queue counts the rank
# connectors living in the process (lazy.Connector: `gil_queue_ranks`).
cdef extern from "../_gil_queue.h":
    int gloocy_gil_queue_init()
    int gloocy_gil_queue_contexts     # here: rank connectors alive in this process

if gloocy_gil_queue_init() != 0:
    raise OSError("pthread_atfork failed")


def gil_queue_ranks(int change):
    """A rank connector of this process begins (+1) or ends (-1): from 16
    on, waits here take the GIL back in turn. Returns how many live now."""
    global gloocy_gil_queue_contexts
    gloocy_gil_queue_contexts += change
    return gloocy_gil_queue_contexts


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
    ssize_t send(int fd, const void *buf, size_t n, int flags)
    ssize_t sendmsg(int fd, const msghdr *msg, int flags)
    ctypedef unsigned int socklen_t
    ctypedef unsigned short sa_family_t
    struct sockaddr:
        sa_family_t sa_family
    struct sockaddr_storage:
        sa_family_t ss_family
    int c_socket "socket"(int domain, int type, int protocol)
    int connect(int fd, const sockaddr *addr, socklen_t n)
    int accept4(int fd, sockaddr *addr, socklen_t *n, int flags)
    int getsockname(int fd, sockaddr *addr, socklen_t *n)
    int getpeername(int fd, sockaddr *addr, socklen_t *n)
    int getsockopt(int fd, int level, int name, void *val, socklen_t *n)
    int setsockopt(int fd, int level, int name, const void *val, socklen_t n)
    enum:
        MSG_NOSIGNAL
        MSG_DONTWAIT
        AF_INET
        AF_INET6
        SOCK_STREAM
        SOCK_NONBLOCK
        SOCK_CLOEXEC
        SOL_SOCKET
        SO_ERROR

cdef extern from "<netinet/in.h>" nogil:
    struct in_addr:
        unsigned int s_addr
    struct in6_addr:
        unsigned char s6_addr[16]
    struct sockaddr_in:
        sa_family_t sin_family
        unsigned short sin_port
        in_addr sin_addr
    struct sockaddr_in6:
        sa_family_t sin6_family
        unsigned short sin6_port
        in6_addr sin6_addr
    unsigned short htons(unsigned short)
    unsigned short ntohs(unsigned short)
    unsigned int ntohl(unsigned int)
    enum:
        IPPROTO_TCP

cdef extern from "<netinet/tcp.h>" nogil:
    enum:
        TCP_NODELAY

cdef extern from "<arpa/inet.h>" nogil:
    int inet_pton(int af, const char *src, void *dst)
    const char *inet_ntop(int af, const void *src, char *dst, socklen_t n)

cdef extern from "<sys/random.h>" nogil:
    ssize_t getrandom(void *buf, size_t n, unsigned int flags)

cdef extern from "<sys/epoll.h>" nogil:
    union epoll_data_t "epoll_data":
        int fd
    struct epoll_event:
        unsigned int events
        epoll_data_t data
    int epoll_ctl(int epfd, int op, int fd, epoll_event *event)
    enum:
        EPOLL_CTL_ADD
        EPOLL_CTL_DEL
        EPOLLIN

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    enum:
        POLLIN
        POLLOUT


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
    """Hand a connected socket (a socket object, or its fd: the pair owns
    it then) over to a TcpPair.

    With `dead_s` > 0, TCP keepalive finds a peer dead that answers nothing
    for `dead_s` seconds while we have no data in flight to it: the next
    call then fails at once with PeerLostError (see _keepalive). Not
    between two ends on this host: the kernel closes a dead process's
    connections itself, and probes over a loopback device swamped by
    thousands of rank threads get dropped, failing live connections."""
    cdef int fd, one = 1
    if isinstance(sock, int):
        fd = sock
        if dead_s > 0 and not _same_host(fd):
            with socket.socket(fileno=fd) as s:       # (rare: between hosts)
                _keepalive(s, dead_s)
                s.setblocking(False)
                s.detach()
    else:
        if dead_s > 0 and not _same_host(sock.fileno()):
            _keepalive(sock, dead_s)
        sock.setblocking(False)
        fd = sock.detach()
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one))
    return TcpPair(fd, rank, peer, address)


cdef bint _same_host(int fd):
    """Whether both ends of socket `fd` are on this host (a loopback
    address, or the peer's address is ours)."""
    cdef sockaddr_storage ours, theirs
    cdef socklen_t n1 = sizeof(ours), n2 = sizeof(theirs)
    cdef sockaddr_in *a
    cdef sockaddr_in6 *b
    cdef sockaddr_in6 *c
    cdef unsigned char *x
    if (getsockname(fd, <sockaddr *>&ours, &n1) != 0
            or getpeername(fd, <sockaddr *>&theirs, &n2) != 0
            or ours.ss_family != theirs.ss_family):
        return False
    if theirs.ss_family == AF_INET:
        a = <sockaddr_in *>&theirs
        return ((ntohl(a.sin_addr.s_addr) >> 24) == 127
                or a.sin_addr.s_addr == (<sockaddr_in *>&ours).sin_addr.s_addr)
    if theirs.ss_family == AF_INET6:
        b, c = <sockaddr_in6 *>&theirs, <sockaddr_in6 *>&ours
        x = b.sin6_addr.s6_addr
        if memcmp(x, c.sin6_addr.s6_addr, 16) == 0:
            return True
        if memcmp(x, b"\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1", 16) == 0:
            return True                             # ::1
        return (memcmp(x, b"\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0
                and x[12] == 127)                   # ::ffff:127.x.y.z
    return False


# -- the set-up's socket calls, keeping the GIL (see the module's comment) --

cdef _oserror(int err, str what):
    return OSError(err, f"{what}: {os.strerror(err)}")


def connect_now(str host, int port):
    """A non-blocking socket to `host` (an IP address) : `port`, connecting:
    its fd. The connection may still be in progress (see `connect_error`)."""
    cdef sockaddr_storage sa
    cdef sockaddr_in *a = <sockaddr_in *>&sa
    cdef sockaddr_in6 *b = <sockaddr_in6 *>&sa
    cdef socklen_t n
    cdef int fd, family, err
    cdef bytes h = host.encode()
    memset(&sa, 0, sizeof(sa))
    if inet_pton(AF_INET, h, &a.sin_addr) == 1:
        family, n = AF_INET, sizeof(sockaddr_in)
        a.sin_family, a.sin_port = AF_INET, htons(port)
    elif inet_pton(AF_INET6, h, &b.sin6_addr) == 1:
        family, n = AF_INET6, sizeof(sockaddr_in6)
        b.sin6_family, b.sin6_port = AF_INET6, htons(port)
    else:
        raise ValueError(f"{host!r} is not an IP address")
    fd = c_socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)
    if fd < 0:
        raise _oserror(errno, "socket")
    if connect(fd, <sockaddr *>&sa, n) != 0:
        err = errno
        if err != EINPROGRESS and err != EINTR:   # (EINTR: it goes on)
            c_close(fd)
            raise _oserror(err, "connect")
    return fd


def connect_error(int fd):
    """The error of a finished connect (SO_ERROR): OSError, or None."""
    cdef int err = 0
    cdef socklen_t n = sizeof(err)
    if getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n) != 0:
        err = errno
    return _oserror(err, "connect") if err else None


def accept_now(int fd):
    """A connection waiting at listening socket `fd` (non-blocking): (its
    fd, made non-blocking, and "host:port" of the peer), or None."""
    cdef sockaddr_storage sa
    cdef socklen_t n = sizeof(sa)
    cdef int got, err
    cdef char text[64]
    cdef int port
    while True:
        got = accept4(fd, <sockaddr *>&sa, &n, SOCK_NONBLOCK | SOCK_CLOEXEC)
        if got >= 0:
            break
        err = errno
        if err == EAGAIN:
            return None
        if err != EINTR:
            raise _oserror(err, "accept")
    if sa.ss_family == AF_INET6:
        inet_ntop(AF_INET6, &(<sockaddr_in6 *>&sa).sin6_addr, text, sizeof(text))
        port = ntohs((<sockaddr_in6 *>&sa).sin6_port)
        return got, f"[{text.decode()}]:{port}"
    inet_ntop(AF_INET, &(<sockaddr_in *>&sa).sin_addr, text, sizeof(text))
    port = ntohs((<sockaddr_in *>&sa).sin_port)
    return got, f"{text.decode()}:{port}"


def recv_now(int fd, Py_ssize_t n):
    """Up to n bytes that have come on `fd` (b"": the peer closed), or None
    (nothing yet). OSError if the connection failed."""
    cdef char buf[512]
    cdef ssize_t got
    cdef int err
    if n > <Py_ssize_t>sizeof(buf):
        n = sizeof(buf)
    while True:
        got = recv(fd, buf, n, MSG_DONTWAIT)
        if got >= 0:
            return PyBytes_FromStringAndSize(buf, got)
        err = errno
        if err == EAGAIN:
            return None
        if err != EINTR:
            raise _oserror(err, "recv")


def send_now(int fd, const unsigned char[::1] data):
    """Send what fits of `data` on `fd` now: the bytes sent (0: none fit,
    or the connection is still being made). OSError if it failed."""
    cdef ssize_t sent
    cdef int err
    if data.shape[0] == 0:
        return 0
    while True:
        sent = send(fd, &data[0], data.shape[0], MSG_DONTWAIT | MSG_NOSIGNAL)
        if sent >= 0:
            return sent
        err = errno
        if err == EAGAIN:
            return 0
        if err != EINTR:
            raise _oserror(err, "send")


def close_now(int fd):
    """Close `fd` (any unread bytes make the kernel reset the connection:
    for dials given up on)."""
    c_close(fd)


def random_now(Py_ssize_t n):
    """n random bytes from the kernel's generator, for nonces (as
    secrets.token_bytes, which lets the GIL go), n <= 256."""
    cdef unsigned char buf[256]
    cdef ssize_t got = 0, k
    if not 0 <= n <= 256:
        raise ValueError(f"random_now: n={n} is not within 0..256")
    while got < n:
        k = getrandom(buf + got, n - got, 0)
        if k < 0:
            if errno == EINTR:
                continue
            raise _oserror(errno, "getrandom")
        got += k
    return PyBytes_FromStringAndSize(<char *>buf, n)


def watch_now(int epfd, int fd, bint on):
    """Have epoll `epfd` watch `fd` for reading (`on`), or no more (as
    select.epoll's register/unregister, but keeping the GIL)."""
    cdef epoll_event ev
    memset(&ev, 0, sizeof(ev))
    ev.events = EPOLLIN
    ev.data.fd = fd
    if epoll_ctl(epfd, EPOLL_CTL_ADD if on else EPOLL_CTL_DEL, fd, &ev) != 0:
        raise _oserror(errno, "epoll_ctl")


def wait_fd(int fd, bint out, double seconds):
    """Wait (without the GIL) until `fd` is readable (or writable, with
    `out`), for `seconds` at most: whether it is."""
    cdef pollfd p
    cdef int ms = <int>(seconds * 1000) + 1 if seconds > 0 else 0
    cdef int r
    p.fd, p.events, p.revents = fd, POLLOUT if out else POLLIN, 0
    with nogil:
        r = poll(&p, 1, ms)
    return r > 0


cdef extern from "<time.h>" nogil:
    struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec *ts)
    enum: CLOCK_MONOTONIC

cdef double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef enum:
    _CHALLENGE_BYTES = 64         # the listener's nonce and its proof
    _MAC_BYTES = 32
    _NEEDS_MACS = 2               # DialAuth._run: no C HMAC, Python's instead


cdef class DialAuth:
    """The dialer's side of the handshake after its HELLO (handshake.py):
    read the listener's nonce and proof, check it, send ours (and
    `after`), read the verdict, all in one stretch without the GIL (the
    HMACs by libcrypto: _hmac.pxi), so a dial takes the GIL back once, not after
    each of its two waits. `run(seconds)` goes as far as it can within
    `seconds`: 1 done (see `authentic`, `verdict`), 0 not yet, -1 the
    listener hung up; OSError if the connection failed."""

    cdef int fd
    cdef bytes secret, hello          # the job's secret; our HELLO's bytes
    cdef uint8_t reply[_CHALLENGE_BYTES]   # the listener's nonce + proof
    cdef int got                      # bytes of `reply` read
    cdef uint8_t *out                 # our proof, then `after`
    cdef Py_ssize_t out_len, sent
    cdef int state                    # 0 reading, 1 sending, 2 the verdict, 3 done
    cdef readonly bint authentic      # the listener proved it knows the secret
    cdef readonly int verdict         # its verdict byte (-1: none read)

    def __cinit__(self, int fd, bytes secret, bytes hello, bytes after=b""):
        self.fd, self.secret, self.hello = fd, secret, hello
        self.out_len = _MAC_BYTES + len(after)
        self.out = <uint8_t *>malloc(self.out_len)
        if self.out == NULL:
            raise MemoryError()
        memcpy(self.out + _MAC_BYTES, <const char *>after, len(after))
        self.verdict = -1

    def __dealloc__(self):
        free(self.out)

    def run(self, double seconds):
        cdef int r, err = 0
        cdef const uint8_t *key = <const uint8_t *><const char *>self.secret
        cdef const uint8_t *hello = <const uint8_t *><const char *>self.hello
        cdef size_t klen = len(self.secret), hlen = len(self.hello)
        cdef double until = _now() + seconds
        with nogil:
            r = self._run(key, klen, hello, hlen, until, &err)
        if r == _NEEDS_MACS:              # no libcrypto: Python's hmac
            self._macs_in_python()
            with nogil:
                r = self._run(key, klen, hello, hlen, until, &err)
        if err:
            raise _oserror(err, "send" if self.state == 1 else "recv")
        return r

    def _macs_in_python(self):
        nonce = PyBytes_FromStringAndSize(<char *>self.reply, _MAC_BYTES)
        theirs = PyBytes_FromStringAndSize(<char *>self.reply + _MAC_BYTES, _MAC_BYTES)
        mac = hmac.digest(self.secret, b"acceptor" + self.hello + nonce, "sha256")
        self.authentic = hmac.compare_digest(mac, theirs)
        if not self.authentic:
            self.state = 3
            return
        ours = hmac.digest(self.secret, b"connector" + self.hello + nonce, "sha256")
        memcpy(self.out, <const char *>ours, _MAC_BYTES)
        self.state = 1

    cdef int _run(self, const uint8_t *key, size_t klen, const uint8_t *hello,
                  size_t hlen, double until, int *err) noexcept nogil:
        cdef uint8_t mac[_MAC_BYTES]
        cdef uint8_t one
        cdef ssize_t n
        cdef pollfd p
        cdef double left
        cdef int e
        while self.state != 3:
            if self.state == 0:
                n = recv(self.fd, self.reply + self.got, _CHALLENGE_BYTES - self.got,
                         MSG_DONTWAIT)
            elif self.state == 1:
                n = send(self.fd, self.out + self.sent, self.out_len - self.sent,
                         MSG_DONTWAIT | MSG_NOSIGNAL)
            else:
                n = recv(self.fd, &one, 1, MSG_DONTWAIT)
            if n == 0 and self.state != 1:
                return -1
            if n < 0:
                e = errno
                if e == EINTR:
                    continue
                if e != EAGAIN:
                    err[0] = e
                    return 0
                left = until - _now()
                if left <= 0:
                    return 0
                p.fd, p.revents = self.fd, 0
                p.events = POLLOUT if self.state == 1 else POLLIN
                poll(&p, 1, <int>(left * 1000) + 1)
                continue
            if self.state == 0:
                self.got += n
                if self.got < _CHALLENGE_BYTES:
                    continue
                # the listener's proof: HMAC(secret, "acceptor" | HELLO | nonce)
                if not _hmac_sha256(key, klen, <const uint8_t *>b"acceptor", 8,
                                    hello, hlen, self.reply, _MAC_BYTES, mac):
                    return _NEEDS_MACS
                self.authentic = _same(mac, self.reply + _MAC_BYTES, _MAC_BYTES)
                if not self.authentic:
                    self.state = 3
                    return 1
                if not _hmac_sha256(key, klen, <const uint8_t *>b"connector", 9,
                                    hello, hlen, self.reply, _MAC_BYTES, self.out):
                    return _NEEDS_MACS
                self.state = 1
            elif self.state == 1:
                self.sent += n
                if self.sent == self.out_len:
                    self.state = 2
            else:
                self.verdict = one
                self.state = 3
        return 1


cdef bint _same(const uint8_t *a, const uint8_t *b, size_t n) noexcept nogil:
    """Whether a[:n] == b[:n], in time independent of where they differ."""
    cdef uint8_t d = 0
    cdef size_t i
    for i in range(n):
        d |= a[i] ^ b[i]
    return d == 0



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
