"""One-sided communication (MPI.Win) on real processes, over shared memory,
TCP and a mix of both: every operation under each kind of epoch (fence,
PSCW, passive locks), checked against closed forms and NumPy; a counter
under contention; progress at a target whose main thread is busy; the
shared, dynamic and user-memory flavors; errors before anything is sent;
nothing left behind by Free (no thread, no /dev/shm file: the harness
checks every rank after every call)."""

import os
import time

import numpy as np
import pytest

from gloocy import MPI

TRANSPORTS = ("shm", "tcp", "mix")
I8 = MPI.LONG                      # NumPy's int64 on Linux (LP64)


def _window(comm, n):
    """Allocate n int64 per rank (disp_unit 8), zeroed; (win, memory)."""
    win = MPI.Win.Allocate(8 * n, 8, comm=comm)
    memory = np.frombuffer(win.tomemory(), np.int64)
    memory[:] = 0
    comm.Barrier()
    return win, memory


# -- rank-side functions ----------------------------------------------------------

def r_fence(comm):
    """Under fences: rank r puts 4 values into each rank t's slot r; everyone
    adds r+1 into rank 0's element 4n..4n+3 (SUM) and MAX-es r into its
    element 4n+4; then each rank gets its right neighbour's whole window."""
    n, r = comm.size, comm.rank
    win, memory = _window(comm, 4 * n + 5)
    win.Fence()
    for t in range(n):
        win.Put(np.arange(4, dtype=np.int64) + 100 * r + 10 * t, t, 4 * r)
    win.Accumulate(np.full(4, r + 1, np.int64), 0, [4 * n, 4, I8], MPI.SUM)
    win.Accumulate(np.array([r], np.int64), 0, 4 * n + 4, MPI.MAX)
    win.Fence()
    mine = memory.copy()
    right = np.full(4 * n + 5, -1, np.int64)
    win.Get(right, (r + 1) % n)
    win.Fence(MPI.MODE_NOSUCCEED)
    win.Free()
    return mine.tolist(), right.tolist()


def r_pscw(comm):
    """A ring: each rank exposes its window to its left neighbour and puts
    its rank into its right neighbour's; Test is False until the left one
    completed."""
    n, r = comm.size, comm.rank
    win, memory = _window(comm, 2)
    group = win.Get_group()
    to_right, from_left = group.Incl([(r + 1) % n]), group.Incl([(r - 1) % n])
    win.Post(from_left)
    win.Start(to_right)
    win.Put(np.array([r + 1000], np.int64), (r + 1) % n, 1)
    win.Complete()
    while not win.Test():
        time.sleep(0.001)
    value = int(memory[1])
    for g in (group, to_right, from_left):
        g.Free()
    win.Free()
    return value


def r_counter(comm, rounds, lock_type):
    """nxtval: `rounds` increments of rank 0's counter by every rank, each
    in a lock epoch of its own; the values each rank got."""
    win, _ = _window(comm, 1)
    got = []
    one, before = np.ones(1, np.int64), np.zeros(1, np.int64)
    for _ in range(rounds):
        win.Lock(0, lock_type)
        if lock_type == MPI.LOCK_EXCLUSIVE:   # a read-modify-write the lock makes atomic
            win.Get(before, 0)
            win.Put(before + 1, 0)
        else:                                 # shared: the atomic operation does it
            win.Fetch_and_op(one, before, 0, 0, MPI.SUM)
        win.Unlock(0)
        got.append(int(before[0]))
    win.Free()
    return got


def r_busy_target(comm, seconds):
    """Rank 0 computes (pure Python, then sleeps) without any MPI call
    while the others lock it, put into it and read back: its agent serves
    them meanwhile."""
    win, memory = _window(comm, comm.size)
    out = None
    if comm.rank == 0:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sum(range(1000))
    else:
        back = np.zeros(1, np.int64)
        start = time.monotonic()
        win.Lock(0)
        win.Put(np.array([comm.rank * 7], np.int64), 0, comm.rank)
        win.Get(back, 0, comm.rank)
        win.Unlock(0)
        out = (int(back[0]), time.monotonic() - start)
    comm.Barrier()
    if comm.rank == 0:
        out = memory.tolist()
    win.Free()
    return out


