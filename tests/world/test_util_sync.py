"""gloocy.util.sync on real processes: Counter, Mutex, Condition and
Semaphore are built on one-sided windows; each is checked by what the
ranks saw (closed forms: every counter value once, consecutive values
inside a critical section, exactly one winner of a try-lock, every waiter
woken once)."""

import time

import pytest

from gloocy import MPI
from gloocy.util import sync

TRANSPORTS = ("shm",)               # the windows' transports: test_rma.py


def r_counter(comm, rounds):
    counter = sync.Counter(5, 2, comm=comm, root=comm.size - 1)
    got = [next(counter) for _ in range(rounds)]
    comm.Barrier()
    got.append(counter.next(0))         # NO_OP: a read
    comm.Barrier()
    counter.free()
    counter.free()                      # again: nothing
    try:
        counter.next()
    except RuntimeError:
        got.append("freed")
    return got


def r_mutex(comm, rounds):
    """Inside the mutex, 3 consecutive values of a counter; a try-lock
    after a barrier has one winner; recursion counts."""
    mutex, counter = sync.Mutex(comm=comm), sync.Counter(comm=comm)
    runs = []
    for _ in range(rounds):
        with mutex:
            runs.append([next(counter) for _ in range(3)])
    comm.Barrier()
    won = mutex.acquire(blocking=False)
    comm.Barrier()
    if won:
        mutex.release()
    comm.Barrier()
    recursive = sync.Mutex(recursive=True, comm=comm)
    with recursive:
        with recursive:
            depth = recursive.count()
    depths = (depth, recursive.count())
    for obj in (recursive, counter, mutex):
        obj.free()
    return runs, won, depths


def r_condition(comm):
    """Ranks > 0 wait; rank 0 notifies one at a time until all are woken."""
    cv = sync.Condition(comm=comm)
    woken = 0
    if comm.rank == 0:
        with cv:
            nobody = cv.notify()
        comm.Barrier()
        while woken < comm.size - 1:
            with cv:
                woken += cv.notify()
            time.sleep(0.001)
        with cv:
            after = cv.notify_all()
        result = (nobody, woken, after)
    else:
        comm.Barrier()
        with cv:
            result = cv.wait()
    comm.Barrier()
    cv.free()
    return result


def r_semaphore(comm):
    """size-1 permits: a non-blocking acquire after a barrier succeeds on
    exactly size-1 ranks (or 1 in a world of one)."""
    permits = max(1, comm.size - 1)
    sem = sync.Semaphore(permits, comm=comm)
    comm.Barrier()
    got = sem.acquire(blocking=False)
    comm.Barrier()
    if got:
        sem.release()
    comm.Barrier()
    with sem:
        pass
    comm.Barrier()                      # every permit is back
    try:
        if comm.rank == 0:
            sem.release()
        over = False
    except ValueError:
        over = True
    comm.Barrier()
    sem.free()
    return got, over


@pytest.mark.parametrize("size", [1, 3])
def test_counter(world, size):
    rounds = 4
    got = world(size).run(r_counter, rounds)
    values = sorted(v for g in got for v in g[:rounds])
    assert values == [5 + 2 * i for i in range(size * rounds)]
    for g in got:
        assert g[rounds] == 5 + 2 * size * rounds and g[-1] == "freed"


@pytest.mark.parametrize("size", [1, 3])
def test_mutex(world, size):
    rounds = 3
    results = world(size).run(r_mutex, rounds)
    runs = [run for r in results for run in r[0]]
    assert all(run == list(range(run[0], run[0] + 3)) for run in runs)
    assert sorted(v for run in runs for v in run) == list(range(3 * rounds * size))
    assert sum(won for _, won, _ in results) == 1
    assert all(depths == (2, 0) for _, _, depths in results)


@pytest.mark.parametrize("size", [3])
def test_condition(world, size):
    results = world(size).run(r_condition)
    assert results[0] == (0, size - 1, 0)
    assert results[1:] == [True] * (size - 1)


@pytest.mark.parametrize("size", [1, 3])
def test_semaphore(world, size):
    results = world(size).run(r_semaphore)
    assert sum(got for got, _ in results) == max(1, size - 1)
    assert results[0][1] is True          # bounded: no release past the start
