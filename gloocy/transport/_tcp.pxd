from libc.stdint cimport int64_t
from gloocy._core cimport Pair, Xfer, Header


cdef class TcpPair(Pair):
    cdef int fd                 # connected non-blocking socket, -1 when closed
    cdef readonly str address   # the peer's host:port, for messages
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

    cdef int send_some(self) except -1 nogil
    cdef int recv_some(self) except -1 nogil
    cdef int64_t read_into(self, char *dst, int64_t need, bint direct) except -2 nogil
    cdef int start_payload(self) except -1 nogil
    cdef int lost(self, const char *what, int err) except -1 with gil
