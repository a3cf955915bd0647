# The contract between gloocy's core and its transports.
#
# A transport implements `Pair` (tagged, ordered, reliable byte messages to
# one peer); the collectives in `_core.pyx` drive pairs only through the
# methods declared here, without the GIL.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from cpython.buffer cimport Py_buffer


cdef enum:
    FRAME_MAGIC = 0x59434c47      # b"GLCY" read as a little-endian u32
    FRAME_VERSION = 1
    HEADER_SIZE = 48

# What a frame belongs to; also the "kind" in a collective's fingerprint.
cdef enum Kind:
    KIND_BYE = 0                  # the peer closes its end cleanly; no payload
    KIND_BARRIER = 1
    KIND_BCAST = 2
    KIND_ALLREDUCE = 3
    KIND_ALLGATHERV = 4
    KIND_REDUCE = 5
    KIND_GATHERV = 6
    KIND_SCATTERV = 7
    KIND_ALLTOALLV = 8
    KIND_REDUCE_SCATTER = 9
    KIND_SCAN = 10
    KIND_EXSCAN = 11
    KIND_P2P = 12                 # point-to-point: tag is the user's tag
    KIND_ABORT = 13               # the peer stops on an error; payload: its message,
                                  # op: an AbortCode, root: the rank at fault or -1,
                                  # tag: 1 + the rank it stopped first (0: the peer)
    KIND_LAST = 14
    ABORT_MAX = 1024              # longest abort message
    # A header's kind byte: the kind in the low bits; in the high bits, the
    # object collective (lower-case method) that made a collective call, so
    # that mismatches name the user's call (index in OBJECT_CALLS, 0: none).
    KIND_MASK = 0x0F
    OBJ_SHIFT = 4
    OBJ_LAST = 10

# Why a peer stopped (the op field of a KIND_ABORT frame): the error class
# its peers raise in turn, so that every rank names the root cause.
cdef enum AbortCode:
    ABORT_MISMATCH = 0            # MismatchError
    ABORT_TIMEOUT = 1             # CollectiveTimeout
    ABORT_PEER_LOST = 2           # PeerLostError (root: the lost rank)
    ABORT_PROTOCOL = 3            # ProtocolError
    ABORT_OTHER = 4               # anything else (a user op raised, Ctrl-C...)

# Reduction ops (codes on the wire and in gloocy.ops).
cdef enum OpCode:
    OP_NONE = 0
    OP_SUM = 1
    OP_PROD = 2
    OP_MIN = 3
    OP_MAX = 4
    OP_BAND = 5
    OP_BOR = 6
    OP_BXOR = 7
    OP_LAND = 8
    OP_LOR = 9
    OP_LXOR = 10
    OP_MAXLOC = 11                # on (value, index) pairs; ties: lowest index
    OP_MINLOC = 12
    OP_USER = 13                  # a user's function (see set_user_op)
    OP_LAST = 14

# Element types (codes on the wire); DT_BYTES is untyped data.
cdef enum DtypeCode:
    DT_BYTES = 0
    DT_INT8 = 1
    DT_INT16 = 2
    DT_INT32 = 3
    DT_INT64 = 4
    DT_UINT8 = 5
    DT_UINT16 = 6
    DT_UINT32 = 7
    DT_UINT64 = 8
    DT_FLOAT16 = 9
    DT_FLOAT32 = 10
    DT_FLOAT64 = 11
    DT_BOOL = 12
    DT_COMPLEX64 = 13
    DT_COMPLEX128 = 14
    DT_LONGDOUBLE = 15
    DT_BFLOAT16 = 16              # ml_dtypes.bfloat16 (exported as uint16)
    DT_FLOAT_INT = 17             # (value, index) pairs as C structs, for MAXLOC/MINLOC
    DT_DOUBLE_INT = 18
    DT_LONG_INT = 19
    DT_2INT = 20
    DT_SHORT_INT = 21
    DT_CLONGDOUBLE = 22           # complex long double
    DT_LAST = 23

# States of an Xfer.
cdef enum XferState:
    XFER_IDLE = 0
    XFER_POSTED = 1
    XFER_DONE = 2

# Xfer.flags
cdef enum XferFlags:
    XF_ANY_TAG = 1                # p2p receive: any tag matches
    XF_HEAP = 2                   # a stashed unexpected frame; the pair owns buf

