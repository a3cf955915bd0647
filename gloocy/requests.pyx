# cython: language_level=3
"""Requests: handles on nonblocking operations, with mpi4py's methods.

Point-to-point requests (Isend, Irecv) are transfers posted on the
communicator's own connections; any wait on the communicator moves them.
Nonblocking collectives run, in the order they were started, on a worker
thread of the communicator over a duplicate of it (its own connections), so
they progress while the caller computes; the idle worker sleeps on a queue.
"""

from libc.stdint cimport int64_t

from gloocy._core cimport Context, P2PHandle, call_recv_new
from gloocy.status cimport Status

import pickle
import queue
import threading
import time
import weakref

from gloocy.constants import ANY_SOURCE, ANY_TAG, UNDEFINED
from gloocy.errors import ERR_REQUEST, ContextPoisoned, GloocyError

__all__ = ["Request", "Prequest", "Waitall", "Testall", "Waitany", "Testany", "Waitsome",
           "Testsome", "REQUEST_NULL", "UNDEFINED"]

cdef int _ANY_SOURCE = ANY_SOURCE
cdef int _ANY_TAG = ANY_TAG
cdef object _loads = pickle.loads


cdef inline int _fill(status, int source, int tag, int64_t count) except -1:
    """Fill `status` (None, a Status, or anything with mpi4py's _set)."""
    if status is None:
        return 0
    if isinstance(status, Status):
        (<Status>status).set(source, tag, count)
    else:
        status._set(source, tag, count)
    return 0


cdef inline int _fill_from(status, result) except -1:
    if status is not None and result is not None:
        _fill(status, result[0], result[1], result[2])
    return 0


cdef class Request:
    """A nonblocking operation in flight. Once Wait or Test has seen it
    finish, it is inactive (== REQUEST_NULL), as in MPI: the multi-request
    functions skip it and waiting on it returns at once. ``Request()`` is a
    null one; ``Request(other)`` (or a Python subclass's) is a new handle on
    other's operation, as in mpi4py."""

    def __init__(self, request=None):
        if request is None:
            return
        if not isinstance(request, Request):
            raise TypeError(f"request: expected a Request, got {request!r}")
        cdef Request other = <Request>request
        self._active = other._active
        if other._active:
            self._of = other if other._of is None else other._of

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
        return not self._active

    cdef int _complete(self, status) except -1:
        if not self._active:
            _fill(status, _ANY_SOURCE, _ANY_TAG, 0)
            return 1
        self._wait(status, None)
        self._active = False
        return 1

    # -- mpi4py's methods ------------------------------------------------------

    def Wait(self, status=None):
        """Block until done; fill `status` (source, tag, count)."""
        self._complete(status)
        return True

    def Test(self, status=None):
        """True when done (then `status` is filled)."""
        if not self._active:
            _fill(status, _ANY_SOURCE, _ANY_TAG, 0)
            return True
        if not self._test(status):
            return False
        self._active = False
        return True

    def Get_status(self, status=None):
        """Like Test, but the request stays as it is."""
        if not self._active:
            _fill(status, _ANY_SOURCE, _ANY_TAG, 0)
            return True
        return self._test(status) == 1

    def __eq__(self, other):
        if not isinstance(other, Request):
            return NotImplemented
        return self is other or (self._is_null() and (<Request>other)._is_null())

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return object.__hash__(self)

    def __bool__(self):
        return not self._is_null()

    def __reduce__(self):
        # As mpi4py: a null request pickles (as REQUEST_NULL), a live one
        # does not.
        if self._is_null():
            return _request_null, ()
        raise TypeError(f"cannot pickle an active {type(self).__name__}")

    def Cancel(self):
        """Withdraw the operation if it can still be (a receive nothing
        has arrived for); otherwise no effect."""
        self._check_active()
        if self._of is not None:
            self._of.Cancel()

    def Free(self):
        """Forget the request (the operation itself completes anyway)."""
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
        raise NotImplementedError("Get_status_any (MPI-4.1) is not in gloocy yet")

    Get_status_all = Get_status_some = Get_status_any

    def wait(self, status=None):
        """Wait; for an object receive (irecv), the object."""
        self._complete(status)
        return self._value()

    def test(self, status=None):
        """(done, object or None)."""
        done = self.Test(status)
        return done, (self._value() if done else None)

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
            r._complete(None if statuses is None else statuses[i])
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

    def __init__(self, ctx, int source, int tag):
        self._ctx, self._source, self._tag = ctx, source, tag
        self._active = True

    def Cancel(self):
        """Nothing is received before wait/test: withdrawing always works
        until then."""
        if self._result is None:
            self._cancelled = True

    cdef int _receive(self, bint block, object timeout) except -1:
        if self._result is None and not self._cancelled:
            got = call_recv_new(self._ctx, self._source, self._tag, block,
                                timeout)
            if got is None:
                return 0
            data, source, tag = got
            self._result = (source, tag, len(data))
            self._obj = _loads(data)
        return 1

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


