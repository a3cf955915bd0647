"""MPIPoolExecutor's spawn mode: workers started for the executor (by
Intracomm.Spawn, as mpi4py.futures does) on its first task, then served as
in world mode over the intercommunicator merged into one group (the
client is rank 0). The workers load the client's main program as
__mp_main__ (see __main__._load_main) and run gloocy.futures.server.
"""

import atexit
import sys
import threading
import weakref

from gloocy.futures import _pool

_live = weakref.WeakSet()           # pools with workers: stopped at exit
_atexit_registered = []
_in_worker = []                     # set in a worker: it spawns no workers


def _main_program():
    """The client's program, as `python -m gloocy.futures` takes it: [path],
    ["-m", module], or ["-c", ""] (nothing to load: interactive, -c)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name not in ("__main__", "gloocy.futures.__main__"):
        return ["-m", spec.name.removesuffix(".__main__")]
    path = getattr(main, "__file__", None)
    return [path] if path else ["-c", ""]


class SpawnedPool:
    """A Pool over `count` worker processes, spawned on the first submit."""

    def __init__(self, count, info=None):
        self.count = count
        self.info = info
        self.pool = None
        self.comms = None
        self.stopped = False
        self.lock = threading.Lock()

    @property
    def size(self):
        return self.count

    def start(self):
        with self.lock:
            if self.stopped:
                raise RuntimeError("cannot submit after shutdown")
            if self.pool is None:
                if _in_worker:
                    raise RuntimeError(
                        "MPIPoolExecutor: a worker cannot spawn workers (put "
                        "the client's code under `if __name__ == "
                        "'__main__':`, the workers load its module)")
                from gloocy import MPI
                inter = MPI.COMM_SELF.Spawn(sys.executable,
                                            ["-m", "gloocy.futures.server"],
                                            self.count, info=self.info)
                merged = inter.Merge(high=False)
                merged.bcast(_main_program(), root=0)
                self.comms = (inter, merged)
                self.pool = _pool.Pool(merged, 0)
                _live.add(self)
                if not _atexit_registered:      # runs before Spawn's reaper
                    _atexit_registered.append(atexit.register(_stop_all))
            return self.pool

    def submit(self, *args):
        self.start().submit(*args)

    def cancel_queued(self, executor_id):
        if self.pool is not None:
            self.pool.cancel_queued(executor_id)

    def stop(self):
        """Stop the workers (their tasks done) and disconnect from them."""
        with self.lock:
            self.stopped = True
            pool, comms, self.pool, self.comms = self.pool, self.comms, None, None
        if pool is not None:
            pool.stop()
            comms[1].Free()
            comms[0].Disconnect()


def _stop_all():
    for pool in list(_live):
        pool.stop()