cdef enum:
    EAGER_MAX = 65536             # unexpected frames up to this are stashed, not parked;
                                  # a stash's first allocation at most

# acc[i] = acc[i] <op> src[i] for i < n elements.
ctypedef void (*reduce_fn)(void *acc, const void *src, int64_t n) noexcept nogil


# The wire header in front of every payload (48 bytes, little-endian).
# (comm_id, seq, tag) identifies a message; (kind, op, dtype, root, count)
# is the fingerprint of the collective that sent it.
ctypedef struct Header:
    uint32_t magic          # FRAME_MAGIC
    uint8_t version         # FRAME_VERSION
    uint8_t kind            # Kind
    uint8_t op              # OpCode, OP_NONE when the collective has none
    uint8_t dtype           # DtypeCode
    uint32_t comm_id        # communicator the message belongs to
    int32_t root            # root rank of the collective, -1 when none
    uint64_t seq            # collective sequence number on the communicator
    uint64_t tag            # step of the collective
    uint64_t count          # element count of the whole collective (fingerprint)
    uint64_t length         # payload bytes that follow this header


# One posted send or receive. The poster owns the memory and keeps it (and the
# buffer it points at) alive until `state` is XFER_DONE or the pair abandons it.
ctypedef struct Xfer:
    char *buf               # payload (sent from / received into)
    int64_t nbytes          # payload size
    int64_t done            # bytes moved so far (header included for sends)
    Header hdr              # sends: header to send; receives: what is expected
                            # (p2p receives: the matched frame's header after)
    int state               # XferState
    int flags               # XferFlags
    int peer                # receives: the rank the frame came from
    uint64_t order          # p2p receives: posting order, for matching
    int64_t cap             # XF_HEAP copies: bytes of buf so far (it grows as
                            # the payload comes, never ahead of it)
    Xfer *next              # link in the pair's queue


cdef class Pair:
    cdef readonly int rank            # our rank
    cdef readonly int peer            # the peer's rank
    cdef readonly bint closed         # closed locally; every post fails
    cdef readonly bint peer_gone      # the peer closed its end
    cdef readonly bint peer_said_bye  # ... and said goodbye first (clean exit)
    cdef Xfer *unexp_head             # frames that arrived before their receive
    cdef Xfer *unexp_tail             # (XF_HEAP copies, oldest first)
    cdef Xfer **wild_head             # the Context's any-source receives, shared
    cdef Xfer **wild_tail             # by its pairs (oldest first)

    # The receive an arriving frame goes to: the oldest match among `posted`
    # (this pair's list) and the any-source receives; unlinked from either.
    cdef Xfer *claim(self, const Header *h, Xfer **posted, Xfer **posted_tail) noexcept nogil

    # Queue a send / receive; never blocks. A receive is matched to incoming
    # frames by (comm_id, seq, tag) and checked with check_frame().
    cdef int post_send(self, Xfer *x) except -1 nogil
    cdef int post_recv(self, Xfer *x) except -1 nogil
    # Move bytes without blocking. Returns 1 if anything moved, else 0.
    cdef int progress(self) except -1 nogil
    # True while posted sends or receives are unfinished.
    cdef bint busy(self) noexcept nogil
    # True while a posted receive is unfinished (we wait for the peer).
    cdef bint expecting(self) noexcept nogil
    # What to poll(2) for when blocking: fd and events (0: nothing to wait for).
    cdef int wait_fd(self) noexcept nogil
    cdef short wait_events(self) noexcept nogil
    # Forget every posted Xfer (after a failure their memory goes away).
    cdef void abandon(self) noexcept nogil
    # Close; say goodbye first when `clean`. Idempotent.
    cdef int shutdown(self, bint clean) except -1
    # Withdraw a posted receive nothing has arrived for; True if withdrawn.
    cdef bint cancel_recv(self, Xfer *x) noexcept nogil
    # Best effort, before abandon(): tell the peer we stop because of `why`,
    # an AbortCode, which rank is at fault (`culprit`, -1: none known) and
    # which rank stopped first (`origin`, -1: we did); only when our stream
    # to it is between frames.
    cdef int say_abort(self, bytes why, int code, int culprit, int origin) except -1
    # For the node collectives (shared-memory pairs only; no-ops elsewhere):
    # make the peer's poll(2) on its wait_fd() return; forget such wake-ups.
    cdef void wake_peer(self) noexcept nogil
    cdef void drain_wakeups(self) noexcept nogil

    # The unexpected-frame queue, shared by every transport: stash() a frame
    # no receive matches (its payload then goes to the returned copy);
    # find_unexpected() the oldest one a receive matches (complete ones
    # only, unless `partial`); drop_unexpected() forgets and frees one.
    cdef Xfer *stash(self, const Header *h) except NULL nogil
    # Room for more of a stashed frame's payload (its buf doubles, up to
    # its length): memory follows the bytes that came, not the header's word.
    cdef int grow_stash(self, Xfer *u) except -1 nogil
    cdef Xfer *find_unexpected(self, const Xfer *want, bint partial) noexcept nogil
    cdef void drop_unexpected(self, Xfer *u) noexcept nogil
    # Deliver a complete stashed frame into receive x (checked), drop it.
    cdef int take_unexpected(self, Xfer *u, Xfer *x) except -1 nogil
    # MismatchError if a stashed frame belongs to receive x's call but has
    # another fingerprint (x itself matched none), or belongs to a call of
    # ours that is over (sequence number below `seq`).
    cdef int check_stash(self, const Xfer *x) except -1 nogil
    cdef Xfer *find_stale(self, uint32_t comm_id, uint64_t seq) noexcept nogil