def r_atomics(comm):
    """Under Lock_all: every rank adds (Fetch_and_op) and swaps in
    (Compare_and_swap from 0) at rank 0; Get_accumulate with NO_OP reads."""
    r = comm.rank
    win, memory = _window(comm, 3)
    win.Lock_all()
    before = np.zeros(1, np.int64)
    win.Fetch_and_op(np.array([r + 1], np.int64), before, 0, 0, MPI.SUM)
    old = np.full(1, -1, np.int64)
    win.Compare_and_swap(np.array([r + 1], np.int64), np.zeros(1, np.int64), old, 0, 1)
    win.Flush(0)
    win.Unlock_all()
    comm.Barrier()
    win.Lock_all()
    seen = np.zeros(3, np.int64)
    win.Get_accumulate(np.zeros(3, np.int64), seen, 0, 0, MPI.NO_OP)
    win.Unlock_all()
    win.Free()
    return int(before[0]), int(old[0]), seen.tolist()


def r_shared(comm):
    """Allocate_shared: rank r's part holds r+1 items of value r, written by
    stores; every rank reads every part through Shared_query. Across
    (pretend) hosts it is refused."""
    try:
        win = MPI.Win.Allocate_shared(8 * (comm.rank + 1), 8, comm=comm)
    except MPI.Exception as e:
        return ("refused", e.Get_error_class(), "one host" in str(e))
    part = np.frombuffer(win.tomemory(), np.int64)
    part[:] = comm.rank
    comm.Barrier()
    seen = []
    for r in range(comm.size):
        buf, unit = win.Shared_query(r)
        seen.append((unit, np.frombuffer(buf, np.int64).tolist()))
    comm.Barrier()
    win.Free()
    left = [f for f in os.listdir("/dev/shm") if f.startswith("gloocy-win")]
    return seen, left


def r_dynamic(comm):
    """A dynamic window: each rank attaches a region, the addresses are
    exchanged, each rank puts into its right neighbour's region."""
    n, r = comm.size, comm.rank
    win = MPI.Win.Create_dynamic(comm=comm)
    region = np.zeros(3, np.int64)
    win.Attach(region)
    addresses = comm.allgather(MPI.Get_address(region))
    win.Fence()
    win.Put(np.array([r + 1], np.int64), (r + 1) % n, addresses[(r + 1) % n] + 8)
    win.Fence()
    win.Detach(region)
    win.Free()
    return region.tolist()


def r_errors(comm):
    """Bad calls raise before anything is sent, naming what is wrong, and
    the window stays usable."""
    win, memory = _window(comm, 2)
    out = {}

    def error(call):
        try:
            call()
        except MPI.Exception as e:
            return e.Get_error_class()
        except (ValueError, TypeError) as e:
            return type(e).__name__
        return None
    x = np.zeros(1, np.int64)
    out["no epoch"] = error(lambda: win.Put(x, 0))
    win.Fence()
    out["past the end"] = error(lambda: win.Put(np.zeros(3, np.int64), 0, 0))
    out["bad rank"] = error(lambda: win.Put(x, comm.size))
    out["two elements"] = error(lambda: win.Fetch_and_op(np.zeros(2, np.int64),
                                                         np.zeros(2, np.int64), 0))
    user_op = MPI.Op.Create(lambda a, b, t: b)
    out["user op"] = error(lambda: win.Accumulate(x, 0, op=user_op))
    user_op.Free()
    out["element types"] = error(lambda: win.Accumulate([np.zeros(2, np.int32), MPI.INT],
                                                        0, [0, 1, I8]))
    win.Fence(MPI.MODE_NOSUCCEED)
    out["unlock unlocked"] = error(lambda: win.Unlock(0))
    out["lock type"] = error(lambda: win.Lock(0, 99))
    win.Lock(0, MPI.LOCK_SHARED)
    win.Accumulate(np.array([comm.rank + 1], np.int64), 0, 1, MPI.SUM)
    win.Unlock(0)
    comm.Barrier()
    total = int(memory[1]) if comm.rank == 0 else None
    win.Free()
    out["freed"] = error(win.Fence)
    out["total"] = total
    return out


# -- tests -----------------------------------------------------------------------

def fence_window(n, r):
    """What r_fence leaves in rank r's window, in a world of n."""
    expect = np.zeros(4 * n + 5, np.int64)
    for s in range(n):
        expect[4 * s:4 * s + 4] = np.arange(4) + 100 * s + 10 * r
    if r == 0:
        expect[4 * n:4 * n + 4] = sum(range(1, n + 1))
        expect[4 * n + 4] = n - 1
    return expect.tolist()


