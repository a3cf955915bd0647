# The abstract Pair: what every transport implements (see _core.pxd).

cdef int _abstract(str what) except -1 with gil:
    raise NotImplementedError(f"Pair.{what} is abstract")


cdef class Pair:
    """Tagged, ordered, reliable byte messages to one peer (abstract)."""

    def __cinit__(self, *args, **kwargs):
        self.rank = -1
        self.peer = -1

    cdef int post_send(self, Xfer *x) except -1 nogil:
        return _abstract("post_send")

    cdef int post_recv(self, Xfer *x) except -1 nogil:
        return _abstract("post_recv")

    cdef int progress(self) except -1 nogil:
        return _abstract("progress")

    cdef bint busy(self) noexcept nogil:
        return False

    cdef int wait_fd(self) noexcept nogil:
        return -1

    cdef short wait_events(self) noexcept nogil:
        return 0

    cdef void abandon(self) noexcept nogil:
        pass

    cdef int shutdown(self, bint clean) except -1:
        self.closed = True
        return 0

    def close(self, clean=True):
        self.shutdown(clean)

    def __repr__(self):
        return (f"<{type(self).__name__} rank {self.rank} -> peer "
                f"{self.peer}{' closed' if self.closed else ''}>")
