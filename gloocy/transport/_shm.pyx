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

Large point-to-point messages copy once (single copies, set up by
allow_single_copy): the sender puts a P2P_SINGLE frame in the message's
place in the ring, a header saying where the payload is in its memory
(`count`: the address, `length`: the size), and sends nothing after it
until the receiver answers (KIND_P2P_READ). The receiver matches the frame
as any other and reads the payload with process_vm_readv from the
sender's process (its pid is the one the kernel gave at set-up, never one
from a frame): into the posted receive, or into the stash at once when
none is posted, so that the send completes without waiting for its
receive, as before. Then it answers READ_DONE and the send is done. If
the kernel refuses (EPERM: Yama, a container, seccomp) or GLOOCY_CMA=0 on
the receiver, it answers READ_REFUSED and stops reading from this peer;
the sender then streams that payload through the ring (a P2P_STREAMED
frame, which goes to the receive its P2P_SINGLE frame chose) and sends
every later message so. Answers go between frames, ahead of the queue, so
that two ranks waiting for each other's answers both get them.

A receive of at least split_min bytes, posted when its P2P_SINGLE frame
comes, is copied by both processes, each on its CPU: the receiver answers
READ_SPLIT (its buffer's address, and how much it reads itself), reads
the first half while the sender writes the second with process_vm_writev,
which answers READ_WRITTEN; the receiver answers READ_DONE. (Not while
the receiver sends the sender a message too: both are busy then.) A sender that
has not begun its half when the receiver is done with its own (asleep,
or busy outside gloocy) loses it: the receiver takes the offer back and
reads that half too, so that no receive waits for a sender's progress
(the sender's late READ_WRITTEN then says it wrote nothing). The ring's
control line carries a word that makes the write safe: the receiver sets
it SPLIT_OFFERED before it answers READ_SPLIT; the sender writes only if it
turns it SPLIT_WRITING, and sets SPLIT_WRITTEN after; a receiver that
abandons its receive (an error) takes the offer back, or waits until the
write is over before the buffer can go.
"""

from libc.errno cimport (errno, EINTR, EAGAIN, EPERM, EACCES, ENOSYS, ESRCH,
                        EFAULT)
from libc.stdint cimport int64_t, uint32_t, uint64_t, INT64_MAX, UINT64_MAX
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from libc.stdlib cimport free
from libc.string cimport memcpy, memset
from posix.unistd cimport close as c_close, read as c_read, write as c_write

from gloocy._core cimport (WordWait, WORD_U32, WORDS_NONE, WORDS_READY,
                           WORD_AWAKE, WORD_ASLEEP, WORD_POLLING,
                           Xfer, Header, HEADER_SIZE, KIND_P2P, KIND_P2P_READ,
                           P2P_SINGLE, P2P_STREAMED, READ_DONE, READ_REFUSED,
                           READ_SPLIT, READ_WRITTEN,
                           XFER_DONE, XF_HEAP, init_header, check_frame,
                           xfer_unlink, cma_read, cma_write)
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
    static inline int word_cas(uint32_t *p, uint32_t old, uint32_t new_)
    { return __atomic_compare_exchange_n(p, &old, new_, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE); }
    """
    int fd_load(const int *p) nogil
    int fd_publish(int *p, int fd) nogil
    uint32_t word_load(const uint32_t *p) nogil
    int word_cas(uint32_t *p, uint32_t old, uint32_t new_) nogil

# One spare stash buffer per process: a large message read before its
# receive was posted goes into fresh memory, whose first touch costs a page
# fault per page (64 MiB: 30 ms where the copy takes 7, on this project's
# VM); the next such message reuses the last one's (SPARE_MAX at most).
cdef extern from *:
    """
    static int gloocy_spare_lock = 0;
    static char *gloocy_spare = NULL;
    static int64_t gloocy_spare_cap = 0;
    static void gloocy_spare_enter(void)
    { while (__atomic_test_and_set(&gloocy_spare_lock, __ATOMIC_ACQUIRE)) ; }
    static void gloocy_spare_leave(void)
    { __atomic_clear(&gloocy_spare_lock, __ATOMIC_RELEASE); }
    /* The spare buffer if it holds `need` bytes (its size in *cap), else NULL. */
    static char *spare_take(int64_t need, int64_t *cap)
    { char *b = NULL;
      gloocy_spare_enter();
      if (gloocy_spare != NULL && gloocy_spare_cap >= need) {
          b = gloocy_spare; *cap = gloocy_spare_cap;
          gloocy_spare = NULL; gloocy_spare_cap = 0; }
      gloocy_spare_leave();
      return b; }
    /* Keep b (of cap bytes) as the spare if it is larger than the one kept:
       the buffer to free (b or the old spare, or NULL). */
    static char *spare_give(char *b, int64_t cap)
    { char *out = b;
      gloocy_spare_enter();
      if (cap > gloocy_spare_cap) {
          out = gloocy_spare; gloocy_spare = b; gloocy_spare_cap = cap; }
      gloocy_spare_leave();
      return out; }
    """
    char *spare_take(int64_t need, int64_t *cap) nogil
    char *spare_give(char *b, int64_t cap) nogil

cdef extern from "<sched.h>" nogil:
    int sched_yield()

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
    uint32_t split              # the split copy of the message in this ring (SPLIT_*)
    char _pad2[48]

cdef enum:
    READ_AHEAD = 4096           # a small frame comes out in one copy
    SPLIT_IDLE = 0              # RingCtl.split: no split copy
    SPLIT_OFFERED = 1           # the receiver asked the sender to write
    SPLIT_WRITING = 2           # the sender writes
    SPLIT_WRITTEN = 3           # ... and is done
    SPLIT_WAIT_NS = 5000000000  # an abandoning receiver waits for a write this long
    SPARE_MIN = 1 << 20         # stash buffers kept for reuse: from this size
    SPARE_MAX = 64 << 20        # ... to this one
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
    # Single copies (see the top of this file):
    cdef int64_t peer_pid       # the peer's process, from the set-up's socket
    cdef int64_t single_min     # our sends from this many bytes copy once (0: none)
    cdef bint read_ok           # we read the peer's P2P_SINGLE frames (else refuse)
    cdef Xfer *held             # our send whose P2P_SINGLE frame waits for its answer
    cdef Xfer *refused          # the receive (or stash) whose payload comes streamed
    cdef int answer_due         # the answer we owe the peer: 1 + a ReadAnswer (0: none)
    cdef uint64_t answer_addr   # ... READ_SPLIT's: our buffer, and our part
    cdef int64_t answer_at
    cdef int written_due        # READ_WRITTEN we owe: 1 + its root (0: none)
    cdef int64_t split_min      # receives from this many bytes copy split (0: never)
    cdef bint read_proven       # a read from the peer worked (a split may go)
    cdef bint write_ok          # we write the peer's split parts (else: say so)
    cdef Xfer *split            # the receive the peer writes the second part of
    cdef uint64_t split_addr    # ... its payload's address in the peer
    cdef int split_err          # ... how our read of the first part went
    cdef int stale_written      # READ_WRITTENs to come for splits taken back
    cdef readonly uint64_t single_reads     # messages we read with one copy
    cdef readonly uint64_t single_sent      # our sends the peer read so
    cdef uint64_t split_done                # receives the peer wrote half of
    cdef uint64_t split_taken               # ... whose half we read after all
    cdef readonly int refused_err           # errno that stopped our reads (0: none,
                                            # or GLOOCY_CMA=0)

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

    def allow_single_copy(self, int64_t peer_pid, int64_t min_bytes, bint willing,
                          int64_t split_min=0):
        """Copy point-to-point messages of at least `min_bytes` (>= 1) once,
        to and from the peer's process `peer_pid` (what the kernel said of
        the set-up's socket; 0: unknown, no single copies), receives of at
        least `split_min` bytes by both processes (0: never). Unwilling
        (GLOOCY_CMA=0): none of ours, and the peer's are refused."""
        if min_bytes < 1 or split_min < 0:
            raise ValueError(f"min_bytes, split_min: {min_bytes}, {split_min} "
                             "are not byte counts >= 1 (split_min: >= 0)")
        if self.fd == NO_SOCKET or self.fd < 0 or peer_pid <= 0 or not willing:
            return
        self.peer_pid = peer_pid
        self.single_min = min_bytes
        self.split_min = max(split_min, 2 * 4096) if split_min else 0
        self.read_ok = True
        self.write_ok = True

    @property
    def single_copies(self):
        """(sends of ours the peer read once, messages of the peer's we read
        once, whether we may still send so, the errno that stopped our
        reads or 0)."""
        return (self.single_sent, self.single_reads, self.single_min > 0,
                self.refused_err)

    @property
    def split_copies(self):
        """(receives of ours the peer wrote half of, split receives whose
        half we read after all (the peer had not begun it), whether we still
        write the peer's halves)."""
        return self.split_done, self.split_taken, self.write_ok

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
        cdef int moved
        if self.armed:
            self.disarm()
        if self.polling:                # (in process: a poll(2) is over)
            self.polling = False
            self.own_waker.drain()
        moved = StreamPair.progress(self)
        if self.owes():
            moved |= self.send_answer()
        return moved

    # -- single copies ------------------------------------------------------

    cdef bint owes(self) noexcept nogil:
        """An answer of ours waits to go."""
        return self.answer_due != 0 or self.written_due != 0

    cdef bint wants_space(self) noexcept nogil:
        """We wait for room in our ring: for a frame (not for the answer to
        one held), or for the answer we owe."""
        return ((self.send_head is not NULL and self.send_head is not self.held)
                or self.owes())

    cdef int put_header(self, Header *h) except -1 nogil:
        """Write a lone header into our ring whole (so that the stream is
        never left mid-frame by it): 1, or 0 when it does not fit now."""
        cdef iovec iov
        cdef uint64_t used = self.out_head - ring_load(&self.out_ctl.tail)
        if used > self.mask + 1:
            return self.corrupt()
        if self.mask + 1 - used < HEADER_SIZE:
            return 0
        iov.iov_base = h
        iov.iov_len = HEADER_SIZE
        self.stream_send(&iov, 1)
        return 1

    cdef int send_some(self) except -1 nogil:
        cdef int moved = self.send_answer()
        moved |= StreamPair.send_some(self)
        if self.owes():
            moved |= self.send_answer()
        return moved

    cdef int send_answer(self) except -1 nogil:
        """The answers we owe, between two frames of ours; 1 if one went."""
        cdef Header h
        cdef int moved = 0
        if not self.owes():
            return 0
        if self.fd < 0 or self.cut or self.peer_gone:
            self.answer_due = self.written_due = 0      # nobody to tell
            return 0
        if self.send_head is not NULL and self.send_head.done != 0:
            return 0                    # mid-frame: after it
        init_header(&h)
        h.kind = KIND_P2P_READ
        if self.written_due:
            h.op = READ_WRITTEN
            h.root = self.written_due - 1
            if not self.put_header(&h):
                return 0
            self.written_due = 0
            moved = 1
        if self.answer_due:
            h.op = self.answer_due - 1
            h.root = -1
            if h.op == READ_SPLIT:
                h.count = self.answer_addr
                h.tag = <uint64_t>self.answer_at
            if not self.put_header(&h):
                return moved
            self.answer_due = 0
            moved = 1
        return moved

    cdef int send_aside(self, Xfer *x) except -1 nogil:
        """A large point-to-point send goes as a P2P_SINGLE frame, and waits
        (held, at the head of the queue) for its answer."""
        cdef Header d
        if x is self.held:
            return 1
        if (self.single_min == 0 or x.hdr.kind != KIND_P2P
                or x.nbytes < self.single_min
                or (x.hdr.op & (P2P_SINGLE | P2P_STREAMED)) != 0):
            return 0
        d = x.hdr
        d.op |= P2P_SINGLE
        d.count = <uint64_t><size_t>x.buf
        if not self.put_header(&d):
            return 1
        self.held = x
        return 2

    cdef int side_frame(self) except -1 nogil:
        cdef Header *h = &self.in_hdr
        if h.kind == KIND_P2P_READ:
            self.in_hdr_got = 0
            self.answered(h)
            return 1
        if h.kind == KIND_P2P and (h.op & P2P_STREAMED):
            return self.take_streamed()
        if self.refused is not NULL or self.split is not NULL:
            return self.bad_frame("another frame before it finished the "
                                  "message this rank was taking")
        if h.kind == KIND_P2P and (h.op & P2P_SINGLE):
            return self.take_single()
        return 0

    cdef int answered(self, const Header *h) except -1 nogil:
        """The peer answered our held P2P_SINGLE frame: the send is done, or
        it streams now (and every later one), or we write our part; or it
        wrote its part of our receive."""
        cdef Xfer *x = self.held
        if h.op == READ_WRITTEN:
            return self.written(h.root)
        if h.op == READ_SPLIT:
            return self.write_part(x, h.count, <int64_t>h.tag)
        if x is NULL:
            return 0                    # forgotten (abandon): nothing to do
        self.held = NULL
        if h.op == READ_DONE:
            self.send_head = x.next
            if self.send_head is NULL:
                self.send_tail = NULL
            x.next = NULL
            x.state = XFER_DONE
            self.single_sent += 1
        else:
            self.single_min = 0
            x.hdr.op |= P2P_STREAMED
        self.send_some()
        return 0

    cdef int take_single(self) except -1 nogil:
        """A P2P_SINGLE frame: match it (or stash it), read its payload from
        the sender's memory, answer. Refused: answer so, and its payload
        comes streamed (take_streamed)."""
        cdef Header d = self.in_hdr
        cdef uint64_t addr = d.count
        cdef Xfer *x
        cdef int err
        d.op &= ~P2P_SINGLE
        d.count = 0
        if (d.length == 0 or d.length > <uint64_t>INT64_MAX or addr == 0
                or addr > UINT64_MAX - d.length):
            return self.bad_frame("a single-copy frame with an impossible "
                                  "address or length")
        x = self.claim(&d, &self.recv_head, &self.recv_tail)
        if x is NULL:
            x = self.stash(&d)
            self.reuse_spare(x)
        else:
            if d.length > <uint64_t>x.nbytes:
                # Truncated: check_frame raises. Nothing of it is in the
                # ring, so the send completes all the same, as a small one.
                self.in_hdr_got = 0
                self.answer_due = 1 + READ_DONE
                self.send_answer()
            check_frame(&d, x, self.rank, self.peer)
            x.hdr = d
            x.nbytes = <int64_t>d.length
            x.peer = self.peer
        x.done = 0
        self.in_hdr_got = 0
        # (Not where we send the peer a message too, an exchange: it is
        # busy with ours as we are with its; each reading all was faster.)
        if (self.split_min and x.nbytes >= self.split_min and self.read_proven
                and self.read_ok and not (x.flags & XF_HEAP)
                and self.held is NULL):
            return self.read_part(x, addr)
        return self.finish_single(x, self.read_single(x, addr))

    cdef int finish_single(self, Xfer *x, int err) except -1 nogil:
        """x's payload is read (err 0): done, answer so; else refused:
        answer so, and it comes streamed."""
        if err == 0:
            self.read_proven = True
            x.state = XFER_DONE
            self.single_reads += 1
            self.answer_due = 1 + READ_DONE
            self.send_answer()
            if x.flags & XF_HEAP:
                self.hand_to_any_source(x)
        else:
            self.read_ok = False
            self.refused_err = max(err, 0)
            if x.flags & XF_HEAP:       # (a spare may be larger: the stream
                x.cap = min(x.cap, x.nbytes)    # reads up to cap)
            self.refused = x
            self.answer_due = 1 + READ_REFUSED
            self.send_answer()
        return 1

    cdef int read_part(self, Xfer *x, uint64_t addr) except -1 nogil:
        """A split copy of x: offer the peer the second half (READ_SPLIT),
        read the first; READ_WRITTEN finishes it (written)."""
        cdef int64_t at = x.nbytes // 2 // 4096 * 4096
        cdef int64_t took, t0
        flag_set(&self.in_ctl.split, SPLIT_OFFERED)
        self.answer_addr = <uint64_t><size_t>x.buf
        self.answer_at = at
        self.answer_due = 1 + READ_SPLIT
        self.send_answer()
        t0 = mono_ns()
        self.split = x
        self.split_addr = addr
        self.split_err = self.read_checked(addr, x.buf, at)
        # Give a sender that was asleep as long as our half took to begin
        # (yielding the CPU: it may wait for ours).
        took = mono_ns() - t0
        t0 += took
        while (word_load(&self.in_ctl.split) == SPLIT_OFFERED
               and mono_ns() - t0 < took):
            sched_yield()
        if word_cas(&self.in_ctl.split, SPLIT_OFFERED, SPLIT_IDLE):
            # The peer has not begun its half: ours now.
            self.split = NULL
            self.stale_written += 1
            self.split_taken += 1
            if self.split_err == 0:
                self.split_err = self.read_checked(addr + <uint64_t>at, x.buf + at,
                                                   x.nbytes - at)
            return self.finish_single(x, self.split_err)
        return 1

    cdef int written(self, int root) except -1 nogil:
        """The peer wrote its part of our split receive (root 0), or could
        not (we read it too)."""
        cdef Xfer *x = self.split
        cdef int64_t at
        cdef int err
        if x is NULL:
            if self.stale_written:      # for a split taken back: forget it
                self.stale_written -= 1
                return 0
            return self.bad_frame("a single-copy write this rank did not ask for")
        self.split = NULL
        flag_set(&self.in_ctl.split, SPLIT_IDLE)
        at = x.nbytes // 2 // 4096 * 4096
        err = self.split_err
        if err == 0 and root != 0:
            err = self.read_checked(self.split_addr + <uint64_t>at, x.buf + at,
                                    x.nbytes - at)
        elif err == 0:
            self.split_done += 1
        return self.finish_single(x, err)

    cdef int write_part(self, Xfer *x, uint64_t addr, int64_t at) except -1 nogil:
        """The peer reads the first `at` bytes of our held send x and asks
        us to write the rest to `addr` + `at` in its memory, if it still
        offers it (RingCtl.split); READ_WRITTEN says how it went."""
        cdef int err = -1
        if x is not NULL and (at <= 0 or at >= x.nbytes or addr == 0
                              or addr > UINT64_MAX - <uint64_t>x.nbytes):
            return self.bad_frame("a split answer with an impossible address "
                                  "or part")
        if (x is not NULL and self.write_ok
                and word_cas(&self.out_ctl.split, SPLIT_OFFERED, SPLIT_WRITING)):
            err = cma_write(self.peer_pid, <int64_t>(addr + <uint64_t>at),
                            x.buf + at, x.nbytes - at)
            flag_set(&self.out_ctl.split, SPLIT_WRITTEN)
            if err == ESRCH:
                return self.lost("its process is gone (it died while this "
                                 "rank wrote a message into its memory)", 0)
            if err:
                self.write_ok = False   # the peer reads our parts from now on
        self.written_due = 1 + (err != 0)
        self.send_answer()
        return 0

    cdef int read_single(self, Xfer *x, uint64_t addr) except -2 nogil:
        """x's payload from `addr` in the peer's process: 0; the errno when
        the kernel refuses (-1: we do not read, GLOOCY_CMA=0). A stash grows
        as the bytes come, never ahead of them."""
        cdef int err = 0
        cdef int64_t n = x.nbytes
        if not self.read_ok:
            return -1
        if not (x.flags & XF_HEAP):
            return self.read_checked(addr, x.buf, n)
        while x.done < n and err == 0:
            if x.done == x.cap:
                self.grow_stash(x)
            err = self.read_checked(addr + <uint64_t>x.done, x.buf + x.done,
                                    min(x.cap, n) - x.done)
            if err == 0:
                x.done = min(x.cap, n)
        x.done = 0
        return err

    cdef void reuse_spare(self, Xfer *u) noexcept nogil:
        """A stash u about to be read from the peer's memory: into the
        process's spare buffer if it holds it."""
        cdef int64_t cap = 0
        cdef char *b
        if u.nbytes < SPARE_MIN:
            return
        b = spare_take(u.nbytes, &cap)
        if b is not NULL:
            free(u.buf)
            u.buf = b
            u.cap = cap

    cdef void drop_unexpected(self, Xfer *u) noexcept nogil:
        """Pair's, but a large stash buffer is kept as the spare (where
        single copies may use it)."""
        if (self.peer_pid > 0 and u.cap >= SPARE_MIN and u.cap <= SPARE_MAX
                and xfer_unlink(&self.unexp_head, &self.unexp_tail, u)):
            free(spare_give(u.buf, u.cap))
            free(u)
            return
        StreamPair.drop_unexpected(self, u)

    cdef int read_checked(self, uint64_t addr, char *dst, int64_t n) except -2 nogil:
        """n bytes from `addr` in the peer's process: 0; the errno when the
        kernel refuses; raises when the peer is gone or the bytes are not
        there."""
        cdef int err = cma_read(self.peer_pid, <int64_t>addr, dst, n)
        if err == 0 or err == EPERM or err == EACCES or err == ENOSYS:
            return err
        if err == ESRCH:
            return self.lost("its process is gone (it died while this rank "
                             "read a message from its memory)", 0)
        self.drain()
        if self.sock_eof:
            return self.lost("it died while this rank read a message from "
                             "its memory", err)
        return self.bad_read(addr, n, err)

    cdef int take_streamed(self) except -1 nogil:
        """The payload of a message whose P2P_SINGLE frame we refused: into
        the receive (or stash) that frame chose."""
        cdef Xfer *x = self.refused
        if x is NULL or self.in_hdr.length != <uint64_t>x.nbytes:
            return self.bad_frame("a streamed payload this rank did not ask for")
        self.refused = NULL
        x.done = 0
        self.in_x = x
        return 1

    cdef int bad_frame(self, str what) except -1 with gil:
        from gloocy.errors import ProtocolError
        raise ProtocolError(f"rank {self.rank}: peer rank {self.peer} "
                            f"({self.address}) sent {what}")

    cdef int bad_read(self, uint64_t addr, int64_t n, int err) except -1 with gil:
        import os
        from gloocy.errors import ProtocolError
        raise ProtocolError(
            f"rank {self.rank}: peer rank {self.peer} ({self.address}) offered "
            f"a {n}-byte message at {addr:#x} in its memory, which could not "
            f"be read (process_vm_readv: {os.strerror(err)})")

    cdef int post_recv(self, Xfer *x) except -1 nogil:
        """A stashed message whose payload comes streamed (refused) and that
        x is the oldest match for: x takes its place."""
        cdef Xfer *u = self.refused
        if (u is not NULL and (u.flags & XF_HEAP) and self.fd >= 0
                and not self.cut and self.find_unexpected(x, True) is u
                and self.any_source_for(u) is NULL):
            check_frame(&u.hdr, x, self.rank, self.peer)
            x.hdr = u.hdr
            x.nbytes = u.nbytes
            x.peer = self.peer
            x.done = 0
            self.refused = x
            self.drop_unexpected(u)
            self.matched(&x.hdr)
            return 0
        return StreamPair.post_recv(self, x)

    cdef bint busy(self) noexcept nogil:
        return (StreamPair.busy(self) or self.refused is not NULL
                or self.split is not NULL or self.owes())

    cdef bint expecting(self) noexcept nogil:
        return (StreamPair.expecting(self) or self.refused is not NULL
                or self.split is not NULL or self.held is not NULL)

    cdef void withdraw_split(self) noexcept nogil:
        """Our split receive is abandoned (its buffer may go once we
        return): take the offer back, or wait until the peer's write is
        over (or the peer gone, or SPLIT_WAIT_NS)."""
        cdef int64_t t0
        if self.split is NULL:
            return
        self.split = NULL
        self.stale_written += 1
        if not word_cas(&self.in_ctl.split, SPLIT_OFFERED, SPLIT_IDLE):
            t0 = mono_ns()
            while word_load(&self.in_ctl.split) == SPLIT_WRITING:
                sched_yield()
                self.drain()
                if self.sock_eof or mono_ns() - t0 > SPLIT_WAIT_NS:
                    break
        flag_set(&self.in_ctl.split, SPLIT_IDLE)

    cdef void abandon(self) noexcept nogil:
        # A receive of ours waiting for its streamed payload is forgotten:
        # that payload could not be placed, the stream is cut there.
        self.withdraw_split()
        if self.refused is not NULL and not (self.refused.flags & XF_HEAP):
            self.refused = NULL
            self.cut = True
            self.parked = True
        self.held = NULL
        StreamPair.abandon(self)

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
        cdef bint want_space = self.wants_space()
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
        cdef bint want_space = self.wants_space()
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


cdef inline int64_t mono_ns() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return t.tv_sec * 1000000000 + t.tv_nsec


cdef inline void put_word(WordWait *w, uint32_t *flag) noexcept nogil:
    w.val = WORD_ASLEEP
    w.uaddr = <uint64_t><size_t>flag
    w.flags = WORD_U32
    w._reserved = 0
