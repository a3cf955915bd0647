# Included by requests.pyx: nonblocking collectives. An intracommunicator's
# run as schedules in the core (NbcRequest); the intercommunicators' and
# the neighbourhood ones, and Idup, run in order on a worker thread of
# their communicator (CollectiveRequest).

cdef class NbcRequest(Request):
    """A nonblocking collective running as a schedule in the core: Test
    runs it on as far as it can go, Wait until it is done; then `after`
    (unpacking, AVG's division, a user op's fold) runs, once."""

    cdef int _wait(self, status, object timeout) except -1:
        while not self._h._step(True, timeout):
            pass
        return self._finish()

    cdef int _test(self, status) except -1:
        if not self._h._step(False, None):
            return 0
        return self._finish()

    cdef int _finish(self) except -1:
        if self._after is not None:
            after, self._after = self._after, None
            self._keep = None
            after()
        return 1


cdef NbcRequest nbc_request(NbcHandle h, object keep, object after):
    cdef NbcRequest r = NbcRequest.__new__(NbcRequest)
    r._h, r._keep, r._after = h, keep, after
    r._active = True
    return r


def start_nbc(NbcHandle h, keep=None, after=None):
    """The Request of schedule `h` (the communicator's I-methods)."""
    return nbc_request(h, keep, after)


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