cdef class Prequest(Request):
    """A persistent request (Send_init, Recv_init): Start() runs the
    operation again; done, it is inactive but not REQUEST_NULL until Free."""

    def __init__(self, start=None):
        """start: () -> the Request of one run; or a Prequest to copy
        (None or REQUEST_NULL: a null one)."""
        cdef Prequest other
        if isinstance(start, Prequest):
            other = <Prequest>start
            self._start, self._req = other._start, other._req
            self._active, self._freed = other._active, other._freed
        elif start is None or isinstance(start, Request):
            if start is not None and not (<Request>start)._is_null():
                raise TypeError("request: a Prequest copies only a Prequest")
            self._freed = True
        else:
            self._start = start

    def Start(self):
        if self._freed:
            raise GloocyError("request: freed persistent request", ERR_REQUEST)
        self._req = self._start()
        self._active = True

    @staticmethod
    def Startall(requests):
        for r in requests:
            r.Start()

    cdef int _wait(self, status, object timeout) except -1:
        return self._req._wait(status, timeout)

    cdef int _test(self, status) except -1:
        return self._req._test(status)

    cdef object _value(self):
        return None if self._req is None else self._req._value()

    def Cancel(self):
        if self._req is not None and self._active:
            self._req.Cancel()

    def Free(self):
        self._freed = True
        self._active = False

    cdef bint _is_null(self):
        return self._freed


cdef class CollectiveRequest(Request):
    """A collective running on the communicator's worker thread."""

    def __init__(self, value=None):
        self._event = threading.Event()
        self._result = value
        self._active = True

    @classmethod
    def _finished(cls):
        """A request that is already complete (e.g. to PROC_NULL)."""
        cdef CollectiveRequest request = cls()
        request._event.set()
        return request

    def _run(self, call):
        try:
            out = call()
            if out is not None:
                self._result = out
        except BaseException as e:      # re-raised in the waiting thread
            self._error = e
        finally:
            self._event.set()

    cdef int _wait(self, status, object timeout) except -1:
        self._event.wait()
        if self._error is not None:
            raise self._error
        return 1

    cdef int _test(self, status) except -1:
        if not self._event.is_set():
            return 0
        if self._error is not None:
            raise self._error
        return 1

    cdef object _value(self):
        return self._result


class Worker:
    """One thread running a communicator's nonblocking collectives in order."""

    def __init__(self, name):
        self._jobs = queue.SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name=name,
                                        daemon=True)
        self._thread.start()
        _live_workers.add(self)

    def submit(self, call, request):
        if self._stopped:
            raise ContextPoisoned("communicator is closed: this process left "
                                  "the job (Finalize or exit)")
        self._jobs.put((call, request))
        return request

    def _loop(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            call, request = job
            request._run(call)

    def stop(self):
        """Run what was started, then end the thread."""
        if not self._stopped:
            self._stopped = True
            self._jobs.put(None)
        self._thread.join()
        _live_workers.discard(self)


_live_workers = weakref.WeakSet()


def stop_workers():
    """Let every communicator's started nonblocking collectives finish and
    end their threads (a process that leaves completes what it started)."""
    for worker in list(_live_workers):
        worker.stop()


def Waitall(requests, statuses=None):
    cdef Py_ssize_t i
    cdef list rs
    if statuses is None and type(requests) is list:
        rs = <list>requests
        for i in range(len(rs)):
            r = rs[i]
            if r is not None:
                (<Request?>r)._complete(None)
        return True
    for i, r in enumerate(requests):
        if r is not None:
            (<Request?>r)._complete(None if statuses is None else statuses[i])
    return True


def Testall(requests, statuses=None):
    # Ask every one (each makes progress) before finishing any.
    cdef Request r
    for r in requests:
        if r is not None and r._active and not r._test(None):
            return False
    for i, r in enumerate(requests):
        if r is not None:
            r.Test(None if statuses is None else statuses[i])
    return True


cdef inline bint _active(r):
    return r is not None and (<Request?>r)._active


cdef bint _any_active(requests) except -1:
    for r in requests:
        if _active(r):
            return True
    return False


cdef object _first_done(requests, status):
    for i, r in enumerate(requests):
        if _active(r) and r.Test(status):
            return i
    return None


def Waitany(requests, status=None):
    """Index of a finished request (UNDEFINED if none is active)."""
    if not _any_active(requests):
        _fill(status, _ANY_SOURCE, _ANY_TAG, 0)
        return UNDEFINED
    delay = 0.0
    while True:
        i = _first_done(requests, status)
        if i is not None:
            return i
        time.sleep(delay)           # each Test made progress; back off a bit
        delay = min(0.001, delay + 0.00005)


def Testany(requests, status=None):
    """(index, done): index UNDEFINED when none has finished (done is True
    when none is active)."""
    if not _any_active(requests):
        _fill(status, _ANY_SOURCE, _ANY_TAG, 0)
        return UNDEFINED, True
    i = _first_done(requests, status)
    return (UNDEFINED, False) if i is None else (i, True)


def Waitsome(requests, statuses=None):
    """Indices of the requests that have finished (at least one; None when
    none is active)."""
    if not _any_active(requests):
        return None
    delay = 0.0
    while True:
        out = Testsome(requests, statuses)
        if out:
            return out
        time.sleep(delay)
        delay = min(0.001, delay + 0.00005)


def Testsome(requests, statuses=None):
    """Indices of the requests that have finished now (None when none is
    active)."""
    if not _any_active(requests):
        return None
    out = []
    for i, r in enumerate(requests):
        if not (_active(r) and r.Get_status()):
            continue
        status = None
        if statuses is not None:
            if isinstance(statuses, list) and len(statuses) <= len(out):
                statuses.append(Status())     # as mpi4py: the list grows
            if len(out) < len(statuses):
                status = statuses[len(out)]
        r.Test(status)
        out.append(i)
    return out


REQUEST_NULL = Request()
