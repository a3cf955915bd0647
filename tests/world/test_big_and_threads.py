"""64-bit sizes end to end, and communicators used from several threads."""

import threading

import numpy as np
import pytest

import gloocy

TRANSPORTS = ("shm", "tcp", "mix")
BIG = (1 << 31) + 7          # elements: past every 32-bit count


def r_big(comm):
    # Bcast and Allreduce of more than 2^31 int8 elements; the oracle is a
    # closed form checked at both ends and at a 32-bit boundary.
    x = np.empty(BIG, np.int8)
    if comm.rank == 0:
        x[:] = 3
    comm.Bcast(x, root=0)
    ok = bool(x[0] == 3 and x[-1] == 3 and x[(1 << 31) - 1] == 3
              and x[1 << 31] == 3)
    x[:] = comm.rank + 1
    comm.Allreduce(gloocy.IN_PLACE, x, algorithm="ring")
    expect = sum(range(1, comm.size + 1))
    probe = [0, (1 << 31) - 1, 1 << 31, BIG - 1]
    ok = ok and all(int(x[i]) == expect for i in probe)
    ok = ok and int(np.count_nonzero(x != expect)) == 0
    return ok


# 2 GiB a rank: over shared memory and TCP only (a mix of two ranks on two
# pretend hosts is TCP again).
@pytest.mark.transports("shm", "tcp")
@pytest.mark.hard_timeout(300)
def test_counts_above_2_to_the_31(world):
    assert world(2).run(r_big, timeout=280) == [True, True]


def r_threads(comm, rounds):
    # Each thread owns a Dup of the world and runs its own collectives on
    # it, concurrently with the others; results must not mix.
    dups = [comm.Dup() for _ in range(3)]
    results = [None] * len(dups)

    def work(i):
        out = []
        for k in range(rounds):
            x = np.full(1000 + 17 * i, (i + 1) * (comm.rank + 1) + k, np.int64)
            dups[i].Allreduce(gloocy.IN_PLACE, x)
            out.append(int(x[0]))
            out.append(dups[i].bcast((i, k) if dups[i].rank == 0 else None))
        results[i] = out

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(dups))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for d in dups:
        d.Free()
    return results


@pytest.mark.parametrize("size", [2, 3])
def test_dup_communicators_run_concurrently_from_threads(world, size):
    rounds = 20
    n = size
    got = world(size).run(r_threads, rounds)
    for rank_result in got:
        for i, out in enumerate(rank_result):
            expect = []
            for k in range(rounds):
                expect.append(sum((i + 1) * (r + 1) + k for r in range(n)))
                expect.append((i, k))
            assert out == expect
