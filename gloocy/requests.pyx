# cython: language_level=3
"""Requests: handles on nonblocking operations, with mpi4py's methods.

Point-to-point requests (Isend, Irecv) are transfers posted on the
communicator's own connections; any wait on the communicator moves them.
Nonblocking collectives (intra- and intercommunicators', neighbourhood
ones, Idup's id agreement) are schedules in the core (_schedule.pxi): their
steps run whenever anything drives the connections (a Test or Wait of any
request, a blocking call), as MPI's weak progress; no thread runs them.

This file holds the base class and the point-to-point kinds; by role:
_req_persistent.pxi (Prequest, partitioned requests), _req_generalized.pxi
(Grequest), _req_collective.pxi (nonblocking collectives, requests done at
once), _req_multi.pxi (Waitall...).
"""

from libc.stdint cimport int64_t

from gloocy._core cimport Context, NbcHandle, P2PHandle, call_recv_new
from gloocy.status cimport Status

import pickle
import threading
import time

from gloocy import handles as _handles
from gloocy.constants import ANY_SOURCE, ANY_TAG, UNDEFINED
from gloocy.errors import (ERR_ARG, ERR_OTHER, ERR_REQUEST, ArgumentError,
                           ContextPoisoned, GloocyError)

__all__ = ["Request", "Prequest", "Grequest", "Waitall", "Testall", "Waitany", "Testany", "Waitsome",
           "Testsome", "REQUEST_NULL", "UNDEFINED"]

cdef int _ANY_SOURCE = ANY_SOURCE
cdef int _ANY_TAG = ANY_TAG
cdef object _loads = pickle.loads



def _set_pickle(dumps, loads, protocol, oob):
    """gloocy.MPI.pickle's hook: irecv's objects are read with loads."""
    global _loads
    _loads = loads


cdef inline int _fill(status, int source, int tag, int64_t count) except -1:
    """Fill `status` (None, a Status, or anything with mpi4py's _set)."""
    if status is None:
        return 0
    if isinstance(status, Status):
        (<Status>status).set(source, tag, count)
    else:
        status._set(source, tag, count)
    return 0


cdef int _empty(status) except -1:
    """The empty status of an inactive request: any source and tag, no
    data, no error."""
    if status is None:
        return 0
    _fill(status, _ANY_SOURCE, _ANY_TAG, 0)
    if isinstance(status, Status):
        (<Status>status).error = 0
    else:
        status.Set_error(0)
    return 0


cdef object _status_at(statuses, Py_ssize_t i):
    """statuses[i], or None past the end of a tuple; a list grows to have
    one (as mpi4py)."""
    if statuses is None:
        return None
    if isinstance(statuses, list):
        while len(statuses) <= i:
            statuses.append(Status())
    return statuses[i] if i < len(statuses) else None


cdef inline int _fill_from(status, result) except -1:
    if status is not None and result is not None:
        _fill(status, result[0], result[1], result[2])
    return 0


