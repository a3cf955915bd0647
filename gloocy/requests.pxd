# Requests (requests.pyx): handles on nonblocking operations, with
# mpi4py's methods. The communicator makes them through the factories below.

from libc.stdint cimport int64_t

from gloocy._core cimport Context, P2PHandle


cdef class Request:
    cdef bint _active               # in flight: not REQUEST_NULL, not seen done
    cdef Request _of                # Request(other): other, which this one drives
    cdef object __weakref__
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
    cdef _unlist(self)              # off the context's obj_receives


cdef class Prequest(Request):
    cdef object _start              # () -> a new Request running the operation
    cdef Request _req               # the current run, None before Start
    cdef bint _freed


cdef class CollectiveRequest(Request):
    cdef object _event              # threading.Event, set when finished
    cdef object _error              # what the call raised, re-raised on wait
    cdef object _result


cdef class DoneRequest(Request):
    cdef int _source, _tag          # the Status it fills
    cdef int64_t _count
    cdef object _obj                # wait()'s object


cdef class PairRequest(Request):
    cdef Request _send, _recv       # Isendrecv: both halves
    cdef object _after              # called once both are done (unpack), or None


cdef class PartitionedRequest(Prequest):
    cdef int _parts                 # partitions of the buffer
    cdef bint _is_send
    cdef bytearray _ready           # sends: partitions readied in this run
    cdef int _nready
    cdef object _post               # () -> the Request moving the whole buffer
    cdef int _check_run(self, str what) except -1       # started, not freed
    cdef int _check_part(self, str what, str name, p) except -1
    cdef int _pending_parts(self) except -1     # error: a send not all readied


# Isend / Irecv / isend: a request on core handle h.
cdef P2PRequest p2p_request(object h, object keep, object unpack)
