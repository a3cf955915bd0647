# cython: language_level=3
"""Shared-memory transport: ranks on one host talk through memory.

Each pair of local ranks maps one memfd segment holding two rings, one per
direction; a frame goes through the ring as it would through a socket (the
framing, matching and checks are _stream.pyx's). Beside the rings, a
connected Unix socket carries no data, only wake-ups: a rank that runs out
of work sets a flag in the ring it waits on and sleeps in poll(2) on the
socket; the peer that moves bytes through that ring clears the flag and
sends it one byte. When a rank dies, the kernel closes its socket, which
wakes its peers at once (peer death costs no timer). The segment is never
named in /dev/shm, so nothing outlives the processes (see shm.py for the
set-up).

The peer can write anything into the segment: positions read from it are
checked before any copy, and our own positions are kept privately.
"""

from libc.errno cimport errno, EINTR, EAGAIN
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcpy
from posix.unistd cimport close as c_close

from gloocy.transport._stream cimport StreamPair, iovec, WOULD_BLOCK

cdef extern from "_atomics.h" nogil:
    uint64_t ring_load(const uint64_t *p)
    void ring_store(uint64_t *p, uint64_t v)
    void ring_fence()
    void flag_set(uint32_t *p, uint32_t v)
    bint flag_take(uint32_t *p)

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
    uint32_t reader_sleeps      # the reader sleeps until head moves
    uint32_t writer_sleeps      # the writer sleeps until tail moves
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
        if flag_take(&self.out_ctl.reader_sleeps):
            self.poke()
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
        if flag_take(&self.in_ctl.writer_sleeps):
            self.poke()
        return avail

    cdef void stream_close(self) noexcept nogil:
        c_close(self.fd)        # the segment stays mapped until dealloc

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
        flag_set(&self.out_ctl.writer_sleeps, 0)
        flag_set(&self.in_ctl.reader_sleeps, 0)
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
            flag_set(&self.out_ctl.writer_sleeps, 1)
        if want_data:
            flag_set(&self.in_ctl.reader_sleeps, 1)
        self.armed = True
        ring_fence()
        if (self.sock_eof
                or (want_space and self.out_head - ring_load(&self.out_ctl.tail)
                    != self.mask + 1)
                or (want_data and ring_load(&self.in_ctl.head) != self.in_tail)):
            self.disarm()
            return POLLOUT
        return POLLIN | POLLRDHUP