# Xfer queues (head/tail singly linked lists), shared by every transport.
cdef void xfer_append(Xfer **head, Xfer **tail, Xfer *x) noexcept nogil
cdef bint xfer_unlink(Xfer **head, Xfer **tail, Xfer *x) noexcept nogil

# Shared by transports: frame checks that raise the right gloocy error.
cdef bint frame_matches(const Header *got, const Xfer *want) noexcept nogil
cdef int check_header(const Header *got, int rank, int peer) except -1 nogil
cdef int check_frame(const Header *got, const Xfer *want, int rank, int peer) except -1 nogil
cdef int check_unmatched(const Header *got, const Xfer *posted, int rank, int peer) except -1 nogil
cdef void init_header(Header *h) noexcept nogil
cdef int raise_peer_abort(const Xfer *u, int rank, int peer) except -1 with gil
# Park (stop reading the stream until its receive is posted) rather than stash
# a large collective frame that arrived early: only when a receive of the same
# communicator is posted, so that its call is running and will post it.
cdef bint should_park(const Header *h, const Xfer *posted) noexcept nogil


# One collective call in flight: the header template its frames carry, its
# deadline, and its reduction kernel.
ctypedef struct Coll:
    Header proto            # kind, op, dtype, root, count, comm_id, seq
    int64_t deadline        # CLOCK_MONOTONIC nanoseconds
    reduce_fn fn            # kernel for (op, dtype), NULL when none
    int64_t itemsize        # bytes per element


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass


cdef enum:
    MAX_SLEEPERS = 64             # threads blocked at once that can be woken


# The connections of one process to the others, shared by every communicator
# derived from them (frames carry their communicator's id). Threads take
# `lock` to touch the pairs, and drop it to block; whoever moves bytes wakes
# the sleepers, whose transfer it may have finished.
cdef class Links:
    cdef readonly int rank            # our rank among all the linked processes
    cdef readonly int size            # number of linked processes
    cdef readonly list pairs          # Pair per rank (None at our own rank)
    cdef pthread_mutex_t lock
    cdef Xfer *wild_head              # posted any-source receives of every
    cdef Xfer *wild_tail              # communicator, oldest first
    cdef uint64_t order               # p2p receives posted so far
    cdef readonly uint32_t next_id    # lowest communicator id never used here
    cdef int users                    # open contexts on these links
    cdef readonly bint closed         # closed for good (every context over them)
    cdef readonly object error        # first fatal error; poisons them all
    cdef bint failed                  # error is set (readable without the GIL)
    cdef int sleepers[MAX_SLEEPERS]   # eventfds of threads blocked in poll(2)
    cdef int nsleepers

    cdef void enter(self) noexcept nogil
    cdef bint try_enter(self) noexcept nogil   # enter() if the lock is free
    cdef void leave(self) noexcept nogil
    # Wake every sleeper (after moving bytes that may finish its transfer).
    cdef void wake(self) noexcept nogil
    cdef bint add_sleeper(self, int efd) noexcept nogil
    cdef void drop_sleeper(self, int efd) noexcept nogil


