"""Synchronization across ranks, on one-sided windows (mpi4py.util.sync's
names and signatures).

* ``Sequential(comm)``: the ranks run a block one after the other, in rank
  order (``with Sequential(comm): ...``).
* ``Counter(start, step, comm=, root=)``: a counter in root's window;
  ``next()`` is one Fetch_and_op, so every caller gets its own value.
* ``Mutex(comm=, recursive=)``: a lock over the ranks, a queue in the
  windows (each waiter spins on its own memory; the holder hands the lock
  to the next in line: first come, first served).
* ``Condition(mutex=None, comm=)``: wait for a notify from another rank
  (``wait``, ``wait_for``, ``notify``, ``notify_all``).
* ``Semaphore(value, bounded=, comm=)``: a Counter guarded by a Condition.

Making and freeing them is collective over comm; ``free()`` may be called
again (it does nothing then), and a freed object raises RuntimeError.
"""

import time

import numpy as np

from gloocy import MPI

__all__ = ["Sequential", "Counter", "Mutex", "Condition", "Semaphore"]

_NOBODY = MPI.PROC_NULL


class Sequential:
    """Ranks of comm run the block in rank order."""

    def __init__(self, comm, tag=0):
        self.comm, self.tag = comm, int(tag)

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


def _window(items, comm, info, dtype=np.intc):
    """A window of `items` elements of dtype at this rank (collective), and
    a NumPy view of them."""
    itemsize = np.dtype(dtype).itemsize
    win = MPI.Win.Allocate(items * itemsize, itemsize, info, comm)
    return win, np.frombuffer(win.tomemory(), dtype)


def _spin(ready):
    """Wait (sleeping a little more each time, up to 1 ms) until ready()
    gives a value other than None; that value."""
    delay = 1e-6
    while True:
        value = ready()
        if value is not None:
            return value
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)


class Counter:
    """A counter held by root: next(incr) returns the value before adding
    incr (default: step)."""

    def __init__(self, start=0, step=1, *, typecode="i", comm=MPI.COMM_SELF,
                 info=MPI.INFO_NULL, root=0):
        self._dtype = np.dtype(typecode)
        self._datatype = MPI.Datatype.fromcode(typecode)
        self._start, self._step, self._root = start, step, root
        mine = comm.Get_rank() == root
        self._window, memory = _window(1 if mine else 0, comm, info, self._dtype)
        if mine:
            memory[0] = start
        comm.Barrier()

    def _live(self):
        if not self._window:
            raise RuntimeError("counter already freed")
        return self._window

    def next(self, incr=None):
        """The value before, then adds incr (default: step)."""
        win = self._live()
        incr = self._step if incr is None else incr
        origin = np.array([incr], self._dtype)
        before = np.zeros(1, self._dtype)
        win.Lock(self._root, MPI.LOCK_SHARED)
        try:
            win.Fetch_and_op([origin, self._datatype], [before, self._datatype],
                             self._root, 0, MPI.SUM if incr else MPI.NO_OP)
        finally:
            win.Unlock(self._root)
        return before[0].item()

    def __next__(self):
        return self.next()

    def __iter__(self):
        return self

    def free(self):
        """Collective."""
        if self._window:
            self._window.Free()


# Slots of a Mutex's window at each rank (ints): whether this rank was
# handed the lock, the rank queued after it; rank 0 also holds the tail.
_HANDED, _NEXT, _TAIL = 0, 1, 2


class Mutex:
    """A lock over the ranks of comm. A rank queues by swapping itself
    into the tail (at rank 0) and telling the rank before it, then waits
    on its own memory until that rank hands the lock over."""

    def __init__(self, *, recursive=False, comm=MPI.COMM_SELF, info=MPI.INFO_NULL):
        self._recursive = bool(recursive)
        self._comm = comm
        self._window, self._memory = _window(3 if comm.Get_rank() == 0 else 2, comm, info)
        self._memory[:] = [0, _NOBODY, _NOBODY][:self._memory.size]
        self._held = 0                    # recursion depth here
        comm.Barrier()

    def _live(self):
        if not self._window:
            raise RuntimeError("mutex already freed")
        return self._window

    def _swap(self, value, rank, slot, op=MPI.REPLACE, compare=None):
        """One atomic step on rank's slot (Lock_all is held): the value before."""
        win = self._window
        origin = np.array([value], np.intc)
        before = np.zeros(1, np.intc)
        if compare is None:
            win.Fetch_and_op(origin, before, rank, slot, op)
        else:
            win.Compare_and_swap(origin, np.array([compare], np.intc), before, rank, slot)
        return int(before[0])

    def _acquire(self, blocking):
        win, me, memory = self._window, self._window.group_rank, self._memory
        win.Lock_all()
        try:
            self._swap(_NOBODY, me, _NEXT)
            if not blocking:           # only if nobody holds or waits
                return self._swap(me, 0, _TAIL, compare=_NOBODY) == _NOBODY
            before = self._swap(me, 0, _TAIL)
            if before == _NOBODY:
                return True
            self._swap(me, before, _NEXT)           # queue behind it
            _spin(lambda: True if memory[_HANDED] else None)
            memory[_HANDED] = 0
            return True
        finally:
            win.Unlock_all()

    def _release(self):
        win, me, memory = self._window, self._window.group_rank, self._memory
        win.Lock_all()
        try:
            if self._swap(_NOBODY, 0, _TAIL, compare=me) == me:
                return                                # nobody waits
            successor = _spin(lambda: None if memory[_NEXT] == _NOBODY
                              else int(memory[_NEXT]))
            self._swap(1, successor, _HANDED)
        finally:
            win.Unlock_all()

    def acquire(self, blocking=True):
        """Hold the lock (blocking: wait for it; else give up at once if
        another rank holds it or waits). True if held."""
        self._live()
        if self._held:
            if not self._recursive:
                raise RuntimeError("cannot acquire already held mutex")
            self._held += 1
            return True
        if self._acquire(blocking):
            self._held = 1
            return True
        return False

    def release(self):
        self._live()
        if not self._held:
            raise RuntimeError("cannot release unheld mutex")
        self._held -= 1
        if not self._held:
            self._release()

    def locked(self):
        """Whether this rank holds the lock."""
        self._live()
        return self._held > 0

    def count(self):
        """How many times this rank holds the lock (recursion depth)."""
        self._live()
        return self._held

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    # what a Condition uses: let go entirely, then take back as before
    def _release_save(self):
        depth, self._held = self._held, 0
        self._release()
        return depth

    def _acquire_restore(self, depth):
        self._acquire(True)
        self._held = depth

    def free(self):
        """Collective; a held lock is released first."""
        if self._window:
            if self._held:
                self._held = 0
                self._release()
            self._window.Free()


