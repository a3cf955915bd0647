# Frames (_frames.pxi): the wire header, its kinds and codes, the Xfer that
# sends or receives one frame, and the checks every transport applies to an
# arriving header. Python names: KIND_NAMES, OBJECT_CALLS.

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
    KIND_P2P_ACK = 14             # a synchronous send was matched: seq is the
                                  # sender's ack id, no payload, tag 0
    KIND_P2P_READ = 15            # shared memory: the answer to a P2P_SINGLE
                                  # frame (op: a ReadAnswer), no payload
    KIND_LAST = 16
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
    XF_SELF_ONLY = 4              # p2p receive in the any-source list that only
                                  # a send of this process to itself may match

# The op byte of a KIND_P2P frame (OP_NONE for a standard send): bits.
cdef enum P2PMode:
    P2P_SYNC = 1                  # Ssend: the receiver answers with a KIND_P2P_ACK
                                  # carrying this frame's seq once it matches it
    P2P_SINGLE = 2                # shared memory, single copy: no payload follows;
                                  # it is `length` bytes at address `count` in the
                                  # sender, which waits for a KIND_P2P_READ
    P2P_STREAMED = 4              # the payload of the P2P_SINGLE frame just
                                  # refused (READ_REFUSED), for its receive only
    P2P_MODES = 7                 # every bit a KIND_P2P frame may carry

# The op byte of a KIND_P2P_READ frame.
cdef enum ReadAnswer:
    READ_DONE = 0                 # read: the send is done
    READ_REFUSED = 1              # could not read (the kernel refused, or
                                  # GLOOCY_CMA=0): send the payload as a
                                  # P2P_STREAMED frame, and no more P2P_SINGLE
    READ_SPLIT = 2                # the receiver reads the first `tag` bytes;
                                  # the sender writes the rest to address
                                  # `count` + `tag` in the receiver, then
                                  # answers READ_WRITTEN (and waits for DONE)
    READ_WRITTEN = 3              # the sender's answer to READ_SPLIT: root 0
                                  # if it wrote its part, else 1 (the receiver
                                  # reads it too)


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


# Shared by transports: frame checks that raise the right gloocy error.
cdef bint frame_matches(const Header *got, const Xfer *want) noexcept nogil
cdef int check_header(const Header *got, int rank, int peer) except -1 nogil
cdef int check_frame(const Header *got, const Xfer *want, int rank, int peer) except -1 nogil
cdef int check_unmatched(const Header *got, const Xfer *posted, int rank, int peer) except -1 nogil
cdef void init_header(Header *h) noexcept nogil
cdef int raise_peer_abort(const Xfer *u, int rank, int peer) except -1 with gil
# e.g. 'allreduce #3 (count=4, dtype=float64, op=SUM)', for messages.
cdef str describe_call(const Header *h)