# The node segment (see _node.pxi): mapped by every rank of a world whose
# ranks are all on one host.
ctypedef struct NodeHead:
    uint64_t chunk                    # bytes of one rank's slot
    uint32_t nranks
    char _pad[52]

ctypedef struct NodeCtl:              # one rank's
    uint64_t phase                    # last phase it arrived at
    uint32_t sleeping                 # it sleeps: poke it through its pair
    char _pad0[52]
    Header fp[2]                      # its call at steps of each parity
    char _pad1[32]


cdef class Node:
    cdef char *base
    cdef size_t nbytes
    cdef int rank
    cdef int size
    cdef int64_t chunk
    cdef uint64_t step                # steps so far; slots alternate by parity
    cdef uint64_t owed                # phase A we left without waiting for all (0: none)
    cdef NodeHead *head
    cdef NodeCtl *ctl
    cdef char *data
    cdef char *slot(self, int r) noexcept nogil



cdef class Buf:
    """A buffer held for the length of one call (or of a request)."""
    cdef Py_buffer view
    cdef bint held
    cdef char *ptr          # first byte
    cdef int64_t nbytes     # size in bytes
    cdef int64_t itemsize   # bytes per element
    cdef int64_t count      # number of elements
    cdef int dtype          # DtypeCode, -1 when the format is not one of ours
    cdef str name           # argument name, for messages
    cdef int require_dtype(self) except -1


# Acquire obj's buffer (a Buf passes through); errors name the argument.
cdef Buf get_buffer(object obj, str name, bint writable)

