"""torch's Work and Future over gloocy's requests.

A Work holds the gloocy requests of one torch call (one, or several for a
coalesced call; none when the collective ran as gloocy's blocking call),
the tensors they use, and what to do once they are complete (copies back
from staging buffers).
gloocy progresses nonblocking operations whenever any request is tested
or waited on (weak progress, as in MPI); nothing runs on a thread.
"""

from __future__ import annotations

import datetime
import time

import torch.distributed as dist
# torch's C++ Future, what gloo's Work.get_future() returns (the Python
# subclass torch.futures.Future costs 0.5-1 µs more to make)
from torch._C import Future

from ..errors import CollectiveTimeout, GloocyError
from ..requests import Testall, Waitall

__all__ = ["GloocyWork", "backend_error"]


def backend_error(e, where):
    """torch's exception for gloocy's error `e` (its message kept, and
    `where`: which rank of which group in which call)."""
    cls = getattr(dist, "DistBackendError", RuntimeError)
    if isinstance(e, (CollectiveTimeout, TimeoutError)):
        cls = getattr(dist, "DistTimeoutError", cls)
    err = cls(f"gloocy: {where}: {type(e).__name__}: {e}")
    err.__cause__ = e
    return err


class GloocyWork(dist.Work):
    """The pending result of one torch.distributed call on gloocy."""

    # A Work complete when made (a blocking call's) sets only its result.
    _requests = ()
    _where = None           # "rank R of group G, allreduce #n"
    _finish = None          # callable run once, after completion
    _keep = None            # buffers that must outlive the requests
    _error = None
    _done = True
    _source = -1

    def __init__(self, requests, result, where, finish=None, keep=None):
        super().__init__()
        self._result = result        # what the Future holds: a list of tensors
        if requests:
            self._requests = list(requests)
            self._where = where
            self._finish = finish
            self._keep = keep
            self._done = False
        elif finish is not None:
            finish()

    def _complete(self):
        self._done = True
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()
        self._keep = None

    def _fail(self, e):
        self._done = True
        self._finish = self._keep = None
        self._error = backend_error(e, self._where)
        raise self._error

    def _wait(self, deadline=None):
        if self._error is not None:
            raise self._error
        if self._done:
            return
        try:
            if deadline is None:
                statuses = _wait_all(self._requests)
            else:
                while not Testall(self._requests):
                    if time.monotonic() > deadline:
                        raise CollectiveTimeout(
                            f"not complete within the {self._timeout_text} "
                            "given to Work.wait()")
                    time.sleep(0.0002)
                statuses = None
        except GloocyError as e:
            self._fail(e)
        if statuses:
            self._source = statuses[0]
        self._complete()

    # -- torch's Work API ------------------------------------------------

    def wait(self, timeout=datetime.timedelta(0)):
        deadline = None
        seconds = timeout.total_seconds() if timeout is not None else 0
        if seconds > 0:
            self._timeout_text = f"{seconds:g} s"
            deadline = time.monotonic() + seconds
        self._wait(deadline)
        return True

    def is_completed(self):
        if self._done or self._error is not None:
            return True
        try:
            if Testall(self._requests):
                self._complete()
        except GloocyError as e:
            try:
                self._fail(e)
            except Exception:
                pass
            return True
        return self._done

    def is_success(self):
        return self.is_completed() and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self._wait()
        return self._result

    def get_future(self):
        # Weak progress: nothing moves the requests while the caller
        # computes, so the Future is completed when it is asked for (DDP
        # asks right after posting a bucket and chains its hook on it).
        # A failure is raised here, not set on the Future: DDP's reducer
        # crashes the process on a Future holding a Python exception.
        if not self._done or self._error is not None:
            self._wait()
        fut = Future([])
        fut.set_result(self._result)
        return fut

    def synchronize(self):
        self._wait()

    def _source_rank(self):
        self._wait()
        return self._source

    def source_rank(self):
        return self._source_rank()


def _wait_all(requests):
    """Wait for every request; the source of the first receive (for
    recv_anysource), else None."""
    if len(requests) == 1:
        from ..status import Status
        status = Status()
        requests[0].Wait(status)
        return [status.Get_source()]
    Waitall(requests)
    return None

