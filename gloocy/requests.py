"""Requests: handles on nonblocking operations, with mpi4py's methods.

Point-to-point requests (Isend, Irecv) are transfers posted on the
communicator's own connections; any wait on the communicator moves them.
Nonblocking collectives run, in the order they were started, on a worker
thread of the communicator over a duplicate of it (its own connections), so
they progress while the caller computes; the idle worker sleeps on a queue.
"""

import pickle
import queue
import threading
import time
import weakref

from gloocy.constants import UNDEFINED
from gloocy.status import Status
from gloocy.errors import ERR_REQUEST, ContextPoisoned, GloocyError

__all__ = ["Request", "Prequest", "Waitall", "Testall", "Waitany", "Testany", "Waitsome",
           "Testsome", "REQUEST_NULL", "UNDEFINED"]



def _set_status(status, result):
    if status is not None and result is not None:
        status._set(*result)


def _empty_status(status):
    if status is not None:
        status._set(-2, -1, 0)      # ANY_SOURCE, ANY_TAG, nothing


class Request:
    """A nonblocking operation in flight. Once Wait or Test has seen it
    finish, it is inactive (== REQUEST_NULL), as in MPI: the multi-request
    functions skip it and waiting on it returns at once. ``Request()`` is a
    null one."""

    _inactive = True              # the operations below set it False

    def Wait(self, status=None):
        """Block until done; fill `status` (source, tag, count)."""
        if self._inactive:
            _empty_status(status)
            return True
        _set_status(status, self._wait(None))
        self._inactive = True
        return True

    def Test(self, status=None):
        """True when done (then `status` is filled)."""
        if self._inactive:
            _empty_status(status)
            return True
        result = self._test()
        if result is None and not self._done():
            return False
        _set_status(status, result)
        self._inactive = True
        return True

    def Get_status(self, status=None):
        """Like Test, but the request stays as it is."""
        if self._inactive:
            _empty_status(status)
            return True
        result = self._test()
        if result is None and not self._done():
            return False
        _set_status(status, result)
        return True

    def _is_null(self):
        return self._inactive

    def __eq__(self, other):
        if not isinstance(other, Request):
            return NotImplemented
        return self is other or (self._is_null() and other._is_null())

    __hash__ = object.__hash__

    def __bool__(self):
        return not self._is_null()

    def Cancel(self):
        """Withdraw the operation if it can still be (a receive nothing
        has arrived for); otherwise no effect."""
        self._check_active()

    def Free(self):
        """Forget the request (the operation itself completes anyway)."""
        self._check_active()
        self._inactive = True

    def _check_active(self):
        if self._inactive:
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
        self.Wait(status)
        return self._value()

    def test(self, status=None):
        """(done, object or None)."""
        done = self.Test(status)
        return done, (self._value() if done else None)

    # The four primitives subclasses provide:
    def _wait(self, timeout):           # -> (source, tag, count) or None
        raise NotImplementedError

    def _test(self):                    # -> result or None
        raise NotImplementedError

    def _done(self):
        raise NotImplementedError

    def _value(self):
        return None

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
        return done, (None if done is None else [requests[i]._value() for i in done])

    @staticmethod
    def testsome(requests, statuses=None):
        done = Testsome(requests, statuses)
        return done, (None if done is None else [requests[i]._value() for i in done])

    @staticmethod
    def waitall(requests, statuses=None):
        return [r.wait(None if statuses is None else statuses[i])
                for i, r in enumerate(requests)]

    @staticmethod
    def testall(requests, statuses=None):
        """(all done, their objects or None)."""
        if not Testall(requests, statuses):
            return False, None
        return True, [r._value() for r in requests]

    @staticmethod
    def waitany(requests, status=None):
        """(index, object) of a finished request."""
        i = Waitany(requests, status)
        return i, (None if i == UNDEFINED else requests[i]._value())

    @staticmethod
    def testany(requests, status=None):
        """(index, done, object)."""
        i, done = Testany(requests, status)
        return i, done, (None if i == UNDEFINED else requests[i]._value())


