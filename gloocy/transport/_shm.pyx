# cython: language_level=3
"""Shared-memory transport: ranks on one host talk through memory.

Each pair of local ranks maps one memfd segment holding two rings, one per
direction; a frame goes through the ring as it would through a socket (the
framing, matching and checks are _stream.pyx's).

A rank that runs out of work sets a sleep flag in the ring it waits on and
sleeps; the peer that moves bytes through that ring clears the flag and
wakes it. Where every pair of the rank is a shared-memory one, it sleeps on
the flags themselves (futexes: one system call to sleep, one to wake, see
wait_words and the engine's block_on_words), and notices a dead peer when
its sleep slice ends. Where it must also watch sockets (TCP pairs, other
threads' wake-ups), it sleeps in poll(2) on a connected Unix socket beside
the rings, which carries no data, only wake-ups: the flag then says so, and
the peer sends it one byte. When a rank dies, the kernel closes its socket,
which wakes a poll(2) at once. The segment is never named in /dev/shm, so
nothing outlives the processes (see shm.py for the set-up).

Two rank threads of one process (gloocy.testing's thread worlds) get a pair
with no file descriptor at all (`inproc_pair`): its rings are in this
process's own memory (a `Segment` both ends hold), a closed end says so in
the ring it writes (`writer_closed`, with a wake-up), and a rank that must
sleep in poll(2) is poked through one eventfd of its own (a `Waker`, made
at its first such sleep and shared by all its in-process pairs) instead of
a socket per pair.

The peer can write anything into the segment: positions read from it are
checked before any copy, and our own positions are kept privately.
"""

from libc.errno cimport errno, EINTR, EAGAIN
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport free
from libc.string cimport memcpy, memset
from posix.unistd cimport close as c_close, read as c_read, write as c_write

from gloocy._core cimport (WordWait, WORD_U32, WORDS_NONE, WORDS_READY,
                           WORD_AWAKE, WORD_ASLEEP, WORD_POLLING)
from gloocy.transport._stream cimport StreamPair, iovec, WOULD_BLOCK

cdef extern from "_atomics.h" nogil:
    uint64_t ring_load(const uint64_t *p)
    void ring_store(uint64_t *p, uint64_t v)
    void ring_fence()
    void flag_set(uint32_t *p, uint32_t v)

cdef extern from "_futex.h" nogil:
    void futex_wake(uint32_t *p, int n)
    uint32_t flag_swap_zero(uint32_t *p)

cdef extern from "<sys/mman.h>" nogil:
    void *mmap(void *addr, size_t length, int prot, int flags, int fd, long off)
    int munmap(void *addr, size_t length)
    enum:
        PROT_READ
        PROT_WRITE
        MAP_SHARED
    void *MAP_FAILED

cdef extern from "<sys/socket.h>" nogil:
    ssize_t recv(int fd, void *buf, size_t n, int flags)
    ssize_t send(int fd, const void *buf, size_t n, int flags)
    enum:
        MSG_NOSIGNAL
        MSG_DONTWAIT

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void **p, size_t align, size_t n)

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)
    enum:
        EFD_CLOEXEC
        EFD_NONBLOCK

cdef extern from *:
    """
    static inline int fd_load(const int *p)
    { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    /* Publish fd in *p unless one is there already: the fd in *p after. */
    static inline int fd_publish(int *p, int fd)
    { int none = -1;
      __atomic_compare_exchange_n(p, &none, fd, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
      return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline uint32_t word_load(const uint32_t *p)
    { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    """
    int fd_load(const int *p) nogil
    int fd_publish(int *p, int fd) nogil
    uint32_t word_load(const uint32_t *p) nogil

cdef extern from "<poll.h>" nogil:
    enum:
        POLLIN
        POLLOUT
        POLLRDHUP

# One direction's positions and sleep flags, each on its own cache line.
ctypedef struct RingCtl:
    uint64_t head               # bytes ever written (the writer's)
    char _pad0[56]
    uint64_t tail               # bytes ever read (the reader's)
    char _pad1[56]
    uint32_t reader_sleeps      # the reader sleeps until head moves (WORD_*)
    uint32_t writer_sleeps      # the writer sleeps until tail moves (WORD_*)
    uint32_t writer_closed      # in-process pairs: the writer closed its end
    char _pad2[52]

cdef enum:
    READ_AHEAD = 4096           # a small frame comes out in one copy
    NO_SOCKET = 0x7fffffff      # an in-process pair's fd: open, but no file


