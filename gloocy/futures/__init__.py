"""Task farms over the ranks of a job: mpi4py.futures' executors on gloocy.

Three ways to farm out tasks, as with mpi4py.futures:

* ``MPIPoolExecutor(max_workers)`` in any program (spawn mode): the
  executor starts its own `max_workers` worker processes (Intracomm.Spawn)
  on its first task and stops them at shutdown.
* ``gloocy-run -n N python -m gloocy.futures script.py [args]``: rank 0 runs
  the script, the other N-1 ranks are workers; ``MPIPoolExecutor()`` in the
  script hands tasks to them (any number of executors, one after another
  or at once).
* ``with MPICommExecutor(comm, root) as executor:`` in a program every rank
  runs: at `root` it is an executor over the other ranks of `comm`, which
  serve tasks until root leaves the block (they get None and skip it).

Futures are ``concurrent.futures.Future``; ``map`` and ``starmap`` keep the
order of their inputs (``unordered=True``: as they finish). An exception
raised by a task is raised again by ``result()``, with the worker's
traceback as its cause. Under ``python -m gloocy.futures``, a world of
one has no workers: tasks then run in a thread of rank 0. In spawn mode the
workers load the client's main module as ``__mp_main__`` (so functions it
defines can be sent): keep its top-level code under
``if __name__ == "__main__":``.
"""

import concurrent.futures as _cf
import itertools
import threading

from gloocy.futures import _pool

__all__ = ["MPIPoolExecutor", "MPICommExecutor", "Future", "wait",
           "as_completed", "FIRST_COMPLETED", "FIRST_EXCEPTION",
           "ALL_COMPLETED", "CancelledError", "TimeoutError", "BrokenExecutor",
           "get_comm_workers"]

Future = _cf.Future
wait, as_completed = _cf.wait, _cf.as_completed
FIRST_COMPLETED, FIRST_EXCEPTION, ALL_COMPLETED = (
    _cf.FIRST_COMPLETED, _cf.FIRST_EXCEPTION, _cf.ALL_COMPLETED)
CancelledError, TimeoutError = _cf.CancelledError, _cf.TimeoutError
BrokenExecutor = _cf.BrokenExecutor

_world = {"pool": None, "comm": None}     # set by python -m gloocy.futures
_executor_ids = itertools.count()


def get_comm_workers():
    """The communicator the world's workers serve on (under
    ``python -m gloocy.futures``), else None."""
    return _world["comm"]


class _Executor(_cf.Executor):
    """Submits to a Pool (or, without workers, to a local thread)."""

    def __init__(self, pool, initializer=None, initargs=()):
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self._pool = pool
        self._id = next(_executor_ids)
        self._initializer = None if initializer is None else (initializer, tuple(initargs))
        self._futures = set()
        self._lock = threading.Lock()
        self._shutdown = False
        self._local = None
        if pool is None or pool.size == 0:      # no workers: a thread of ours
            self._local = _cf.ThreadPoolExecutor(
                1, initializer=initializer, initargs=tuple(initargs))

    @property
    def num_workers(self):
        return 1 if self._local is not None else self._pool.size

    def bootup(self, wait=True):
        """The workers are up already (they are the job's ranks)."""
        return self

    def submit(self, fn, /, *args, **kwargs):
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit after shutdown")
            if self._local is not None:
                return self._local.submit(fn, *args, **kwargs)
            future = Future()
            self._futures.add(future)
            future.add_done_callback(self._futures.discard)
        self._pool.submit(future, self._id, self._initializer, fn, args, kwargs)
        return future

    def map(self, fn, *iterables, timeout=None, chunksize=1, unordered=False):
        """fn over the zipped iterables; results in input order (as they
        finish with unordered=True)."""
        return self.starmap(fn, zip(*iterables), timeout=timeout,
                            chunksize=chunksize, unordered=unordered)

    def starmap(self, fn, iterable, timeout=None, chunksize=1, unordered=False):
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1")
        futures = [self.submit(fn, *args) for args in iterable]
        if unordered:
            done = _cf.as_completed(futures, timeout=timeout)
            return (f.result() for f in done)
        return _results(futures, timeout)

    def shutdown(self, wait=True, *, cancel_futures=False):
        with self._lock:
            self._shutdown = True
            pending = list(self._futures)
        if self._local is not None:
            self._local.shutdown(wait, cancel_futures=cancel_futures)
            return
        if cancel_futures:
            self._pool.cancel_queued(self._id)
        if wait:
            _cf.wait(pending)


def _results(futures, timeout):
    import time
    end = None if timeout is None else time.monotonic() + timeout
    try:
        for future in futures:
            yield future.result(None if end is None else end - time.monotonic())
    finally:
        for future in futures:
            future.cancel()


class MPIPoolExecutor(_Executor):
    """An executor over the job's worker ranks when the job was started as
    ``gloocy-run -n N python -m gloocy.futures script.py`` (rank 0 runs the
    script); otherwise over `max_workers` worker processes of its own
    (default: MPI4PY_FUTURES_MAX_WORKERS, else 1), spawned on its first
    task and stopped at shutdown."""

    def __init__(self, max_workers=None, initializer=None, initargs=(), **kwargs):
        if max_workers is not None and max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        pool = _world["pool"]
        self._spawned = None
        if pool is None:
            from gloocy.futures._spawned import SpawnedPool
            pool = self._spawned = SpawnedPool(
                max_workers or _default_workers(), kwargs.get("mpi_info"))
        super().__init__(pool, initializer, initargs)

    def bootup(self, wait=True):
        """Start the workers now rather than with the first task."""
        if self._spawned is not None:
            self._spawned.start()
        return self

    def shutdown(self, wait=True, *, cancel_futures=False):
        super().shutdown(wait, cancel_futures=cancel_futures)
        if self._spawned is not None:
            if wait:
                self._spawned.stop()
            else:
                threading.Thread(target=self._spawned.stop, daemon=True,
                                 name="gloocy-futures-stop").start()


def _default_workers():
    import os
    text = os.environ.get("MPI4PY_FUTURES_MAX_WORKERS", "")
    if text and not (text.isdigit() and int(text) > 0):
        raise ValueError(f"MPI4PY_FUTURES_MAX_WORKERS={text!r}: expected a "
                         "positive integer")
    return int(text) if text else 1


class MPICommExecutor:
    """``with MPICommExecutor(comm, root) as executor``: an executor at
    `root` over the other ranks of `comm` (collective over comm); the other
    ranks serve its tasks inside ``__enter__`` and get None once root
    leaves the block."""

    def __init__(self, comm=None, root=0, **kwargs):
        from gloocy import MPI
        comm = MPI.COMM_WORLD if comm is None else comm
        if comm.Is_inter():
            raise ValueError("expecting an intracommunicator")
        if not 0 <= root < comm.Get_size():
            raise ValueError("expecting a root in range(comm.size)")
        self._comm, self._root = comm, root
        self._options = kwargs
        self._executor = None
        self._dup = None

    def __enter__(self):
        if self._dup is not None:
            raise RuntimeError("MPICommExecutor: already entered")
        self._dup = self._comm.Dup()
        if self._dup.Get_rank() != self._root:
            try:
                _pool.serve(self._dup, self._root)
            finally:
                self._dup.Free()
            return None
        pool = _pool.Pool(self._dup, self._root)
        self._executor = _Executor(pool if pool.size else None,
                                   self._options.get("initializer"),
                                   self._options.get("initargs", ()))
        self._executor._owner = pool
        return self._executor

    def __exit__(self, *exc):
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
            executor._owner.stop()
            self._dup.Free()
        return False
