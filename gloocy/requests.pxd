# Requests (requests.pyx): handles on nonblocking operations, with
# mpi4py's methods. The communicator makes them through the factories below.

from gloocy._core cimport Context, P2PHandle


cdef class Request:
    cdef bint _active               # in flight: not REQUEST_NULL, not seen done
    cdef Request _of                # Request(other): other, which this one drives
    # The primitives each kind provides (the base: a null request):
    # block until done -> 1; fill `status` (None or a Status) then.
    cdef int _wait(self, status, object timeout) except -1
    # One look without blocking -> 1 when done (`status` filled then).
    cdef int _test(self, status) except -1
    cdef object _value(self)        # wait()'s object (irecv), else None
    cdef bint _is_null(self)        # == REQUEST_NULL
    cdef int _complete(self, status) except -1   # Wait's body


cdef class P2PRequest(Request):
    cdef P2PHandle _h               # the core's transfer
    cdef object _keep               # what must live until done (the buffer)
    cdef object _decode             # bytes -> object (irecv into a buffer)
    cdef object _unpack             # scatters a derived datatype's data
    cdef int _done(self, status) except -1      # after the handle finished


cdef class ObjectRecvRequest(Request):
    cdef Context _ctx               # the communicator's core Context
    cdef int _source, _tag
    cdef object _result             # (source, tag, nbytes) once received
    cdef object _obj                # the object received
    cdef bint _cancelled
    cdef int _receive(self, bint block, object timeout) except -1


cdef class Prequest(Request):
    cdef object _start              # () -> a new Request running the operation
    cdef Request _req               # the current run, None before Start
    cdef bint _freed


cdef class CollectiveRequest(Request):
    cdef object _event              # threading.Event, set when finished
    cdef object _error              # what the call raised, re-raised on wait
    cdef object _result


# Isend / Irecv / isend: a request on core handle h.
cdef P2PRequest p2p_request(object h, object keep, object unpack)
