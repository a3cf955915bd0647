# Included by requests.pyx: generalized requests (Grequest), operations the
# user runs and completes, with mpi4py's semantics: Grequest.Start takes a
# query_fn (fills the Status of a completed request), a free_fn (runs once
# the request is completed and seen done, or freed) and a cancel_fn (runs on
# Cancel, told whether Complete was called), each called with the args and
# kwargs given to Start. An exception in a callback is printed to stderr and
# the call that ran it raises MPI.Exception with its error class
# (ERR_OTHER for one that is not an MPI.Exception).


cdef object _callback_failed(str which, exc):
    import traceback              # (seldom: not imported with the module)
    traceback.print_exception(exc)
    code = exc.Get_error_class() if isinstance(exc, GloocyError) else ERR_OTHER
    return GloocyError(f"Grequest: {which} raised {type(exc).__name__}: {exc}",
                       code)


cdef class Grequest(Request):
    """A generalized request (Grequest.Start): done when the user calls
    Complete. ``Grequest(other)`` is a new handle on the Grequest other (a
    TypeError for any other kind of request)."""

    def __init__(self, request=None):
        cdef Request other
        if request is None:
            return
        if not isinstance(request, Request):
            raise TypeError(f"request: expected a Request, got {request!r}")
        other = (<Request>request)._target()
        if other._is_null():
            return
        if not isinstance(other, Grequest):
            raise TypeError("request: a Grequest is a handle on a Grequest "
                            f"only, not on a {type(other).__name__}")
        self._of = other

    @classmethod
    def Start(cls, query_fn=None, free_fn=None, cancel_fn=None, args=None,
              kwargs=None):
        """A new generalized request, active until Complete is called and
        a Wait or Test sees it."""
        cdef Grequest r = Grequest.__new__(Grequest)
        r._query_fn, r._free_fn, r._cancel_fn = query_fn, free_fn, cancel_fn
        r._args = tuple(args) if args is not None else ()
        r._kwargs = dict(kwargs) if kwargs is not None else {}
        r._done = threading.Event()
        r._active = True
        return r

    cdef Grequest _own(self, str what):
        cdef Grequest t = <Grequest>self._target()
        if t._done is None:
            raise GloocyError(f"Grequest.{what}: a null request", ERR_REQUEST)
        return t

    def Complete(self):
        """The operation is done: waits on the request now return."""
        cdef Grequest t = self._own("Complete")
        if t._done.is_set():
            raise GloocyError("Grequest.Complete: called twice", ERR_REQUEST)
        t._done.set()
        if t._free_at_complete:
            t._run_free()

    def complete(self, obj=None):
        """Complete, with `obj` as what wait() and test() return."""
        self._own("complete")._obj = obj
        self.Complete()

    def Cancel(self):
        cdef Grequest t = self._own("Cancel")
        t._check_active()
        if t._cancel_fn is not None:
            try:
                t._cancel_fn(t._done.is_set(), *t._args, **t._kwargs)
            except BaseException as exc:
                raise _callback_failed("cancel_fn", exc)

    def Free(self):
        """Forget the request: free_fn runs now if Complete was called,
        else when it is."""
        cdef Grequest t = self._own("Free")
        t._check_active()
        t._active = False
        if t._done.is_set():
            t._run_free()
        else:
            t._free_at_complete = True

    cdef int _query(self, status) except -1:
        cdef Status s = Status()
        s.error, s.cancelled = 0, False
        if self._query_fn is not None:
            try:
                self._query_fn(s, *self._args, **self._kwargs)
            except BaseException as exc:
                # The request is over: it is freed, and the wait says why.
                error = _callback_failed("query_fn", exc)
                self._active = False
                try:
                    self._run_free()
                except GloocyError:
                    pass
                raise error
            if self._cancel_fn is None:
                s.cancelled = False
        if status is None:
            return 0
        if isinstance(status, Status):
            (<Status>status).set(s.source, s.tag, s.count)
            (<Status>status).error = s.error
            (<Status>status).cancelled = s.cancelled
        else:
            _fill(status, s.source, s.tag, s.count)
            status.Set_error(s.error)
            status.Set_cancelled(s.cancelled)
        return 0

    cdef int _run_free(self) except -1:
        if self._released:
            return 0
        self._released = True
        if self._free_fn is not None:
            try:
                self._free_fn(*self._args, **self._kwargs)
            except BaseException as exc:
                raise _callback_failed("free_fn", exc)
        return 0

    cdef int _wait(self, status, object timeout) except -1:
        if not self._done.wait(timeout):
            raise GloocyError("Grequest: not completed in time", ERR_REQUEST)
        self._query(status)
        return 1

    cdef int _test(self, status) except -1:
        if not self._done.is_set():
            return 0
        self._query(status)
        return 1

    cdef int _release(self) except -1:
        return self._run_free()

    cdef object _value(self):
        return self._obj

    cdef bint _is_null(self):
        if self._of is not None:
            return self._of._is_null()
        return not self._active