cdef class Context:
    cdef readonly Node node           # the node segment, or None
    cdef readonly Links links         # the connections, shared with Dups
    cdef int *_world                  # links rank of each of our ranks
    cdef int *_local                  # our rank of each links rank (-1: none)
    cdef int _efd                     # eventfd others wake us by (-1: none yet)
    cdef bint has_efd(self) noexcept nogil
    cdef readonly int rank            # this process's rank
    cdef readonly int size            # number of ranks
    cdef readonly uint32_t comm_id    # tags every frame of this context
    cdef readonly uint64_t seq        # collectives issued so far
    cdef public double timeout        # default deadline of a call, seconds
    cdef readonly object error        # first fatal error; set => poisoned
    cdef readonly bint closed         # close() was called
    cdef list _pairs                  # Pair per rank (None at our own rank)
    cdef void **_pair_ptrs            # borrowed _pairs items, for nogil use
    cdef public int64_t segment       # pipeline segment size in bytes
    cdef public int64_t spin_ns       # how long to spin before blocking
    cdef public int64_t small_allreduce  # bytes up to which recursive doubling wins
    cdef int obj_call                 # object collective running (OBJECT_CALLS index)
    cdef dict env_algorithms          # GLOOCY_ALGORITHM_* at creation
    cdef readonly str last_algorithm  # algorithm the last bcast/allreduce/allgatherv/reduce/reduce_scatter ran
    cdef Header _recent[16]           # recent collective calls by seq % 16, for messages
    cdef list _to_self                # (tag, bytes) messages sent to our own rank
    cdef set _requests                # unfinished Isend/Irecv handles: their
                                      # Xfers are posted, so they must live
    cdef char *_space[2]              # temporary space kept between calls:
    cdef int64_t _space_size[2]       # [0] scratch(), [1] work()

    cdef char *space(self, int slot, int64_t nbytes) except NULL nogil
    # For an algorithm's own temporaries.
    cdef char *scratch(self, int64_t nbytes) except NULL nogil
    # For a copy of the caller's input that the algorithm may clobber.
    cdef char *work(self, int64_t nbytes) except NULL nogil

    cdef int post_send(self, Coll *c, Xfer *x, int peer, uint64_t tag,
                       const char *buf, int64_t n) except -1 nogil
    cdef int post_recv(self, Coll *c, Xfer *x, int peer, uint64_t tag,
                       char *buf, int64_t n) except -1 nogil
    # Drive every pair until `x` (or all `n` of `xs`) is done or the deadline.
    cdef int wait(self, Coll *c, Xfer *x) except -1 nogil
    cdef int waitall(self, Coll *c, Xfer *xs, int64_t n) except -1 nogil
    cdef int progress_all(self) except -1 nogil
    cdef int block(self, Coll *c) except -1 nogil
    # Check we may run, stamp the call and take the links' lock (held until
    # end(); only block() drops it meanwhile).
    cdef int begin(self, Coll *c, int kind, int op, int dtype, int root,
                   uint64_t count, object timeout) except -1
    cdef void end(self) noexcept
    cdef int check_usable(self) except -1
    cdef int check_stale(self, Coll *c, uint64_t seq) except -1
    cdef int sweep(self, Coll *c) except -1
    cdef int stamp(self, Coll *c, int kind, int op, int dtype, int root,
                   uint64_t count, double t) except -1
    # Between two spins of a wait: let other threads at the links.
    cdef int pause(self) except -1 nogil
    cdef int fail(self, BaseException exc, Coll *c) except -1
    cdef tuple abort_reason(self, BaseException exc)
    cdef int trace_timeout(self, object exc, Coll *c, object told) except -1
    cdef str rank_name(self, int world)
    cdef int begin_p2p(self, Coll *c, object timeout) except -1
    # Post a p2p receive x from `source` (-1: any rank) in posting order.
    cdef int post_p2p_recv(self, Xfer *x, int source) except -1 nogil
    cdef bint cancel_p2p_recv(self, Xfer *x, int source) noexcept nogil
    cdef int _send_to_self(self, int tag, bytes data) except -1
    cdef int _deliver_to_self(self, int tag, bytes data) except -1
    cdef int _check_peer(self, int rank, str name, bint any_ok) except -1
    # The oldest stashed p2p frame that receive x would take, from `source`
    # (-1: any rank); its sender in *peer.
    cdef Xfer *find_stashed(self, const Xfer *x, int source, int *peer) noexcept nogil
    # Wait (unless not `block`) until a stashed frame matches x; fill in
    # x.hdr, x.nbytes, x.peer without taking it (probe). 1 if found.
    cdef int probe_stashed(self, Coll *c, Xfer *x, int source,
                           bint block) except -1 nogil
    # A message we sent ourselves with `tag` (-1: any) into buf, as
    # (source, tag, nbytes), or None.
    cdef object take_from_self(self, char *buf, int64_t nbytes, int tag)
    cdef int _check_root(self, int root) except -1
    cdef void _linger(self, int64_t deadline) noexcept nogil
    # Entry points (cpdef: the API calls them in C; Python may pass keywords).
    # Buffers are objects with the buffer protocol or Bufs (see get_buffer).
    cpdef barrier(self, timeout=*)
    cpdef bcast(self, buf, int root, timeout=*, algorithm=*)
    cpdef allreduce(self, sendbuf, recvbuf, int op, timeout=*, algorithm=*)
    cpdef allgatherv(self, sendbuf, recvbuf, counts, displs=*, timeout=*,
                     algorithm=*)
    cpdef reduce(self, sendbuf, recvbuf, int op, int root, timeout=*,
                 algorithm=*)
    cpdef reduce_scatter(self, sendbuf, recvbuf, counts, int op, timeout=*,
                         algorithm=*)
    cpdef scan(self, sendbuf, recvbuf, int op, bint exclusive=*, timeout=*)
    cpdef gatherv(self, sendbuf, recvbuf, counts, displs, int root, timeout=*,
                  algorithm=*)
    cpdef scatterv(self, sendbuf, recvbuf, counts, displs, int root, timeout=*,
                   algorithm=*)
    cpdef alltoallv(self, sendbuf, sendcounts, senddispls, recvbuf,
                    recvcounts, recvdispls, timeout=*, algorithm=*)
    cpdef send(self, buf, int dest, int tag=*, timeout=*)
    cpdef recv(self, buf, int source=*, int tag=*, timeout=*)
    cpdef isend(self, buf, int dest, int tag=*)
    cpdef irecv(self, buf, int source=*, int tag=*)
    cpdef probe(self, int source=*, int tag=*, bint block=*, timeout=*)