@pytest.mark.parametrize("size", [1, 3])
def test_put_get_accumulate_under_fence(world, size):
    for r, (mine, right) in enumerate(world(size).run(r_fence)):
        assert mine == fence_window(size, r)
        assert right == fence_window(size, (r + 1) % size)


@pytest.mark.parametrize("size", [1, 3])
def test_pscw_ring(world, size):
    assert world(size).run(r_pscw) == [(r - 1) % size + 1000 for r in range(size)]


@pytest.mark.parametrize("lock_type", [MPI.LOCK_EXCLUSIVE, MPI.LOCK_SHARED])
def test_counter_under_contention(world, lock_type):
    size, rounds = 4, 8
    got = world(size).run(r_counter, rounds, lock_type)
    assert all(values == sorted(values) for values in got)
    assert sorted(sum(got, [])) == list(range(size * rounds))


def test_passive_target_progress_while_target_computes(world):
    seconds = 0.6
    results = world(3).run(r_busy_target, seconds)
    assert results[0] == [0, 7, 14]
    for r in (1, 2):
        value, took = results[r]
        assert value == 7 * r
        assert took < seconds      # served while rank 0 was still busy


@pytest.mark.parametrize("size", [1, 3])
def test_fetch_and_op_compare_and_swap_atomic(world, size):
    results = world(size).run(r_atomics)
    befores = sorted(b for b, _, _ in results)
    # the SUM's partial sums: each rank saw the sum of some prefix of the others
    assert len(set(befores)) == size and max(befores) < sum(range(1, size + 1))
    winners = [r for r, (_, old, _) in enumerate(results) if old == 0]
    assert len(winners) == 1
    for _, old, seen in results:
        assert seen == [sum(range(1, size + 1)), winners[0] + 1, 0]
        assert old in (0, winners[0] + 1)


@pytest.mark.parametrize("size", [1, 3])
def test_allocate_shared(world, transport, size):
    results = world(size).run(r_shared)
    if transport == "mix" and size > 1:
        for result in results:
            assert result == ("refused", MPI.ERR_RMA_SHARED, True)
        return
    for seen, left in results:
        assert seen == [(8, [r] * (r + 1)) for r in range(size)]
        assert left == []


def test_dynamic_window(world):
    size = 3
    assert world(size).run(r_dynamic) == [[0, (r - 1) % size + 1, 0] for r in range(size)]


def test_errors_before_anything_is_sent(world):
    size = 2
    for r, out in enumerate(world(size).run(r_errors)):
        assert out["no epoch"] == MPI.ERR_RMA_SYNC
        assert out["past the end"] == MPI.ERR_RMA_RANGE
        assert out["bad rank"] == MPI.ERR_RANK
        assert out["two elements"] == "ValueError"
        assert out["user op"] == MPI.ERR_OP
        assert out["element types"] == MPI.ERR_TYPE
        assert out["unlock unlocked"] == MPI.ERR_RMA_SYNC
        assert out["lock type"] == MPI.ERR_LOCKTYPE
        assert out["freed"] == MPI.ERR_WIN
        assert out["total"] == (sum(range(1, size + 1)) if r == 0 else None)


@pytest.mark.transports("shm", "tcp")
def test_a_dead_target_is_an_error_not_a_hang(tmp_path, transport):
    # Rank 1 dies holding rank 0's lock. Rank 0's lock request to rank 1
    # fails at once (the peer is lost); rank 2, queued behind the dead
    # holder at rank 0, gets an error at the communicator's deadline (T).
    from test_failures import Job
    job = Job(tmp_path, 3, """
        from gloocy import MPI
        win = MPI.Win.Allocate(8, 8, comm=comm)
        comm.Barrier()
        if rank == 1:
            win.Lock(0)
            comm.Barrier()
            report(killed_at=time.monotonic())
            os.kill(os.getpid(), signal.SIGKILL)
        comm.Barrier()
        time.sleep(0.5)
        start = time.monotonic()
        try:
            win.Lock(1 if rank == 0 else 0)
            report(error=None)
        except MPI.Exception as e:
            report(error=type(e).__name__, cls=e.Get_error_class(),
                   took=time.monotonic() - start)
    """, transport, env={"T": "5"})
    results = job.results(timeout=60)
    assert results[1][0] == -9
    for rank in (0, 2):
        code, reports, stderr = results[rank]
        assert code == 0, stderr
        (r,) = reports
        assert r["error"] is not None, r
        assert r["took"] < 5 + 3, r           # the deadline, not a hang
    assert results[0][1][0]["took"] < 3       # the lost peer: at once
