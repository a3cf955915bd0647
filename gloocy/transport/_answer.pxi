# The listener's first two steps of every dial, in C on a thread of its own
# (listener.py's Listener uses it where libcrypto could be opened): accept,
# read the HELLO, check it names a rank registered here, answer with our
# nonce and proof, read the dialer's proof and check it. Only what needs the
# ranks' Python state goes to the listener's Python thread, as events in a
# queue it drains in one hold of the GIL (an eventfd wakes it): a dial
# proven (its fd: the verdict, ACCEPT and the host ids are Python's), and
# the rarer dial given up after its HELLO (hung up, failed authentication,
# too slow). The dials coming (their HELLO answered, no verdict yet) are
# counted here, per rank and peer (`coming`: Connector.pair waits for one
# rather than dial too), until Python's verdict (`judged`) or given up.
# Strangers (bad HELLOs, dials for no rank of ours) are closed here, unseen
# by Python. The wire is handshake.py's, unchanged. Included by _tcp.pyx.

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)
    enum:
        EFD_CLOEXEC
        EFD_NONBLOCK

cdef extern from "<unistd.h>" nogil:
    ssize_t c_read "read"(int fd, void *buf, size_t n)
    ssize_t c_write "write"(int fd, const void *buf, size_t n)

from libc.stdlib cimport realloc
from libc.stdint cimport uint32_t, int32_t, int64_t, uint64_t
from libc.stdio cimport snprintf

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef unsigned long pthread_t
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *m)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)
    int pthread_create(pthread_t *t, const void *attr, void *(*run)(void *) noexcept nogil,
                       void *arg)
    int pthread_join(pthread_t t, void **ret)

cdef extern from "<sys/epoll.h>" nogil:
    union epoll_ptr_t "epoll_data":
        void *ptr
    struct epoll_ptr_event "epoll_event":
        unsigned int events
        epoll_ptr_t data
    int epoll_create1(int flags)
    int epoll_wait(int epfd, epoll_ptr_event *events, int n, int timeout)
    enum:
        EPOLL_CLOEXEC

cdef extern from "<time.h>" nogil:
    int nanosleep(const timespec *req, timespec *rem)


cdef enum:
    _HELLO_BYTES = 72             # handshake._HELLO: "<8sIiiI16s32s"
    _NONCE_BYTES = 32
    _ADDRESS_BYTES = 64
    _GIVEN_UP = 1                 # the events (see the header)
    _PROVEN = 2

cdef struct _Greeting:            # a dial being answered
    int fd
    int proving                   # 0: reading its HELLO, 1: its proof
    int got                       # bytes of the message read so far
    int32_t peer, wanted          # the dialer's rank, the rank it wants
    double deadline               # dropped if not proven by then
    uint8_t hello[_HELLO_BYTES]
    uint8_t nonce[_NONCE_BYTES]   # ours
    uint8_t proof[_MAC_BYTES]     # the dialer's
    char address[_ADDRESS_BYTES]  # "host:port" of the dialer
    _Greeting *prev
    _Greeting *next

cdef struct _Event:
    int kind, fd                  # fd: the proven dial's, now Python's
    int32_t wanted, peer
    char address[_ADDRESS_BYTES]

cdef struct _Rank:                # a rank of this process that takes dials
    uint8_t *secret               # NULL: none registered
    size_t klen
    int64_t size                  # its job's size
    int32_t *coming               # the peers of its dials coming, once per dial
    int ncoming, cap_coming