cdef class Waker:
    """One rank's eventfd, which its in-process pairs' peers poke when it
    sleeps in poll(2); made at its first such sleep (`ready`), closed once
    no pair holds it (peers hold it too: a poke never hits a closed fd)."""
    cdef int fd                 # -1 until made

    def __cinit__(self):
        self.fd = -1

    def __dealloc__(self):
        if self.fd >= 0:
            c_close(self.fd)

    cdef int ready(self) noexcept nogil:
        """The eventfd, made now if need be (-1 if none can be made)."""
        cdef int fd = fd_load(&self.fd)
        if fd >= 0:
            return fd
        fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)
        if fd < 0:
            return -1
        if fd_publish(&self.fd, fd) != fd:
            c_close(fd)         # another thread of the rank made one first
        return fd_load(&self.fd)

    cdef void poke(self) noexcept nogil:
        cdef uint64_t one = 1
        cdef int fd = fd_load(&self.fd)
        if fd >= 0:             # (none: the rank never slept in poll(2))
            c_write(fd, &one, sizeof(one))

    cdef void drain(self) noexcept nogil:
        cdef uint64_t got
        cdef int fd = fd_load(&self.fd)
        if fd >= 0:
            c_read(fd, &got, sizeof(got))

    @property
    def fileno(self):
        """The eventfd, or -1 while none was needed."""
        return self.fd


cdef class Segment:
    """Two rings in this process's memory, held by both ends of an
    in-process pair; freed when both are gone."""
    cdef char *base

    def __cinit__(self, uint64_t ring):
        cdef void *p = NULL
        cdef size_t n = segment_bytes(ring)
        if posix_memalign(&p, 4096, n) != 0:
            raise MemoryError(f"no memory for two rings of {ring} bytes")
        memset(p, 0, n)
        self.base = <char *>p

    def __dealloc__(self):
        free(self.base)


def inproc_pair(uint64_t ring, int rank, int peer, Waker ours, Waker theirs):
    """(our end, the peer's end) of a pair between two rank threads of this
    process, over rings of `ring` bytes in its own memory. `ours`, `theirs`:
    each rank's Waker."""
    if ring < 4096 or ring & (ring - 1):
        raise ValueError(f"ring: {ring} is not a power of two >= 4096")
    seg = Segment(ring)
    cdef ShmPair mine = ShmPair(-1, -1, ring, rank, peer, rank < peer, "this process")
    cdef ShmPair other = ShmPair(-1, -1, ring, peer, rank, peer < rank, "this process")
    mine.adopt(seg, ours, theirs)
    other.adopt(seg, theirs, ours)
    return mine, other


def segment_bytes(uint64_t ring):
    """Size of the segment of two rings of `ring` bytes each."""
    return 2 * sizeof(RingCtl) + 2 * ring


cdef inline void copy_in(char *data, uint64_t mask, uint64_t pos,
                         const char *src, uint64_t n) noexcept nogil:
    cdef uint64_t at = pos & mask
    cdef uint64_t first = min(n, mask + 1 - at)
    memcpy(data + at, src, first)
    if first < n:
        memcpy(data, src + first, n - first)


cdef inline void copy_out(char *dst, const char *data, uint64_t mask,
                          uint64_t pos, uint64_t n) noexcept nogil:
    cdef uint64_t at = pos & mask
    cdef uint64_t first = min(n, mask + 1 - at)
    memcpy(dst, data + at, first)
    if first < n:
        memcpy(dst + first, data, n - first)


