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

from gloocy import handles as _handles
from gloocy.constants import ANY_SOURCE, ANY_TAG, UNDEFINED
from gloocy.errors import (ERR_ARG, ERR_REQUEST, ArgumentError, ContextPoisoned,
                           GloocyError)

__all__ = ["Request", "Prequest", "Waitall", "Testall", "Waitany", "Testany", "Waitsome",
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
            _empty(status)
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
            _empty(status)
            return True
        if not self._test(status):
            return False
        self._active = False
        return True

    def Get_status(self, status=None):
        """Like Test, but the request stays as it is."""
        if not self._active:
            _empty(status)
            return True
        return self._test(status) == 1

    def __eq__(self, other):
        if not isinstance(other, Request):
            return NotImplemented
        if self._is_null() or (<Request>other)._is_null():
            return self._is_null() and (<Request>other)._is_null()
        # Request(r) is a second handle on r's operation: equal to it
        return (self if self._of is None else self._of) is (
            other if (<Request>other)._of is None else (<Request>other)._of)

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
            # REQUEST_NULL itself; another null handle as a new one (as mpi4py)
            return (_request_null, ()) if self is REQUEST_NULL else (type(self), ())
        raise ValueError(f"cannot pickle an active {type(self).__name__}")

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

    # -- mpi4py's object model: integer handles, free (gloocy.handles) --------

    @property
    def handle(self):
        if self._is_null():
            return 0
        return _handles.handle_of(("Request", id(self if self._of is None else self._of)),
                                  self)

    def toint(self):
        return self.handle

    py2f = toint

    @classmethod
    def fromhandle(cls, handle):
        if int(handle) == 0:
            return cls()
        return cls(_handles.object_of(handle, Request))

    fromint = f2py = fromhandle

    def free(self):
        """Free the request unless it is null."""
        if not self._is_null():
            _handles.forget(("Request", id(self if self._of is None else self._of)))
            self.Free()

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


cdef class PartitionedRequest(Prequest):
    """Psend_init / Precv_init (MPI-4): the buffer is `partitions` equal
    parts. A send goes out, whole, once every part of it has been readied
    (Pready*) in this run; a receive is one receive of the whole buffer, so
    Parrived(i) says whether all of it has arrived (MPI allows that)."""

    def __init__(self, post, int partitions, bint is_send):
        Prequest.__init__(self, post)
        self._post, self._parts, self._is_send = post, partitions, is_send
        self._start = self._begin

    def _begin(self):
        self._ready = bytearray(self._parts)
        self._nready = 0
        return None if self._is_send else self._post()

    cdef int _check_run(self, str what) except -1:
        if self._freed:
            raise GloocyError(f"{what}: freed partitioned request", ERR_REQUEST)
        if not self._active:
            raise GloocyError(f"{what}: the partitioned request is not started "
                              "(Start it first)", ERR_REQUEST)
        return 0

    cdef int _check_part(self, str what, str name, p) except -1:
        if not isinstance(p, int) or not 0 <= p < self._parts:
            raise ArgumentError(f"{what}: {name}: {p!r} is not a partition "
                                f"(0..{self._parts - 1})", ERR_ARG)
        return 0

    def Pready(self, partition):
        """Partition `partition` of the send buffer is ready to go."""
        self.Pready_list([partition])

    def Pready_range(self, partition_low, partition_high):
        """Partitions partition_low..partition_high (inclusive) are ready."""
        self._check_part("Pready_range", "partition_low", partition_low)
        self._check_part("Pready_range", "partition_high", partition_high)
        if partition_high < partition_low:
            raise ArgumentError(f"Pready_range: partition_high {partition_high} "
                                f"< partition_low {partition_low}", ERR_ARG)
        self.Pready_list(range(partition_low, partition_high + 1))

    def Pready_list(self, partitions):
        """The partitions listed are ready."""
        cdef str what = "Pready"
        self._check_run(what)
        if not self._is_send:
            raise GloocyError("Pready: a receive's partitions are not readied "
                              "(Pready is for Psend_init requests)", ERR_REQUEST)
        parts = list(partitions)
        for p in parts:
            self._check_part(what, "partition", p)
        for p in parts:
            if self._ready[p]:
                raise GloocyError(f"Pready: partition {p} is ready already in "
                                  "this run", ERR_ARG)
            self._ready[p] = 1
            self._nready += 1
        if self._nready == self._parts and self._req is None:
            self._req = self._post()

    def Parrived(self, partition):
        """Has partition `partition` of the receive buffer arrived?"""
        self._check_run("Parrived")
        if self._is_send:
            raise GloocyError("Parrived: is for Precv_init requests", ERR_REQUEST)
        self._check_part("Parrived", "partition", partition)
        return self._req._test(None) == 1

    cdef int _pending_parts(self) except -1:
        if self._req is None:
            missing = [i for i in range(self._parts) if not self._ready[i]]
            raise GloocyError(
                f"partitioned send: partitions {missing} were never readied "
                "(Pready) in this run: waiting would never end", ERR_REQUEST)
        return 0

    cdef int _wait(self, status, object timeout) except -1:
        self._pending_parts()
        return self._req._wait(status, timeout)

    cdef int _test(self, status) except -1:
        if self._req is None:
            return 0
        return self._req._test(status)


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
        # It runs collectives only: no receive waits for it (see _p2p.pxi).
        self._thread._gloocy_worker = True
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
            (<Request?>r)._complete(_status_at(statuses, i))
    return True


def Testall(requests, statuses=None):
    # Ask every one (each makes progress) before finishing any.
    cdef Request r
    for r in requests:
        if r is not None and r._active and not r._test(None):
            return False
    for i, r in enumerate(requests):
        if r is not None:
            r.Test(_status_at(statuses, i))
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
        _empty(status)
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
        _empty(status)
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


def Get_status_all(requests, statuses=None):
    """Are all the requests done? (None of them becomes inactive; the
    statuses are filled when they are.)"""
    cdef Request r
    for r in requests:
        if r is not None and r._active and not r._test(None):
            return False
    for i, r in enumerate(requests):
        if r is not None:
            r.Get_status(_status_at(statuses, i))
    return True


def Get_status_any(requests, status=None):
    """(index, done) of a request that is done, which stays as it is;
    (UNDEFINED, True) when none is active."""
    if not _any_active(requests):
        _empty(status)
        return UNDEFINED, True
    for i, r in enumerate(requests):
        if _active(r) and (<Request>r)._test(status):
            return i, True
    return UNDEFINED, False


def Get_status_some(requests, statuses=None):
    """Indices of the requests done now, which stay as they are (None when
    none is active)."""
    if not _any_active(requests):
        return None
    out = []
    for i, r in enumerate(requests):
        if not (_active(r) and (<Request>r)._test(None)):
            continue
        status = None
        if statuses is not None:
            if isinstance(statuses, list) and len(statuses) <= len(out):
                statuses.append(Status())
            if len(out) < len(statuses):
                status = statuses[len(out)]
        (<Request>r)._test(status)
        out.append(i)
    return out
