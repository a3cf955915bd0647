from libc.stdint cimport int64_t
from gloocy._core cimport Pair, Xfer, Header

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len

cdef enum:
    WOULD_BLOCK = -1        # stream_send/stream_recv: nothing can move now


# Frames (header + payload) over an ordered byte stream. A transport only
# says how bytes go in and out of its stream (stream_send, stream_recv,
# stream_close) and which fd to poll; matching, parking, stashing and every
# check of what arrives are done here, once for all.
cdef class StreamPair(Pair):
    cdef int fd                 # what poll(2) watches; -1 once closed
    cdef readonly str address   # where the peer is, for messages
    cdef Xfer *send_head        # posted sends, sent in order
    cdef Xfer *send_tail
    cdef Xfer *recv_head        # posted receives not matched to a frame yet
    cdef Xfer *recv_tail
    cdef Xfer *in_x             # receive whose payload is arriving
    cdef Header in_hdr          # incoming header (parked when it matched nothing)
    cdef int64_t in_hdr_got     # bytes of in_hdr read so far
    cdef bint parked            # in_hdr complete but no receive posted for it
    cdef char *stage            # read-ahead buffer: small frames cost one read
    cdef int64_t st_lo          # unread bytes are stage[st_lo:st_hi]
    cdef int64_t st_hi
    cdef int64_t read_ahead     # bytes asked for when reading into stage
    cdef int64_t direct_min     # payloads left at least this: read into place
    cdef int send_err           # errno of a failed send, raised once what the
                                # peer sent before it went (its reason) is read
    cdef bint send_mid          # the head send is part-sent (kept here: after a
                                # failure its Xfer may be freed memory)
    cdef bint cut               # abandon() dropped a frame part-way, in or out:
                                # the stream can't be parsed past it

    # The transport's part. stream_send: write some of the n pieces, return
    # how many bytes (WOULD_BLOCK: none fit now; after setting send_err:
    # the stream is broken, raise after reading). stream_recv: read up to n
    # bytes into dst, return how many (0: the peer closed its end and
    # nothing is left; WOULD_BLOCK: nothing yet). Both raise PeerLostError
    # (via lost()) on a broken stream. stream_close: release the stream.
    cdef ssize_t stream_send(self, iovec *iov, int n) except -2 nogil
    cdef ssize_t stream_recv(self, char *dst, size_t n) except -2 nogil
    cdef void stream_close(self) noexcept nogil

    # A transport's own ways (shared memory: single copies, _shm.pyx).
    # send_aside: before sending the head frame x: 0, send it as usual;
    # 1, not now (nothing moved); 2, not now (something moved). side_frame:
    # a header has come (in_hdr): 1 if the transport took it (it then
    # resets in_hdr_got, or sets in_x to read a payload into); the default
    # takes none and refuses the single-copy frames it does not carry.
    cdef int send_aside(self, Xfer *x) except -1 nogil
    cdef int side_frame(self) except -1 nogil
    cdef int not_carried(self) except -1 with gil
    cdef int send_some(self) except -1 nogil
    cdef int recv_some(self) except -1 nogil
    cdef int64_t read_into(self, char *dst, int64_t need, bint direct) except -2 nogil
    cdef int start_payload(self) except -1 nogil
    cdef Xfer *any_source_for(self, Xfer *u) noexcept nogil
    cdef int hand_to_any_source(self, Xfer *u) except -1 nogil
    cdef bint any_source_waits(self) noexcept nogil
    cdef int lost(self, const char *what, int err) except -1 with gil