cdef class ShmPair(StreamPair):
    """A Pair over two rings in the memfd `mem_fd` (mapped here; the caller
    closes its fd) and the connected Unix socket `sock_fd` (owned from
    here). The lower rank of the two (`first`) writes the first ring.
    (Both -1: an in-process pair's end, placed by inproc_pair.)"""
    cdef char *base
    cdef size_t seg_bytes
    cdef RingCtl *out_ctl
    cdef RingCtl *in_ctl
    cdef char *out_data
    cdef char *in_data
    cdef uint64_t mask
    cdef uint64_t out_head      # our private copies of our own positions
    cdef uint64_t in_tail
    cdef bint armed             # our sleep flags may be set
    cdef bint first             # we write the first ring
    cdef bint mapped            # base is our own mapping (a memfd's)
    cdef bint sock_eof          # the peer's end of the socket is closed
    cdef readonly uint64_t woke_on_word     # wake-ups we gave the peer: on
    cdef readonly uint64_t woke_by_socket   # its futex, or through the socket
    cdef object segment         # in-process: the rings' Segment (else None)
    cdef Waker own_waker        # in-process: our rank's eventfd, and the peer's
    cdef Waker peer_waker
    cdef bint polling           # in-process: wait_events asked for a poll(2)

    def __cinit__(self, int sock_fd, int mem_fd, uint64_t ring, int rank,
                  int peer, bint first, str address="shared memory"):
        if ring < 4096 or ring & (ring - 1):
            raise ValueError(f"ring: {ring} is not a power of two >= 4096")
        self.seg_bytes = segment_bytes(ring)
        self.mask = ring - 1
        self.first = first
        self.fd = sock_fd
        cdef void *p
        if mem_fd >= 0:
            p = mmap(NULL, self.seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mem_fd, 0)
            if p == MAP_FAILED:
                import os
                raise OSError(errno, f"cannot map the shared segment: {os.strerror(errno)}")
            self.place(<char *>p)
            self.mapped = True
        self.rank = rank
        self.peer = peer
        self.address = address
        self.read_ahead = READ_AHEAD
        self.direct_min = 1

    cdef void place(self, char *base) noexcept:
        cdef RingCtl *ctl = <RingCtl *>base
        cdef char *data = base + 2 * sizeof(RingCtl)
        cdef uint64_t ring = self.mask + 1
        self.base = base
        self.out_ctl, self.in_ctl = (ctl, ctl + 1) if self.first else (ctl + 1, ctl)
        self.out_data, self.in_data = ((data, data + ring) if self.first
                                       else (data + ring, data))

    @property
    def in_process(self):
        """Whether this pair's ends are rank threads of this process (no
        socket: see inproc_pair)."""
        return self.segment is not None

    cdef void adopt(self, Segment seg, Waker ours, Waker theirs) noexcept:
        self.segment, self.own_waker, self.peer_waker = seg, ours, theirs
        self.place(seg.base)
        self.fd = NO_SOCKET

    def __dealloc__(self):
        if self.fd == NO_SOCKET:
            if self.segment is not None and self.peer_waker is not None:
                self.say_closed()       # dropped unclosed: as if closed
        elif self.fd >= 0:
            c_close(self.fd)
        if self.base is not NULL and self.mapped:
            munmap(self.base, self.seg_bytes)

    cdef int corrupt(self) except -1 nogil:
        return self.lost("the shared ring's positions are corrupt (the peer "
                         "wrote over them)", 0)

    cdef ssize_t stream_send(self, iovec *iov, int n) except -2 nogil:
        cdef uint64_t used = self.out_head - ring_load(&self.out_ctl.tail)
        cdef uint64_t space, piece, total = 0
        cdef int i
        if used > self.mask + 1:
            return self.corrupt()
        space = self.mask + 1 - used
        if space == 0:
            return WOULD_BLOCK
        for i in range(n):
            piece = min(<uint64_t>iov[i].iov_len, space - total)
            copy_in(self.out_data, self.mask, self.out_head + total,
                    <const char *>iov[i].iov_base, piece)
            total += piece
            if total == space:
                break
        self.out_head += total
        ring_store(&self.out_ctl.head, self.out_head)
        ring_fence()
        self.wake(&self.out_ctl.reader_sleeps)
        return total

    cdef ssize_t stream_recv(self, char *dst, size_t n) except -2 nogil:
        # (In process: the closed mark first; the bytes written before it
        # are seen after it.)
        cdef bint closed = self.segment_closed()
        cdef uint64_t avail = ring_load(&self.in_ctl.head) - self.in_tail
        if avail > self.mask + 1:
            return self.corrupt()
        if avail == 0:
            if closed:
                self.sock_eof = True
            return 0 if self.sock_eof else WOULD_BLOCK
        avail = min(avail, <uint64_t>n)
        copy_out(dst, self.in_data, self.mask, self.in_tail, avail)
        self.in_tail += avail
        ring_store(&self.in_ctl.tail, self.in_tail)
        ring_fence()
        self.wake(&self.in_ctl.writer_sleeps)
        return avail

    cdef void stream_close(self) noexcept nogil:
        if self.fd == NO_SOCKET:
            self.say_closed()
        else:
            c_close(self.fd)    # the segment stays mapped until dealloc

    cdef bint segment_closed(self) noexcept nogil:
        """In process: the peer closed its end (marked in the ring it writes)."""
        return self.fd == NO_SOCKET and word_load(&self.in_ctl.writer_closed) != 0

    cdef void say_closed(self) noexcept nogil:
        """In process: mark our end closed, and wake the peer wherever it
        sleeps for us (as a closed socket would)."""
        flag_set(&self.out_ctl.writer_closed, 1)
        ring_fence()
        self.wake(&self.out_ctl.reader_sleeps)
        self.wake(&self.in_ctl.writer_sleeps)

    cdef void wake(self, uint32_t *flag) noexcept nogil:
        """Wake the peer if it sleeps until what `flag` guards moves (we just
        moved it): on the flag, or in poll(2)."""
        cdef uint32_t how = flag_swap_zero(flag)
        if how == WORD_ASLEEP:
            futex_wake(flag, 1)
            self.woke_on_word += 1
        elif how != WORD_AWAKE:
            self.poke()
            self.woke_by_socket += 1

    cdef void poke(self) noexcept nogil:
        # Errors are ignored: a full socket already holds wake-ups, and a
        # peer that is gone is noticed by our own reads.
        cdef char one = 1
        if self.peer_waker is not None:
            self.peer_waker.poke()
            return
        send(self.fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL)

    cdef void wake_peer(self) noexcept nogil:
        self.poke()

    cdef void drain_wakeups(self) noexcept nogil:
        if self.own_waker is not None and self.polling:
            self.polling = False        # (the sleep it was for is over)
            self.own_waker.drain()
        self.drain()

    cdef void drain(self) noexcept nogil:
        """Read the wake-ups that came; note a closed socket. (In process:
        only the closed mark: the rank's eventfd, shared by its pairs, is
        read once the sleep is over, not while the others arm theirs.)"""
        cdef char buf[256]
        cdef ssize_t n
        if self.own_waker is not None:
            if self.segment_closed():
                self.sock_eof = True
            return
        while not self.sock_eof:
            n = recv(self.fd, buf, sizeof(buf), MSG_DONTWAIT)
            if n == <ssize_t>sizeof(buf):
                continue
            if n > 0:
                return
            if n < 0 and errno == EINTR:
                continue
            if n < 0 and errno == EAGAIN:
                return
            self.sock_eof = True    # closed (0) or broken (ECONNRESET)

    cdef void disarm(self) noexcept nogil:
        flag_set(&self.out_ctl.writer_sleeps, WORD_AWAKE)
        flag_set(&self.in_ctl.reader_sleeps, WORD_AWAKE)
        self.armed = False

    cdef int progress(self) except -1 nogil:
        if self.armed:
            self.disarm()
        if self.polling:                # (in process: a poll(2) is over)
            self.polling = False
            self.own_waker.drain()
        return StreamPair.progress(self)

    cdef int wait_fd(self) noexcept nogil:
        """In process: the rank's eventfd while a poll(2) is asked for (see
        wait_events), else none (a closed peer is then asked after as a
        rank thread: Connector.process_gone)."""
        if self.own_waker is None:
            return self.fd
        return self.own_waker.fd if self.polling and self.fd >= 0 else -1

    cdef short wait_events(self) noexcept nogil:
        """About to sleep: ask the peer for a wake-up when it moves what we
        wait for. If it moved already, answer POLLOUT on the socket, which
        is writable, so that poll(2) returns at once."""
        cdef bint want_space = self.send_head is not NULL
        cdef bint want_data = not self.parked
        if self.fd < 0 or self.peer_gone:
            return 0
        if self.own_waker is not None:
            if self.own_waker.ready() < 0:
                return 0                # no fd left: the wait naps a slice
            self.polling = True
        self.drain()
        if want_space:
            flag_set(&self.out_ctl.writer_sleeps, WORD_POLLING)
        if want_data:
            flag_set(&self.in_ctl.reader_sleeps, WORD_POLLING)
        self.armed = True
        ring_fence()
        if self.sock_eof or self.moved(want_space, want_data):
            self.disarm()
            return POLLOUT
        return POLLIN | POLLRDHUP

    cdef bint moved(self, bint want_space, bint want_data) noexcept nogil:
        """What we are about to sleep for is there already (our flags are
        up: a move after this look wakes us)."""
        return ((want_space and self.out_head - ring_load(&self.out_ctl.tail)
                 != self.mask + 1)
                or (want_data and ring_load(&self.in_ctl.head) != self.in_tail))

    cdef int wait_words(self, WordWait *w, int room) noexcept nogil:
        """About to sleep on futexes: put our flags up (WORD_ASLEEP) and
        hand them out. A dead peer wakes no futex: the sleeper looks at the
        socket when its slice ends (drain_wakeups)."""
        cdef bint want_space = self.send_head is not NULL
        cdef bint want_data = not self.parked
        cdef int n = 0
        if self.fd < 0 or self.peer_gone:
            return 0
        if self.sock_eof or self.segment_closed():
            return WORDS_READY          # read what is left, then the end
        if room < 2:
            return WORDS_NONE
        if want_space:
            flag_set(&self.out_ctl.writer_sleeps, WORD_ASLEEP)
            put_word(&w[n], &self.out_ctl.writer_sleeps)
            n += 1
        if want_data:
            flag_set(&self.in_ctl.reader_sleeps, WORD_ASLEEP)
            put_word(&w[n], &self.in_ctl.reader_sleeps)
            n += 1
        self.armed = True
        ring_fence()
        if self.moved(want_space, want_data):
            self.disarm()
            return WORDS_READY
        return n


cdef inline void put_word(WordWait *w, uint32_t *flag) noexcept nogil:
    w.val = WORD_ASLEEP
    w.uaddr = <uint64_t><size_t>flag
    w.flags = WORD_U32
    w._reserved = 0