cdef class Answerer:
    """A thread answering the first two steps of the dials at listening
    socket `listen_fd` (not owned) for the ranks registered, of the job of
    tag `tag` (see the header). `event_fd` turns readable when `take()`
    has events; `stop()` ends the thread (its unproven dials are closed)."""

    cdef int listen_fd, epfd, stop_fd
    cdef readonly int event_fd
    cdef uint8_t tag[16]
    cdef double answer_s          # how long a dial may take to be proven
    cdef pthread_t thread
    cdef bint running
    cdef pthread_mutex_t lock     # ranks, events
    cdef _Rank *ranks
    cdef Py_ssize_t nranks
    cdef _Event *events
    cdef Py_ssize_t nevents, cap_events
    cdef _Greeting *dials         # the dials being answered (the thread's own)
    cdef int listen_marker, stop_marker   # (their addresses tag epoll's events)

    def __cinit__(self, int listen_fd, bytes tag, double answer_s):
        cdef epoll_ptr_event ev
        if len(tag) != 16:
            raise ValueError("tag: 16 bytes")
        memcpy(self.tag, <const char *>tag, 16)
        self.listen_fd, self.answer_s = listen_fd, answer_s
        self.epfd = self.stop_fd = self.event_fd = -1
        pthread_mutex_init(&self.lock, NULL)
        self.epfd = epoll_create1(EPOLL_CLOEXEC)
        self.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)
        self.event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)
        if self.epfd < 0 or self.stop_fd < 0 or self.event_fd < 0:
            raise _oserror(errno, "epoll/eventfd")
        memset(&ev, 0, sizeof(ev))
        ev.events = EPOLLIN
        ev.data.ptr = &self.listen_marker
        if epoll_ctl(self.epfd, EPOLL_CTL_ADD, listen_fd, <epoll_event *>&ev) != 0:
            raise _oserror(errno, "epoll_ctl")
        ev.data.ptr = &self.stop_marker
        if epoll_ctl(self.epfd, EPOLL_CTL_ADD, self.stop_fd, <epoll_event *>&ev) != 0:
            raise _oserror(errno, "epoll_ctl")
        if pthread_create(&self.thread, NULL, _answer_main, <void *>self) != 0:
            raise OSError("pthread_create failed")
        self.running = True

    def __dealloc__(self):
        self.close()
        for i in range(self.nranks):
            _forget(&self.ranks[i])
        free(self.ranks)
        free(self.events)
        pthread_mutex_destroy(&self.lock)

    def register(self, int rank, bytes secret, int64_t size, double answer_s):
        """Rank `rank` (of a job of `size` ranks, knowing `secret`) takes
        dials here; a dial may take `answer_s` to be proven, at least."""
        cdef uint8_t *key = <uint8_t *>malloc(len(secret) + 1)
        cdef _Rank *grown
        cdef Py_ssize_t n
        if rank < 0 or key == NULL:
            free(key)
            raise ValueError(f"rank {rank}") if rank < 0 else MemoryError()
        memcpy(key, <const char *>secret, len(secret))
        pthread_mutex_lock(&self.lock)
        if rank >= self.nranks:
            n = max(rank + 1, 2 * self.nranks)
            grown = <_Rank *>realloc(self.ranks, n * sizeof(_Rank))
            if grown == NULL:
                pthread_mutex_unlock(&self.lock)
                free(key)
                raise MemoryError()
            memset(grown + self.nranks, 0, (n - self.nranks) * sizeof(_Rank))
            self.ranks, self.nranks = grown, n
        _forget(&self.ranks[rank])
        self.ranks[rank].secret, self.ranks[rank].klen = key, len(secret)
        self.ranks[rank].size = size
        self.answer_s = max(self.answer_s, answer_s)
        pthread_mutex_unlock(&self.lock)

    def unregister(self, int rank):
        pthread_mutex_lock(&self.lock)
        if 0 <= rank < self.nranks:
            _forget(&self.ranks[rank])
        pthread_mutex_unlock(&self.lock)

    def coming(self, int rank, int peer):
        """Whether a dial from `peer` to `rank` is coming: its HELLO was
        answered, no verdict yet."""
        cdef _Rank *r
        cdef bint found = False
        pthread_mutex_lock(&self.lock)
        r = self._rank(rank)
        if r != NULL:
            found = _find(r, peer) >= 0
        pthread_mutex_unlock(&self.lock)
        return found

    def judged(self, int rank, int peer):
        """A proven dial from `peer` to `rank` is judged: no longer coming."""
        pthread_mutex_lock(&self.lock)
        self._uncount(rank, peer)
        pthread_mutex_unlock(&self.lock)

    def take(self):
        """The events since the last take, in order: (kind, fd, wanted
        rank, peer, address); kind is "given up" or "proven" (the fd is the
        caller's then)."""
        cdef uint64_t count
        cdef _Event *got
        cdef Py_ssize_t n, i
        c_read(self.event_fd, &count, sizeof(count))    # (before the queue: see _post)
        pthread_mutex_lock(&self.lock)
        got, n = self.events, self.nevents
        self.events, self.nevents, self.cap_events = NULL, 0, 0
        pthread_mutex_unlock(&self.lock)
        try:
            return [(_KINDS[got[i].kind], got[i].fd, got[i].wanted, got[i].peer,
                     got[i].address.decode()) for i in range(n)]
        finally:
            free(got)

    def stop(self):
        """End the thread (closing the dials it had not proven); wakes the
        reader of `event_fd`. Once."""
        self._stop()

    def close(self):
        """stop(), and close our fds (`event_fd` too: its reader's to call)."""
        self._stop()
        for fd in (self.epfd, self.stop_fd, self.event_fd):
            if fd >= 0:
                c_close(fd)
        self.epfd = self.stop_fd = self.event_fd = -1

    cdef void _stop(self) noexcept:
        cdef uint64_t one = 1
        if not self.running:
            return
        self.running = False
        c_write(self.stop_fd, &one, sizeof(one))
        with nogil:
            pthread_join(self.thread, NULL)
        c_write(self.event_fd, &one, sizeof(one))

    # -- the thread (no GIL) ----------------------------------------------------

    cdef void _serve(self) noexcept nogil:
        cdef epoll_ptr_event evs[64]
        cdef int n, i, ms
        cdef double now, soonest
        cdef _Greeting *g
        cdef _Greeting *nxt
        while True:
            soonest = _now() + 1.0
            g = self.dials
            while g != NULL:
                if g.deadline < soonest:
                    soonest = g.deadline
                g = g.next
            ms = <int>((soonest - _now()) * 1000) + 1
            n = epoll_wait(self.epfd, evs, 64, ms if ms > 0 else 0)
            for i in range(n if n > 0 else 0):
                if evs[i].data.ptr == &self.stop_marker:
                    self._drop_all()
                    return
                if evs[i].data.ptr == &self.listen_marker:
                    self._accept()
                else:
                    self._step(<_Greeting *>evs[i].data.ptr)
            now = _now()
            g = self.dials
            while g != NULL:
                nxt = g.next
                if g.deadline <= now:
                    self._drop(g)
                g = nxt

    cdef void _accept(self) noexcept nogil:
        cdef sockaddr_storage sa
        cdef socklen_t n
        cdef int fd, err
        cdef timespec pause
        cdef _Greeting *g
        cdef epoll_ptr_event ev
        while True:
            n = sizeof(sa)
            fd = accept4(self.listen_fd, <sockaddr *>&sa, &n, SOCK_NONBLOCK | SOCK_CLOEXEC)
            if fd < 0:
                err = errno
                if err == EINTR:
                    continue
                if err != EAGAIN:     # out of fds: the dialers retry or time out
                    pause.tv_sec, pause.tv_nsec = 0, 10000000
                    nanosleep(&pause, NULL)
                return
            g = <_Greeting *>malloc(sizeof(_Greeting))
            if g == NULL:
                c_close(fd)
                return
            memset(g, 0, sizeof(_Greeting))
            g.fd = fd
            g.deadline = _now() + self.answer_s
            _format_address(&sa, g.address)
            memset(&ev, 0, sizeof(ev))
            ev.events = EPOLLIN
            ev.data.ptr = g
            if epoll_ctl(self.epfd, EPOLL_CTL_ADD, fd, <epoll_event *>&ev) != 0:
                c_close(fd)
                free(g)
                continue
            g.next = self.dials
            if self.dials != NULL:
                self.dials.prev = g
            self.dials = g
            self._step(g)             # its HELLO may be here already

    cdef void _step(self, _Greeting *g) noexcept nogil:
        """Read what has come on dial `g`, answering each message complete."""
        cdef ssize_t n
        cdef int need
        cdef uint8_t *into
        while True:
            need = _MAC_BYTES if g.proving else _HELLO_BYTES
            into = &g.proof[0] if g.proving else &g.hello[0]
            n = recv(g.fd, into + g.got, need - g.got, MSG_DONTWAIT)
            if n < 0 and errno == EINTR:
                continue
            if n < 0 and errno == EAGAIN:
                return                # the rest later
            if n <= 0:                # hung up, or failed
                self._drop(g)
                return
            g.got += n
            if g.got < need:
                continue
            g.got = 0
            if not g.proving:
                if not self._challenge(g):
                    self._drop(g)
                    return
                g.proving = 1
            else:
                if not self._proven(g):
                    self._drop(g)
                    return
                self._unlink(g)
                epoll_ctl(self.epfd, EPOLL_CTL_DEL, g.fd, NULL)
                self._post(_PROVEN, g.fd, g)
                free(g)
                return

    cdef bint _challenge(self, _Greeting *g) noexcept nogil:
        """A HELLO read: whether it is one for a rank of ours (handshake.
        parse_hello; Listener's checks), answered with our nonce and proof."""
        cdef uint32_t version, size
        cdef uint8_t out[_NONCE_BYTES + _MAC_BYTES]
        cdef _Rank *r
        cdef bint ok
        memcpy(&version, g.hello + 8, 4)
        memcpy(&g.peer, g.hello + 12, 4)
        memcpy(&g.wanted, g.hello + 16, 4)
        memcpy(&size, g.hello + 20, 4)
        if (memcmp(g.hello, b"GLCYHELO", 8) != 0 or version != 1
                or memcmp(g.hello + 24, self.tag, 16) != 0):
            return False
        if getrandom(g.nonce, _NONCE_BYTES, 0) != _NONCE_BYTES:
            return False
        memcpy(out, g.nonce, _NONCE_BYTES)
        pthread_mutex_lock(&self.lock)
        r = self._rank(g.wanted)
        ok = (r != NULL and size == r.size and 0 <= g.peer < <int64_t>size
              and g.peer != g.wanted
              and _hmac_sha256(r.secret, r.klen, <const uint8_t *>b"acceptor", 8,
                               g.hello, _HELLO_BYTES, g.nonce, _NONCE_BYTES,
                               out + _NONCE_BYTES)
              # (a few bytes to a connection whose peer reads: they fit at once)
              and send(g.fd, out, sizeof(out),
                       MSG_DONTWAIT | MSG_NOSIGNAL) == sizeof(out)
              and _count(r, g.peer))      # (counted before the proof can come)
        pthread_mutex_unlock(&self.lock)
        return ok

    cdef bint _proven(self, _Greeting *g) noexcept nogil:
        """The dialer's proof read: whether it knows the secret."""
        cdef uint8_t mac[_MAC_BYTES]
        cdef _Rank *r
        cdef bint ok
        pthread_mutex_lock(&self.lock)
        r = self._rank(g.wanted)
        ok = (r != NULL
              and _hmac_sha256(r.secret, r.klen, <const uint8_t *>b"connector", 9,
                               g.hello, _HELLO_BYTES, g.nonce, _NONCE_BYTES, mac))
        pthread_mutex_unlock(&self.lock)
        return ok and _same(mac, g.proof, _MAC_BYTES)

    cdef _Rank *_rank(self, int32_t rank) noexcept nogil:
        """Rank `rank`'s entry if registered (the lock held), else NULL."""
        if 0 <= rank < self.nranks and self.ranks[rank].secret != NULL:
            return &self.ranks[rank]
        return NULL

    cdef void _uncount(self, int32_t rank, int32_t peer) noexcept nogil:
        """One dial from `peer` to `rank` no longer coming (the lock held)."""
        cdef _Rank *r = self._rank(rank)
        cdef int i
        if r != NULL:
            i = _find(r, peer)
            if i >= 0:
                r.ncoming -= 1
                r.coming[i] = r.coming[r.ncoming]

    cdef void _post(self, int kind, int fd, _Greeting *g) noexcept nogil:
        """Queue an event for Python; the first of a batch wakes its reader
        (take() reads the eventfd before the queue: none is missed)."""
        cdef uint64_t one = 1
        cdef _Event *grown
        cdef bint first
        pthread_mutex_lock(&self.lock)
        if self.nevents == self.cap_events:
            grown = <_Event *>realloc(self.events,
                                      max(64, 2 * self.cap_events) * sizeof(_Event))
            if grown == NULL:         # (no memory: the event is lost; a proven
                pthread_mutex_unlock(&self.lock)   # dial is closed, and its
                if fd >= 0:                        # dialer sees it hang up)
                    c_close(fd)
                return
            self.events, self.cap_events = grown, max(64, 2 * self.cap_events)
        first = self.nevents == 0
        self.events[self.nevents].kind, self.events[self.nevents].fd = kind, fd
        self.events[self.nevents].wanted = g.wanted
        self.events[self.nevents].peer = g.peer
        memcpy(self.events[self.nevents].address, g.address, _ADDRESS_BYTES)
        self.nevents += 1
        pthread_mutex_unlock(&self.lock)
        if first:
            c_write(self.event_fd, &one, sizeof(one))

    cdef void _unlink(self, _Greeting *g) noexcept nogil:
        if g.prev != NULL:
            g.prev.next = g.next
        else:
            self.dials = g.next
        if g.next != NULL:
            g.next.prev = g.prev

    cdef void _drop(self, _Greeting *g) noexcept nogil:
        """Give up a dial (closed); Python hears of it if it was coming."""
        self._unlink(g)
        epoll_ctl(self.epfd, EPOLL_CTL_DEL, g.fd, NULL)
        c_close(g.fd)
        if g.proving:             # it was counted coming
            pthread_mutex_lock(&self.lock)
            self._uncount(g.wanted, g.peer)
            pthread_mutex_unlock(&self.lock)
            self._post(_GIVEN_UP, -1, g)
        free(g)

    cdef void _drop_all(self) noexcept nogil:
        while self.dials != NULL:
            self._drop(self.dials)


