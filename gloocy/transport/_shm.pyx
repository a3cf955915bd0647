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

The peer can write anything into the segment: positions read from it are
checked before any copy, and our own positions are kept privately.
"""

from libc.errno cimport errno, EINTR, EAGAIN
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcpy
from posix.unistd cimport close as c_close

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
    char _pad2[56]

cdef enum:
    READ_AHEAD = 4096           # a small frame comes out in one copy


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
    here). The lower rank of the two (`first`) writes the first ring."""
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
    cdef bint sock_eof          # the peer's end of the socket is closed
    cdef readonly uint64_t woke_on_word     # wake-ups we gave the peer: on
    cdef readonly uint64_t woke_by_socket   # its futex, or through the socket

    def __cinit__(self, int sock_fd, int mem_fd, uint64_t ring, int rank,
                  int peer, bint first, str address="shared memory"):
        if ring < 4096 or ring & (ring - 1):
            raise ValueError(f"ring: {ring} is not a power of two >= 4096")
        self.seg_bytes = segment_bytes(ring)
        cdef void *p = mmap(NULL, self.seg_bytes, PROT_READ | PROT_WRITE,
                            MAP_SHARED, mem_fd, 0)
        if p == MAP_FAILED:
            import os
            raise OSError(errno, f"cannot map the shared segment: {os.strerror(errno)}")
        self.base = <char *>p
        cdef RingCtl *ctl = <RingCtl *>p
        cdef char *data = self.base + 2 * sizeof(RingCtl)
        self.out_ctl, self.in_ctl = (ctl, ctl + 1) if first else (ctl + 1, ctl)
        self.out_data, self.in_data = ((data, data + ring) if first
                                       else (data + ring, data))
        self.mask = ring - 1
        self.fd = sock_fd
        self.rank = rank
        self.peer = peer
        self.address = address
        self.read_ahead = READ_AHEAD
        self.direct_min = 1

    def __dealloc__(self):
        if self.fd >= 0:
            c_close(self.fd)
        if self.base is not NULL:
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
        cdef uint64_t avail = ring_load(&self.in_ctl.head) - self.in_tail
        if avail > self.mask + 1:
            return self.corrupt()
        if avail == 0:
            return 0 if self.sock_eof else WOULD_BLOCK
        avail = min(avail, <uint64_t>n)
        copy_out(dst, self.in_data, self.mask, self.in_tail, avail)
        self.in_tail += avail
        ring_store(&self.in_ctl.tail, self.in_tail)
        ring_fence()
        self.wake(&self.in_ctl.writer_sleeps)
        return avail

    cdef void stream_close(self) noexcept nogil:
        c_close(self.fd)        # the segment stays mapped until dealloc

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
        send(self.fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL)

    cdef void wake_peer(self) noexcept nogil:
        self.poke()

    cdef void drain_wakeups(self) noexcept nogil:
        self.drain()

    cdef void drain(self) noexcept nogil:
        """Read the wake-ups that came; note a closed socket."""
        cdef char buf[256]
        cdef ssize_t n
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
        return StreamPair.progress(self)

    cdef short wait_events(self) noexcept nogil:
        """About to sleep: ask the peer for a wake-up when it moves what we
        wait for. If it moved already, answer POLLOUT on the socket, which
        is writable, so that poll(2) returns at once."""
        cdef bint want_space = self.send_head is not NULL
        cdef bint want_data = not self.parked
        if self.fd < 0 or self.peer_gone:
            return 0
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
        if self.sock_eof:
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
