"""Nonblocking collectives as schedules in the core, on real processes over
shared memory, TCP and a mix of both: many outstanding at once, of every
kind, started in the same order on every rank but completed in a different
order on each (Waitall of a shuffled list, Testsome loops), interleaved
with blocking collectives; every result checked against NumPy. User ops
in the core (non-commutative, and one that raises). And a peer killed
while an Iallreduce is outstanding is named by the survivors' Wait.
"""

import os
import threading
import time

import numpy as np
import pytest

import gloocy
from gloocy import IN_PLACE
from gloocy.errors import PeerLostError

from gloocy.testing.processes import ProcessWorld
from conftest import TRANSPORT_ENV

TRANSPORTS = ("shm", "tcp", "mix")
SIZES = [2, 3, 5]


def data(rank, k, salt):
    return (np.arange(k, dtype=np.int64) * (rank + 1) + 100 * rank
            + 7 * salt)


def starts(comm, k, salt):
    """Start one nonblocking collective of each kind (root varies with the
    salt); (name, request, buffer) each. Blocking calls in between."""
    n, r = comm.size, comm.rank
    root = salt % n
    mine = data(r, k, salt)
    out = []
    out.append(("barrier", comm.Ibarrier(), None))
    b = mine.copy() if r == root else np.zeros(k, np.int64)
    out.append(("bcast", comm.Ibcast(b, root), b))
    x = np.empty(k, np.int64)
    out.append(("allreduce", comm.Iallreduce(mine, x, gloocy.SUM), x))
    # A blocking collective while the ones above are outstanding.
    y = mine.copy()
    comm.Allreduce(IN_PLACE, y, gloocy.MAX)
    out.append(("blocking max", None, y))
    x = mine.copy()
    out.append(("allreduce min in place",
                comm.Iallreduce(IN_PLACE, x, gloocy.MIN), x))
    x = np.zeros(k, np.int64) if r == root else None
    out.append(("reduce", comm.Ireduce(mine, x, gloocy.SUM, root), x))
    x = np.empty(n * k, np.int64)
    out.append(("allgather", comm.Iallgather(mine, x), x))
    x = np.zeros(n * k, np.int64) if r == root else None
    out.append(("gather", comm.Igather(mine, x, root), x))
    src = (np.concatenate([data(j, k, salt) + 3 for j in range(n)])
           if r == root else None)
    x = np.zeros(k, np.int64)
    out.append(("scatter", comm.Iscatter(src, x, root), x))
    comm.Barrier()
    src = np.concatenate([mine + 1000 * j for j in range(n)])
    x = np.zeros(n * k, np.int64)
    out.append(("alltoall", comm.Ialltoall(src, x), x))
    counts = [(j + salt) % 3 for j in range(n)]
    x = np.zeros(sum(counts), np.int64)
    out.append(("allgatherv", comm.Iallgatherv(
        mine[:counts[r]], [x, counts]), x))
    src = np.concatenate([mine * (j + 1) for j in range(n)])
    x = np.zeros(k, np.int64)
    out.append(("reduce_scatter_block",
                comm.Ireduce_scatter_block(src, x, gloocy.SUM), x))
    x = np.zeros(k, np.int64)
    out.append(("scan", comm.Iscan(mine, x, gloocy.SUM), x))
    x = np.full(k, -1, np.int64)
    out.append(("exscan", comm.Iexscan(mine, x, gloocy.SUM), x))
    y = mine.copy() if r == root else np.zeros(k, np.int64)
    comm.Bcast(y, root)
    out.append(("blocking bcast", None, y))
    return out


def expect(name, n, r, k, salt):
    ins = [data(j, k, salt) for j in range(n)]
    root = salt % n
    table = {
        "barrier": lambda: None,
        "bcast": lambda: ins[root],
        "allreduce": lambda: np.sum(ins, axis=0),
        "blocking max": lambda: np.max(ins, axis=0),
        "allreduce min in place": lambda: np.min(ins, axis=0),
        "reduce": lambda: np.sum(ins, axis=0) if r == root else None,
        "allgather": lambda: np.concatenate(ins),
        "gather": lambda: np.concatenate(ins) if r == root else None,
        "scatter": lambda: ins[r] + 3,
        "alltoall": lambda: np.concatenate([ins[j] + 1000 * r for j in range(n)]),
        "allgatherv": lambda: np.concatenate(
            [ins[j][:(j + salt) % 3] for j in range(n)]),
        "reduce_scatter_block": lambda: np.sum(ins, axis=0) * (r + 1),
        "scan": lambda: np.sum(ins[:r + 1], axis=0),
        "exscan": lambda: (np.sum(ins[:r], axis=0) if r
                           else np.full(k, -1, np.int64)),
        "blocking bcast": lambda: ins[root],
    }
    want = table[name]()
    return None if want is None else np.asarray(want).tolist()


def r_scrambled(comm, k, rounds):
    """`rounds` batches of every nonblocking collective, all outstanding at
    once; odd batches finished by Waitall of a list shuffled differently on
    each rank, even ones by a Testsome loop over another shuffle."""
    rng = np.random.default_rng(comm.rank)
    calls = []
    for salt in range(rounds):
        calls += [(salt, name, q, buf) for name, q, buf in starts(comm, k, salt)]
    pending = [c for c in calls if c[2] is not None]
    order = rng.permutation(len(pending))
    pending = [pending[i] for i in order]
    by_waitall = [c for c in pending if c[0] % 2]
    by_testsome = [c for c in pending if not c[0] % 2]
    reqs = [c[2] for c in by_testsome]
    deadline = time.monotonic() + 60
    finished = 0
    while finished < len(reqs) and time.monotonic() < deadline:
        done = gloocy.Request.Testsome(reqs)
        finished += len(done or ())
    assert finished == len(reqs), f"Testsome finished {finished} of {len(reqs)}"
    gloocy.Request.Waitall([c[2] for c in by_waitall])
    return [(salt, name, None if buf is None else buf.tolist())
            for salt, name, _, buf in calls]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("k", [3, 20_000])