_KINDS = (None, "given up", "proven")


cdef int _find(_Rank *r, int32_t peer) noexcept nogil:
    """Where `peer` is among r's dials coming, or -1."""
    cdef int i
    for i in range(r.ncoming):
        if r.coming[i] == peer:
            return i
    return -1


cdef bint _count(_Rank *r, int32_t peer) noexcept nogil:
    """One more dial from `peer` coming to r: whether there was memory."""
    cdef int32_t *grown
    cdef int n
    if r.ncoming == r.cap_coming:
        n = max(8, 2 * r.cap_coming)
        grown = <int32_t *>realloc(r.coming, n * sizeof(int32_t))
        if grown == NULL:
            return False
        r.coming, r.cap_coming = grown, n
    r.coming[r.ncoming] = peer
    r.ncoming += 1
    return True


cdef void _forget(_Rank *r) noexcept nogil:
    """A rank's entry, emptied (unregistered)."""
    free(r.secret)
    free(r.coming)
    memset(r, 0, sizeof(_Rank))


cdef void *_answer_main(void *arg) noexcept nogil:
    (<Answerer>arg)._serve()
    return NULL


cdef void _format_address(sockaddr_storage *sa, char *out) noexcept nogil:
    """ "host:port" (or "[host]:port") of `sa` into out[_ADDRESS_BYTES]."""
    cdef char text[48]
    if sa.ss_family == AF_INET6:
        inet_ntop(AF_INET6, &(<sockaddr_in6 *>sa).sin6_addr, text, sizeof(text))
        snprintf(out, _ADDRESS_BYTES, "[%s]:%d", text,
                 <int>ntohs((<sockaddr_in6 *>sa).sin6_port))
    else:
        inet_ntop(AF_INET, &(<sockaddr_in *>sa).sin_addr, text, sizeof(text))
        snprintf(out, _ADDRESS_BYTES, "%s:%d", text,
                 <int>ntohs((<sockaddr_in *>sa).sin_port))
