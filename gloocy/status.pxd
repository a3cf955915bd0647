# Status (status.pyx): where a received message came from and how big it
# is. A bottom module: it imports only gloocy.constants.

from libc.stdint cimport int64_t


cdef class Status:
    # The fields lie in a row, in this order: Status.tomemory views them.
    cdef public int source          # rank the message came from
    cdef public int tag             # its tag
    cdef public int64_t count       # its size in bytes
    cdef public int error           # error code (0: none)
    cdef public bint cancelled      # the receive was withdrawn
    cdef object __weakref__
    # Fill from a finished operation.
    cdef void set(self, int source, int tag, int64_t count) noexcept