def test_outstanding_collectives_finish_in_any_order(world, size, k):
    results = world(size).run(r_scrambled, k, 3)
    for r, got in enumerate(results):
        for salt, name, buf in got:
            assert buf == expect(name, size, r, k, salt), (r, salt, name)


def r_ibarrier_waits_for_all(comm, where, rounds):
    """Each round, every rank marks its arrival (a file), late by its rank,
    then Ibarrier; once its Wait returns every rank's mark must be there."""
    seen = []
    for k in range(rounds):
        time.sleep(0.02 * comm.rank)
        open(f"{where}/{k}.{comm.rank}", "w").close()
        req = comm.Ibarrier()
        req.Wait()
        seen.append(sum(name.startswith(f"{k}.") for name in os.listdir(where)))
    return seen


@pytest.mark.parametrize("size", [2, 3, 5, 6])
def test_ibarrier_returns_only_once_every_rank_has_come(world, size, tmp_path):
    # (6: two ranks fold into their partners first, as in recursive doubling)
    where = tmp_path / "arrived"
    where.mkdir()
    assert world(size).run(r_ibarrier_waits_for_all, str(where), 3) == [[size] * 3] * size


def digits(invec, inoutvec):
    """Non-commutative, associative: inoutvec = invec <op> inoutvec, the
    digits side by side (invec's first) after each number's leading 1,
    which only marks where its digits start."""
    p = np.ones_like(inoutvec)
    while np.any(p * 10 <= inoutvec):
        p = np.where(p * 10 <= inoutvec, p * 10, p)
    inoutvec[:] = invec * p + inoutvec - p


def digit_of(rank, k):
    return (np.arange(k, dtype=np.int64) + rank + 1) % 10


def digits_of(rank, k):
    return 10 + digit_of(rank, k)


def r_user_op_nonblocking(comm, k):
    """A non-commutative user op through Iallreduce, Ireduce and Iscan,
    waited for in reverse order."""
    op = gloocy.Op.create(digits, commute=False)
    try:
        mine = digits_of(comm.rank, k)
        everywhere = np.empty_like(mine)
        at_root = np.zeros_like(mine)
        prefix = np.empty_like(mine)
        reqs = [comm.Iallreduce(mine, everywhere, op),
                comm.Ireduce(mine, at_root, op, comm.size - 1),
                comm.Iscan(mine, prefix, op)]
        gloocy.Request.Waitall(reqs[::-1])
        return everywhere.tolist(), at_root.tolist(), prefix.tolist()
    finally:
        op.Free()


@pytest.mark.parametrize("size", [1, 3, 4])
def test_noncommutative_user_op_nonblocking(world, size):
    k = 5

    def fold(ranks):
        acc = np.ones(k, np.int64)
        for j in ranks:
            acc = acc * 10 + digit_of(j, k)
        return acc.tolist()
    results = world(size).run(r_user_op_nonblocking, k)
    for r, (everywhere, at_root, prefix) in enumerate(results):
        assert everywhere == fold(range(size))
        assert at_root == (fold(range(size)) if r == size - 1 else [0] * k)
        assert prefix == fold(range(r + 1))


def r_raising_user_op(comm):
    """A user op that raises, blocking and nonblocking: (whether this rank
    raised each time, then a SUM on the same communicator)."""
    def bad(invec, inoutvec):
        raise ZeroDivisionError("the user's op failed")
    op = gloocy.Op.create(bad, commute=False)
    raised = []
    try:
        for start in (False, True):
            x = np.arange(4, dtype=np.int64)
            try:
                if start:
                    comm.Iallreduce(IN_PLACE, x, op).Wait()
                else:
                    comm.Allreduce(IN_PLACE, x, op)
                raised.append(False)
            except ZeroDivisionError:
                raised.append(True)
    finally:
        op.Free()
    y = np.full(3, comm.rank + 1, np.int64)
    comm.Allreduce(IN_PLACE, y)
    return raised, y.tolist()


@pytest.mark.parametrize("size", [1, 3])
def test_raising_user_op_is_raised_and_spoils_nothing(world, size):
    # Where the op ran it raises its error, after the call (every rank but
    # the first folds in the chain); the communicator stays usable.
    results = world(size).run(r_raising_user_op)
    for r, (raised, y) in enumerate(results):
        assert raised == [r > 0, r > 0], (r, raised)
        assert y == [size * (size + 1) // 2] * 3


def r_iallreduce_until_lost(comm):
    """Start an Iallreduce the last rank never joins and wait: (the rank
    the PeerLostError names, its message)."""
    x = np.ones(1000)
    req = comm.Iallreduce(IN_PLACE, x)
    try:
        req.Wait()
    except PeerLostError as e:
        return e.rank, str(e)
    return None, "Wait returned"


def r_barrier(comm):
    comm.Barrier()


def test_peer_killed_during_iallreduce_is_named(transport):
    size = 3
    with ProcessWorld(size, env=TRANSPORT_ENV[transport]) as w:
        w.run(r_barrier)                        # connected, then killed
        timer = threading.Timer(0.5, w.kill, (size - 1,))
        timer.start()
        try:
            got = w.run(r_iallreduce_until_lost, ranks=list(range(size - 1)),
                        timeout=30)
        finally:
            timer.cancel()
    for lost, text in got:
        assert lost == size - 1, text
        assert f"rank {size - 1}" in text
