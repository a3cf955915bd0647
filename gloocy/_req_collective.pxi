# Included by requests.pyx: nonblocking collectives, which run as schedules
# in the core (NbcRequest), and requests complete from the start
# (CollectiveRequest).

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
    """An operation complete when it was started (one with PROC_NULL, a
    window's or a session's no-op): Wait and Test return at once."""

    def __init__(self, value=None):
        self._result = value
        self._active = True

    @classmethod
    def _finished(cls):
        return cls()

    cdef int _wait(self, status, object timeout) except -1:
        return 1

    cdef int _test(self, status) except -1:
        return 1

    cdef object _value(self):
        return self._result