class Condition:
    """Waiting for a notify. Rank 0's window holds a ticket per rank (0:
    not waiting) and the next ticket; notify wakes the lowest tickets by
    setting the sleepers' own flag. Tickets change only under the mutex."""

    def __init__(self, mutex=None, *, recursive=True, comm=MPI.COMM_SELF,
                 info=MPI.INFO_NULL):
        if mutex is None:
            self._mutex, self._own_mutex = Mutex(recursive=recursive, comm=comm,
                                                 info=info), True
        else:
            self._mutex, self._own_mutex = mutex, False
            comm = mutex._comm
        self._comm = comm
        size = comm.Get_size()
        # [woken flag] + at rank 0: [next ticket, ticket of rank 0..size-1]
        items = 1 + (1 + size if comm.Get_rank() == 0 else 0)
        self._window, self._memory = _window(items, comm, info)
        self._memory[:] = 0
        comm.Barrier()

    def _live(self):
        if not self._window:
            raise RuntimeError("condition already freed")
        return self._window

    def acquire(self, blocking=True):
        self._live()
        return self._mutex.acquire(blocking)

    def release(self):
        self._live()
        self._mutex.release()

    def locked(self):
        return self._mutex.locked()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    def _held(self, what):
        self._live()
        if not self._mutex.locked():
            raise RuntimeError(f"cannot {what} on unheld mutex")
        return self._window

    def wait(self):
        """Let go of the mutex until another rank notifies; True."""
        win = self._held("wait")
        me = win.group_rank
        one, before = np.ones(1, np.intc), np.zeros(1, np.intc)
        win.Lock_all()
        try:
            win.Fetch_and_op(one, before, 0, 1, MPI.SUM)          # a ticket
            win.Accumulate(before + 1, 0, 2 + me, MPI.REPLACE)
        finally:
            win.Unlock_all()
        depth = self._mutex._release_save()
        memory = self._memory
        _spin(lambda: True if memory[0] else None)
        memory[0] = 0
        self._mutex._acquire_restore(depth)
        return True

    def wait_for(self, predicate):
        """wait() until predicate() is true; its value."""
        result = predicate()
        while not result:
            self.wait()
            result = predicate()
        return result

    def notify(self, n=1):
        """Wake up to n waiting ranks (the longest waiting first); how many."""
        win = self._held("notify")
        size = win.group_size
        tickets = np.zeros(size, np.intc)
        one, zero = np.ones(1, np.intc), np.zeros(1, np.intc)
        win.Lock_all()
        try:
            win.Get(tickets, 0, 2)
            waiting = [r for r in np.argsort(tickets, kind="stable") if tickets[r]]
            woken = waiting[:max(0, int(n))]
            for rank in woken:
                win.Accumulate(zero, 0, 2 + int(rank), MPI.REPLACE)
                win.Accumulate(one, int(rank), 0, MPI.REPLACE)
        finally:
            win.Unlock_all()
        return len(woken)

    def notify_all(self):
        return self.notify(1 << 30)

    def free(self):
        """Collective (an own mutex is freed with it)."""
        if self._own_mutex:
            self._mutex.free()
        elif self._mutex._window and self._mutex.locked():
            self._mutex._release_save()
        if self._window:
            self._window.Free()


class Semaphore:
    """A counter of permits: acquire takes one (waiting while there is
    none), release gives n back (bounded: never above the initial value)."""

    def __init__(self, value=1, *, bounded=True, comm=MPI.COMM_SELF,
                 info=MPI.INFO_NULL):
        if value < 0:
            raise ValueError("initial value must be non-negative")
        self._bounded = bool(bounded)
        self._counter = Counter(value, comm=comm, info=info)
        self._condvar = Condition(recursive=False, comm=comm, info=info)

    def acquire(self, blocking=True):
        with self._condvar:
            while self._counter.next(0) == 0:
                if not blocking:
                    return False
                self._condvar.wait()
            self._counter.next(-1)
            return True

    def release(self, n=1):
        if n < 1:
            raise ValueError("increment must be one or more")
        with self._condvar:
            if self._bounded and self._counter.next(0) + n > self._counter._start:
                raise ValueError("semaphore released too many times")
            self._counter.next(n)
            self._condvar.notify(n)

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    def free(self):
        self._counter.free()
        self._condvar.free()
