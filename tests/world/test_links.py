"""Communicators derived from one another share the connections: messages
of different communicators never mix, new ones cost no sockets, and the
cases that could deadlock on a shared stream complete. Over shared memory,
TCP and a mix of both (TRANSPORTS)."""

import os
import threading

import numpy as np
import pytest

import gloocy

TRANSPORTS = ("shm", "tcp", "mix")


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def r_storm(comm, rounds):
    """Hundreds of Dups and Splits, each running a collective, then freed:
    the results are right and no file descriptor is left behind but the
    world's own eventfd (made the first time it sleeps while shared).
    Counted from after the first round: the connections it makes (on
    first use) last as long as the world."""
    fds = None
    sums = []
    for k in range(rounds):
        if k == 1:
            fds = _open_fds()
        dup = comm.Dup()
        half = comm.Split(comm.rank % 2, key=-comm.rank)
        x = np.array([comm.rank + k], np.int64)
        dup.Allreduce(gloocy.IN_PLACE, x)
        y = half.allreduce(comm.rank)
        sums.append((int(x[0]), y, half.rank, half.size))
        half.Free()
        dup.Free()
    return sums, (_open_fds() - fds) if fds is not None else 0


@pytest.mark.parametrize("size", [1, 3, 4])
def test_dup_and_split_storm(world, size):
    rounds = 150
    for rank, (sums, leaked) in enumerate(world(size).run(r_storm, rounds)):
        assert leaked in (0, 1)         # a leak per round would be >= 150
        mates = [r for r in range(size) if r % 2 == rank % 2]
        for k, (total, half_sum, half_rank, half_size) in enumerate(sums):
            assert total == sum(r + k for r in range(size))
            assert half_sum == sum(mates)
            assert half_size == len(mates)
            # key = -rank: the highest world rank comes first
            assert half_rank == sorted(mates, reverse=True).index(rank)


def r_interleaved(comm):
    """Two communicators' messages on one stream, received in the opposite
    order from the sent one, with the same tags."""
    other = comm.Dup()
    n = 1 << 18                                  # past the eager size
    out = []
    if comm.rank == 0:
        comm.Send(np.full(n, 1, np.int32), 1, tag=5)
        other.Send(np.full(n, 2, np.int32), 1, tag=5)
    elif comm.rank == 1:
        a, b = np.zeros(n, np.int32), np.zeros(n, np.int32)
        other.Recv(b, 0, tag=5)
        comm.Recv(a, 0, tag=5)
        out = [int(a.min()), int(a.max()), int(b.min()), int(b.max())]
    other.Free()
    return out


def test_messages_of_two_communicators_do_not_mix(world):
    assert world(2).run(r_interleaved)[1] == [1, 1, 2, 2]


def r_nonblocking_then_p2p(comm):
    """A large Ibcast is started, then rank 0 sends to rank 1, which
    receives before it starts the Ibcast: legal MPI; the large bcast frame
    that arrives first must not block the stream."""
    n = 1 << 20
    big = np.arange(n, dtype=np.int64) if comm.rank == 0 else np.zeros(n, np.int64)
    msg = np.zeros(4, np.int64)
    if comm.rank == 0:
        req = comm.Ibcast(big, root=0)
        comm.Send(np.arange(4, dtype=np.int64) + 7, 1, tag=3)
    else:
        comm.Recv(msg, 0, tag=3)
        req = comm.Ibcast(big, root=0)
    req.Wait()
    return bool(np.array_equal(big, np.arange(n))), msg.tolist()


def test_early_large_frame_of_another_communicator_does_not_block(world):
    got = world(2).run(r_nonblocking_then_p2p)
    assert got[0][0] and got[1][0]
    assert got[1][1] == [7, 8, 9, 10]


def r_threads_large(comm, rounds):
    """Threads on Dups of one communicator move large messages at once
    over the same connections (one thread's bytes are often read by
    another)."""
    dups = [comm.Dup() for _ in range(3)]
    ok = [True] * len(dups)

    def work(i):
        for k in range(rounds):
            x = np.full(300_000 + 1000 * i, comm.rank + i + k, np.float64)
            dups[i].Allreduce(gloocy.IN_PLACE, x)
            expect = sum(r + i + k for r in range(comm.size))
            ok[i] = ok[i] and bool(np.all(x == expect))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for d in dups:
        d.Free()
    return ok


@pytest.mark.parametrize("size", [2, 3])
def test_threads_share_connections_with_large_messages(world, size):
    assert world(size).run(r_threads_large, 8) == [[True] * 3] * size


def r_create_group(comm):
    """Create_group is collective over the group's members only: the other
    ranks are busy elsewhere meanwhile."""
    group = comm.Get_group().Incl([r for r in range(comm.size) if r % 2 == 0])
    if comm.rank % 2 == 0:
        sub = comm.Create_group(group)
        out = (sub.rank, sub.size, sub.allreduce(comm.rank))
        sub.Free()
    else:
        out = None
    comm.Barrier()
    return out


def test_create_group_over_members_only(world):
    got = world(5).run(r_create_group)
    evens = [0, 2, 4]
    for rank, out in enumerate(got):
        assert out == ((evens.index(rank), 3, sum(evens)) if rank in evens else None)