cdef class Request:
    """A nonblocking operation in flight. Once Wait or Test has seen it
    finish, it is inactive (== REQUEST_NULL), as in MPI: the multi-request
    functions skip it and waiting on it returns at once. ``Request()`` is a
    null one; ``Request(other)`` (or a Python subclass's, or
    ``Request.fromhandle(other.handle)``) is a new handle on other's
    operation, as in mpi4py: it compares equal to other, and whatever is
    done through either handle is done to the one operation."""

    def __init__(self, request=None):
        if request is None:
            return
        if not isinstance(request, Request):
            raise TypeError(f"request: expected a Request, got {request!r}")
        cdef Request other = (<Request>request)._target()
        if not other._is_null():
            self._of = other

    cdef Request _target(self):
        return self if self._of is None else self._of

    # -- the primitives (the base class: null, or a copy of another) ---------

    cdef int _wait(self, status, object timeout) except -1:
        if self._of is not None:
            return self._of._wait(status, timeout)
        return 1

    cdef int _test(self, status) except -1:
        if self._of is not None:
            return self._of._test(status)
        return 1

    cdef object _value(self):
        if self._of is not None:
            return self._of._value()
        return None

    cdef bint _is_null(self):
        if self._of is not None:
            return self._of._is_null()
        return not self._active

    cdef int _release(self) except -1:
        return 0

    cdef int _complete(self, status) except -1:
        cdef Request t = self if self._of is None else self._of
        if not t._active:
            _empty(status)
            return 1
        t._wait(status, None)
        t._active = False
        t._release()
        return 1

    # -- mpi4py's methods ------------------------------------------------------

    def Wait(self, status=None):
        """Block until done; fill `status` (source, tag, count)."""
        self._complete(status)
        return True

    def Test(self, status=None):
        """True when done (then `status` is filled)."""
        cdef Request t = self._target()
        if not t._active:
            _empty(status)
            return True
        if not t._test(status):
            return False
        t._active = False
        t._release()
        return True

    def Get_status(self, status=None):
        """Like Test, but the request stays as it is."""
        cdef Request t = self._target()
        if not t._active:
            _empty(status)
            return True
        return t._test(status) == 1

    def __eq__(self, other):
        if not isinstance(other, Request):
            return NotImplemented
        cdef Request a = self._target(), b = (<Request>other)._target()
        return a is b or (a._is_null() and b._is_null())

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None     # unhashable, as mpi4py's (== compares handles)

    def __bool__(self):
        return not self._is_null()

    def __reduce__(self):
        # As mpi4py: a null request pickles (as REQUEST_NULL), a live one
        # does not.
        if self._is_null():
            # REQUEST_NULL itself; another null handle as a new one (as mpi4py)
            return (_request_null, ()) if self is REQUEST_NULL else (type(self), ())
        raise ValueError(f"cannot pickle an active {type(self).__name__}")

    # -- handles (mpi4py's handle, fromhandle, toint/fromint, py2f/f2py) ------

    @property
    def handle(self):
        """An integer naming the operation in this process (0: a null
        request); fromhandle turns it back into a Request while the
        operation is alive."""
        cdef Request t = self._target()
        if t._is_null():
            return 0
        if t._handle == 0:              # named while it lives
            t._handle = _handles.weak_handle_of(t)
        return t._handle

    def toint(self):
        return self.handle

    py2f = toint

    @classmethod
    def fromhandle(cls, handle):
        """A new handle of class `cls` on the operation `handle` names."""
        if handle == 0:
            return cls()
        try:
            return cls(_handles.object_of(handle, Request))
        except ValueError:
            raise ArgumentError(f"handle: {handle!r} names no live request "
                                "here", ERR_REQUEST) from None

    fromint = f2py = fromhandle

    def free(self):
        """Free if not null (mpi4py's safe free)."""
        if not self._is_null():
            self.Free()

    def Cancel(self):
        """Withdraw the operation if it can still be (a receive nothing
        has arrived for); otherwise no effect."""
        if self._of is not None:
            return self._of.Cancel()
        self._check_active()

    def Free(self):
        """Forget the request (the operation itself completes anyway)."""
        if self._of is not None:
            return self._of.Free()
        self._check_active()
        self._active = False

    def _check_active(self):
        if not self._active:
            raise GloocyError("request: REQUEST_NULL (or done)", ERR_REQUEST)

    def get_status(self, status=None):
        return self.Get_status(status)

    def cancel(self):
        self.Cancel()

    @staticmethod
    def Get_status_any(requests, status=None):
        return Get_status_any(requests, status)

    @staticmethod
    def Get_status_all(requests, statuses=None):
        return Get_status_all(requests, statuses)

    @staticmethod
    def Get_status_some(requests, statuses=None):
        return Get_status_some(requests, statuses)

    get_status_any = Get_status_any
    get_status_all = Get_status_all
    get_status_some = Get_status_some

    def wait(self, status=None):
        """Wait; for an object receive (irecv), the object (once: a request
        already seen done gives None, as in mpi4py)."""
        cdef Request t = self._target()
        cdef bint was_active = t._active
        t._complete(status)
        return t._value() if was_active else None

    def test(self, status=None):
        """(done, object or None)."""
        cdef Request t = self._target()
        cdef bint was_active = t._active
        done = t.Test(status)
        return done, (t._value() if done and was_active else None)

    # mpi4py spells the multi-request functions as Request class methods too.
    @staticmethod
    def Waitall(requests, statuses=None):
        return Waitall(requests, statuses)

    @staticmethod
    def Testall(requests, statuses=None):
        return Testall(requests, statuses)

    @staticmethod
    def Waitany(requests, status=None):
        return Waitany(requests, status)

    @staticmethod
    def Testany(requests, status=None):
        return Testany(requests, status)

    @staticmethod
    def Waitsome(requests, statuses=None):
        return Waitsome(requests, statuses)

    @staticmethod
    def Testsome(requests, statuses=None):
        return Testsome(requests, statuses)

    @staticmethod
    def waitsome(requests, statuses=None):
        """(indices, objects) of the requests that finished."""
        done = Waitsome(requests, statuses)
        return done, (None if done is None
                      else [(<Request>requests[i])._value() for i in done])

    @staticmethod
    def testsome(requests, statuses=None):
        done = Testsome(requests, statuses)
        return done, (None if done is None
                      else [(<Request>requests[i])._value() for i in done])

    @staticmethod
    def waitall(requests, statuses=None):
        cdef Request r
        out = []
        for i, r in enumerate(requests):
            r._complete(_status_at(statuses, i))
            out.append(r._value())
        return out

    @staticmethod
    def testall(requests, statuses=None):
        """(all done, their objects or None)."""
        if not Testall(requests, statuses):
            return False, None
        return True, [(<Request>r)._value() for r in requests]

    @staticmethod
    def waitany(requests, status=None):
        """(index, object) of a finished request."""
        i = Waitany(requests, status)
        return i, (None if i == UNDEFINED else (<Request>requests[i])._value())

    @staticmethod
    def testany(requests, status=None):
        """(index, done, object)."""
        i, done = Testany(requests, status)
        return i, done, (None if i == UNDEFINED
                         else (<Request>requests[i])._value())