class P2PRequest(Request):
    """Isend / Irecv: a core handle plus, for objects, how to decode."""

    _inactive = False

    def __init__(self, handle, keep=None, decode=None, unpack=None):
        self._h = handle
        self._keep = keep             # the buffer must live until done
        self._decode = decode
        self._unpack = unpack         # scatters a derived datatype's data

    def _wait(self, timeout):
        return self._finish(self._h.wait(timeout))

    def _test(self):
        return self._finish(self._h.test())

    def _finish(self, result):
        if result is not None and self._unpack is not None:
            unpack, self._unpack = self._unpack, None
            unpack(result[2])
        return result

    def _done(self):
        return self._h.done

    def Cancel(self):
        self._check_active()
        self._h.cancel()

    def _value(self):
        if self._decode is None or self._h.cancelled:
            return None
        return self._decode(self._h.wait())


class ObjectRecvRequest(Request):
    """irecv of a Python object: its size is unknown until it arrives, so
    the receive happens at wait/test time (probe, then receive)."""

    _inactive = False

    def __init__(self, comm, source, tag):
        self._comm, self._source, self._tag = comm, source, tag
        self._result = self._obj = None
        self._cancelled = False

    def Cancel(self):
        """Nothing is received before wait/test: withdrawing always works
        until then."""
        if self._result is None:
            self._cancelled = True

    def _finish(self, probed):
        src, tag, n = probed
        data = bytearray(n)
        self._result = self._comm._ctx.recv(data, src, tag)
        self._obj = pickle.loads(data)
        return self._result

    def _wait(self, timeout):
        if self._result is None and not self._cancelled:
            self._finish(self._comm._ctx.probe(self._source, self._tag,
                                               timeout=timeout))
        return self._result

    def _test(self):
        if self._result is None and not self._cancelled:
            probed = self._comm._ctx.probe(self._source, self._tag, block=False)
            if probed is not None:
                self._finish(probed)
        return self._result

    def _done(self):
        return self._result is not None or self._cancelled

    def _value(self):
        return self._obj


class Prequest(Request):
    """A persistent request (Send_init, Recv_init): Start() runs the
    operation again; done, it is inactive but not REQUEST_NULL until Free."""

    def __init__(self, start):
        self._start, self._req, self._freed = start, None, False

    def Start(self):
        if self._freed:
            raise GloocyError("request: freed persistent request", ERR_REQUEST)
        self._req = self._start()
        self._inactive = False

    @staticmethod
    def Startall(requests):
        for r in requests:
            r.Start()

    def _wait(self, timeout):
        return self._req._wait(timeout)

    def _test(self):
        return self._req._test()

    def _done(self):
        return self._req._done()

    def _value(self):
        return None if self._req is None else self._req._value()

    def Cancel(self):
        if self._req is not None and not self._inactive:
            self._req.Cancel()

    def Free(self):
        self._freed = self._inactive = True

    def _is_null(self):
        return self._freed


class CollectiveRequest(Request):
    """A collective running on the communicator's worker thread."""

    _inactive = False

    def __init__(self, value=None):
        self._event = threading.Event()
        self._error = None
        self._result = value

    @classmethod
    def _finished(cls):
        """A request that is already complete (e.g. to PROC_NULL)."""
        request = cls()
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

    def _wait(self, timeout):
        self._event.wait()
        if self._error is not None:
            raise self._error
        return None

    def _test(self):
        if self._event.is_set() and self._error is not None:
            raise self._error
        return None

    def _done(self):
        return self._event.is_set()

    def _value(self):
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
    for i, r in enumerate(requests):
        if r is not None:
            r.Wait(None if statuses is None else statuses[i])
    return True


def Testall(requests, statuses=None):
    # Ask every one (each makes progress) before finishing any.
    done = [r is None or r.Get_status() for r in requests]
    if not all(done):
        return False
    for i, r in enumerate(requests):
        if r is not None:
            r.Test(None if statuses is None else statuses[i])
    return True


def _active(request):
    return request is not None and not request._inactive


def _first_done(requests, status):
    for i, r in enumerate(requests):
        if _active(r) and r.Test(status):
            return i
    return None


def Waitany(requests, status=None):
    """Index of a finished request (UNDEFINED if none is active)."""
    if not any(_active(r) for r in requests):
        _empty_status(status)
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
    if not any(_active(r) for r in requests):
        _empty_status(status)
        return UNDEFINED, True
    i = _first_done(requests, status)
    return (UNDEFINED, False) if i is None else (i, True)


def Waitsome(requests, statuses=None):
    """Indices of the requests that have finished (at least one; None when
    none is active)."""
    if not any(_active(r) for r in requests):
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
    if not any(_active(r) for r in requests):
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
