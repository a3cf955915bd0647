# Requests (requests.pyx): handles on nonblocking operations, with
# mpi4py's methods. The communicator makes them through the factories below.

from libc.stdint cimport int64_t

from gloocy._core cimport Context, NbcHandle, P2PHandle


cdef class Request:
    cdef bint _active               # in flight: not REQUEST_NULL, not seen done
    cdef Request _of                # Request(other): other, which this one drives
    cdef int64_t _handle            # Request.handle once asked for (0: not yet)
    cdef object __weakref__         # the handle table holds requests weakly
    cdef Request _target(self)      # the operation's own object: _of, or self
    # The primitives each kind provides (the base: a null request):
    # block until done -> 1; fill `status` (None or a Status) then.
    cdef int _wait(self, status, object timeout) except -1
    # One look without blocking -> 1 when done (`status` filled then).
    cdef int _test(self, status) except -1
    cdef object _value(self)        # wait()'s object (irecv), else None
    cdef bint _is_null(self)        # == REQUEST_NULL
    cdef int _complete(self, status) except -1   # Wait's body
    # Seen done by Wait/Test (now inactive): the base does nothing; a
    # Grequest runs its free_fn.
    cdef int _release(self) except -1


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


cdef class NbcRequest(Request):
    cdef NbcHandle _h               # the core's schedule
    cdef object _keep               # what must live until done (Messages)
    cdef object _after              # () run once done (unpack...), or None
    cdef int _finish(self) except -1


# A nonblocking collective's request on schedule h.
cdef NbcRequest nbc_request(NbcHandle h, object keep, object after)


cdef class CollectiveRequest(Request):
    cdef object _result             # wait()'s object


cdef class DoneRequest(Request):
    cdef int _source, _tag          # the Status it fills
    cdef int64_t _count
    cdef object _obj                # wait()'s object


cdef class PairRequest(Request):
    cdef Request _send, _recv       # Isendrecv: both halves
    cdef object _after              # called once both are done (unpack), or None


cdef class Grequest(Request):
    cdef object _query_fn           # the user's callbacks, or None
    cdef object _free_fn
    cdef object _cancel_fn
    cdef tuple _args                # passed to each callback
    cdef dict _kwargs
    cdef object _done               # threading.Event, set by Complete
    cdef object _obj                # complete(obj)'s object: wait()'s value
    cdef bint _free_at_complete     # Free came before Complete
    cdef bint _released             # free_fn has run
    cdef Grequest _own(self, str what)          # the operation's object (not null)
    cdef int _query(self, status) except -1     # query_fn -> status
    cdef int _run_free(self) except -1          # free_fn, once


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