def _request_null():
    return REQUEST_NULL


cdef class P2PRequest(Request):
    """Isend / Irecv: a core handle plus, for objects, how to decode."""

    def __init__(self, handle, keep=None, decode=None, unpack=None):
        self._h = handle
        self._keep, self._decode, self._unpack = keep, decode, unpack
        self._active = True

    cdef int _done(self, status) except -1:
        cdef P2PHandle h = self._h
        if self._unpack is not None and h.finished:
            unpack, self._unpack = self._unpack, None
            unpack(h.got_nbytes)
        if h.finished and status is not None:
            _fill(status, h.got_source, h.got_tag, h.got_nbytes)
        return 1

    cdef int _wait(self, status, object timeout) except -1:
        while not self._h._step(True, timeout):
            pass
        return self._done(status)

    cdef int _test(self, status) except -1:
        if not self._h._step(False, None):
            return 0
        return self._done(status)

    def Cancel(self):
        self._check_active()
        self._h.withdraw()

    cdef object _value(self):
        cdef P2PHandle h = self._h
        if self._decode is None or h._cancelled:
            return None
        while not h._step(True, None):
            pass
        return self._decode(h.result)


cdef P2PRequest p2p_request(object h, object keep, object unpack):
    cdef P2PRequest r = P2PRequest.__new__(P2PRequest)
    r._h = <P2PHandle?>h
    r._keep = keep
    r._unpack = unpack
    r._active = True
    return r


cdef class ObjectRecvRequest(Request):
    """irecv of a Python object: its size is unknown until it arrives, so
    the receive happens at wait/test time."""

    def __init__(self, Context ctx, int source, int tag):
        self._ctx, self._source, self._tag = ctx, source, tag
        self._active = True
        if source == -1 or source == ctx.rank:
            if ctx.obj_receives is None:
                ctx.obj_receives = []
            ctx.obj_receives.append(self)

    def Cancel(self):
        """Nothing is received before wait/test: withdrawing always works
        until then."""
        if self._result is None:
            self._cancelled = True
            self._unlist()

    def _poll(self):
        """Take the message if it is there (a synchronous send to ourselves
        waits for the receives posted before it)."""
        self._receive(False, None)

    cdef int _receive(self, bint block, object timeout) except -1:
        if self._result is None and not self._cancelled:
            got = call_recv_new(self._ctx, self._source, self._tag, block,
                                timeout)
            if got is None:
                return 0
            data, source, tag = got
            self._result = (source, tag, len(data))
            self._obj = _loads(data) if len(data) else None
            self._unlist()
        return 1

    cdef _unlist(self):
        cdef list waiting = self._ctx.obj_receives
        if waiting:
            for k in range(len(waiting)):
                if waiting[k] is self:
                    del waiting[k]
                    break

    cdef int _wait(self, status, object timeout) except -1:
        self._receive(True, timeout)
        _fill_from(status, self._result)
        return 1

    cdef int _test(self, status) except -1:
        if not self._receive(False, None):
            return 0
        _fill_from(status, self._result)
        return 1

    cdef object _value(self):
        return self._obj


cdef class DoneRequest(Request):
    """An operation already complete (a matched message received at once):
    its Status and, for irecv, its object."""

    cdef int _wait(self, status, object timeout) except -1:
        _fill(status, self._source, self._tag, self._count)
        return 1

    cdef int _test(self, status) except -1:
        _fill(status, self._source, self._tag, self._count)
        return 1

    cdef object _value(self):
        return self._obj


cdef class PairRequest(Request):
    """Isendrecv: a send and a receive as one request (the receive's
    status)."""

    cdef int _wait(self, status, object timeout) except -1:
        self._send._wait(None, timeout)
        self._recv._wait(status, timeout)
        self._finish()
        return 1

    cdef int _test(self, status) except -1:
        if not (self._send._test(None) and self._recv._test(status)):
            return 0
        self._finish()
        return 1

    def _finish(self):
        if self._after is not None:
            after, self._after = self._after, None
            after()

    def Cancel(self):
        self._check_active()
        self._recv.Cancel()


def pair_request(Request send, Request recv, after):
    cdef PairRequest r = PairRequest.__new__(PairRequest)
    r._send, r._recv, r._after = send, recv, after
    r._active = True
    return r


def done_request(int source, int tag, int64_t count, obj):
    cdef DoneRequest r = DoneRequest.__new__(DoneRequest)
    r._source, r._tag, r._count, r._obj = source, tag, count, obj
    r._active = True
    return r


REQUEST_NULL = Request()


include "_req_persistent.pxi"
include "_req_generalized.pxi"
include "_req_collective.pxi"
include "_req_multi.pxi"
