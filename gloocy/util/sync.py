"""Synchronization across ranks (mpi4py.util.sync's names).

* ``Sequential(comm)``: a block the ranks run one after the other, in rank
  order (``with Sequential(comm): ...``).
* ``Counter(start, step, comm=, root=)``: a shared counter, ``next()``
  gives each caller the next value.
* ``Mutex(comm=, root=)``: a lock over the ranks (``with mutex: ...``).

mpi4py builds Counter and Mutex on one-sided windows, which gloocy lacks:
here a thread of the root rank serves them, over a communicator of their
own (a Dup of comm). Making and freeing them is collective over comm.
``Condition`` and ``Semaphore`` are not available yet.
"""

import collections
import threading

from gloocy import MPI

__all__ = ["Sequential", "Counter", "Mutex", "Condition", "Semaphore"]


class Sequential:
    """Ranks of comm run the block in rank order."""

    def __init__(self, comm, tag=0):
        self.comm, self.tag = comm, tag

    def __enter__(self):
        self.begin()
        return self

    def __exit__(self, *exc):
        self.end()

    def begin(self):
        rank = self.comm.Get_rank()
        if rank > 0:
            self.comm.Recv([bytearray(0), 0, MPI.BYTE], rank - 1, self.tag)

    def end(self):
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        if rank < size - 1:
            self.comm.Send([bytearray(0), 0, MPI.BYTE], rank + 1, self.tag)


_REQUEST, _REPLY = 1, 2


class _Served:
    """A state kept by a thread of the root rank: every rank asks it
    (op, args) and gets its answer."""

    def __init__(self, comm, root):
        # requests and replies on communicators of their own: a receive
        # waiting on one never holds up a receive on the other
        self.comm, self.replies = comm.Dup(), comm.Dup()
        self.root = root
        self.lock = threading.Lock()        # one request of this rank at a time
        self.server = None
        if self.comm.Get_rank() == root:
            self.server = threading.Thread(target=self._serve, daemon=True,
                                           name="gloocy-sync-server")
            self.server.start()

    def _serve(self):
        waiting = self.start_state()
        while True:
            status = MPI.Status()
            op, args = self.comm.recv(source=MPI.ANY_SOURCE, tag=_REQUEST,
                                      status=status)
            if op == "stop":
                self.replies.send(None, status.Get_source(), tag=_REPLY)
                return
            for rank, answer in self.handle(waiting, status.Get_source(), op, args):
                self.replies.send(answer, rank, tag=_REPLY)

    def ask(self, op, *args):
        with self.lock:
            self.comm.send((op, args), self.root, tag=_REQUEST)
            return self.replies.recv(source=self.root, tag=_REPLY)

    def free(self):
        """Collective: the server stops once every rank is done."""
        if self.comm == MPI.COMM_NULL:
            return
        self.comm.Barrier()
        if self.server is not None:
            self.ask("stop")
            self.server.join()
        self.comm.Free()
        self.replies.Free()


class Counter(_Served):
    """A counter shared by the ranks of comm: next(incr) returns the value
    before adding incr (default: step)."""

    def __init__(self, start=0, step=1, *, typecode="i", comm=MPI.COMM_SELF,
                 info=None, root=0):
        self.start, self.step = start, step
        self.cast = float if typecode in "fd" else int
        super().__init__(comm, root)

    def start_state(self):
        self.value = self.cast(self.start)
        return None

    def handle(self, waiting, rank, op, args):
        previous = self.value
        self.value = self.cast(self.value + args[0])
        return [(rank, previous)]

    def next(self, incr=None):
        return self.ask("next", self.step if incr is None else incr)

    def __next__(self):
        return self.next()

    def __iter__(self):
        return self


class Mutex(_Served):
    """A lock over the ranks of comm: acquire() waits until no other rank
    holds it (first come, first served)."""

    def __init__(self, *, comm=MPI.COMM_SELF, info=None, root=0):
        self.held = False
        super().__init__(comm, root)

    def start_state(self):
        self.owner = None
        return collections.deque()

    def handle(self, waiting, rank, op, args):
        if op == "acquire":
            if self.owner is None:
                self.owner = rank
                return [(rank, True)]
            if not args[0]:             # non-blocking: refused
                return [(rank, False)]
            waiting.append(rank)
            return []
        if op == "release":
            if self.owner != rank:
                return [(rank, False)]
            self.owner = waiting.popleft() if waiting else None
            answers = [(rank, True)]
            if self.owner is not None:
                answers.append((self.owner, True))
            return answers
        return [(rank, None)]

    def acquire(self, blocking=True):
        if self.held:
            raise RuntimeError("Mutex: already held by this rank")
        self.held = self.ask("acquire", bool(blocking))
        return self.held

    def release(self):
        if not self.held:
            raise RuntimeError("Mutex: not held by this rank")
        self.ask("release")
        self.held = False

    def locked(self):
        return self.held

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def _not_yet(name):
    class Unavailable:
        def __init__(self, *args, **kwargs):
            raise NotImplementedError(f"gloocy.util.sync.{name}: not available "
                                      "yet (gloocy has no one-sided windows)")
    Unavailable.__name__ = Unavailable.__qualname__ = name
    return Unavailable


Condition = _not_yet("Condition")
Semaphore = _not_yet("Semaphore")
