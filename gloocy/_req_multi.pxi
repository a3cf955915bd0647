# Included by requests.pyx: the functions over many requests (Waitall,
# Testany, Waitsome, Get_status_all...).

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
        if r is not None and r._target()._active and not r._test(None):
            return False
    for i, r in enumerate(requests):
        if r is not None:
            r.Test(_status_at(statuses, i))
    return True


cdef inline bint _active(r):
    return r is not None and (<Request?>r)._target()._active


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



def Get_status_all(requests, statuses=None):
    """Are all the requests done? (None of them becomes inactive; the
    statuses are filled when they are.)"""
    cdef Request r
    for r in requests:
        if r is not None and r._target()._active and not r._test(None):
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
