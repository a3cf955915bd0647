"""Every rank's error names the root cause, not the echo of a peer giving up.

A rank that stops a call (timeout, lost peer, mismatch, its own exception)
tells the peers it can still reach why; they raise the same class, quoting
it, and add what they were doing themselves.
"""

import signal
import time

import numpy as np
import pytest

import gloocy
from gloocy import MPI
from conftest import TRANSPORT_ENV
from gloocy.testing.processes import ProcessWorld as World

TRANSPORTS = ("shm", "tcp", "mix")


@pytest.fixture
def fresh(transport):
    """fresh(size): a world of its own, over this module's transport (every
    test here poisons its communicators)."""
    made = []

    def get(size):
        made.append(World(size, env=TRANSPORT_ENV[transport]))
        return made[-1]
    yield get
    for w in made:
        w.close()


def allreduce_and_report(comm, timeout):
    x = np.ones(4)
    t0 = time.monotonic()
    try:
        comm.Allreduce(gloocy.IN_PLACE, x, timeout=timeout)
    except gloocy.errors.GloocyError as e:
        return (type(e).__name__, e.origin, str(e), time.monotonic() - t0,
                getattr(e, "culprit", None))
    return "no error", None, "", time.monotonic() - t0, None


def test_a_frozen_rank_is_named_by_everyone(fresh):
    """Rank 1 of 3 is stopped (SIGSTOP): ranks 0 and 2 both report a
    timeout traced to rank 1 (`culprit`), whichever of them gave up first
    and whatever the algorithm made each wait for."""
    w = fresh(3)
    w.run(lambda_barrier)
    w.kill(1, signal.SIGSTOP)
    try:
        got = w.run(allreduce_and_report, 2.0, ranks=[0, 2], timeout=30)
    finally:
        w.kill(1, signal.SIGKILL)
    for rank, (name, origin, message, elapsed, culprit) in zip([0, 2], got):
        assert name == "CollectiveTimeout", (rank, message)
        assert culprit == 1, (rank, message)
        assert ("timed out waiting for rank(s) 1" in message
                or message.endswith("; rank 1 never came")), (rank, message)
        assert "lost peer" not in message, (rank, message)
        if origin is not None:           # told by the other survivor
            assert origin == 2 - rank and f"stopped when rank {2 - rank} timed out" in message
        assert elapsed < 2.0 + 10, (rank, elapsed)   # its deadline, not later


def lambda_barrier(comm):
    comm.Barrier()


def object_mismatch(comm):
    try:
        if comm.rank == 0:
            comm.allreduce(comm.rank)
        else:
            comm.bcast({"a": 1}, root=0)
    except gloocy.MismatchError as e:
        return str(e)
    return "no error"


def test_object_collectives_mismatch_names_the_users_calls(fresh):
    for rank, message in enumerate(fresh(3).run(object_mismatch)):
        assert "allreduce of objects" in message and "bcast of objects" in message, \
            (rank, message)
        assert "count=" not in message, (rank, message)     # pickles' sizes mean nothing


def interrupted_at_rank_0(comm):
    """Rank 0 is interrupted (Ctrl-C) while it waits for rank 2, which
    comes late: ranks 1 and 2 hear why the call stopped."""
    import os
    import threading
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if comm.rank == 0:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    if comm.rank == 2:
        time.sleep(2.0)
    x = np.ones(1024)
    t0 = time.monotonic()
    try:
        comm.Allreduce(gloocy.IN_PLACE, x, timeout=60)
        # Rank 2 may have got all it needed from rank 1 (recursive doubling
        # at N = 3): rank 0's reason then stops its next call.
        comm.Barrier(timeout=60)
    except KeyboardInterrupt:
        return "KeyboardInterrupt", "", time.monotonic() - t0
    except gloocy.errors.GloocyError as e:
        return type(e).__name__, str(e), time.monotonic() - t0
    return "no error", "", time.monotonic() - t0


def test_an_interrupted_rank_is_named_by_the_others(fresh):
    got = fresh(3).run(interrupted_at_rank_0)
    assert got[0][0] == "KeyboardInterrupt"
    for rank in (1, 2):
        name, message, elapsed = got[rank]
        assert name == "GloocyError", (rank, message)
        assert "rank 0 stopped the call" in message, (rank, message)
        assert ": KeyboardInterrupt; " in message, (rank, message)
        assert elapsed < 30, (rank, elapsed)    # told, not timed out (60 s)


def killed_peer_report(comm, victim):
    x = np.ones(4)
    try:
        comm.Allreduce(gloocy.IN_PLACE, x, timeout=60)
    except gloocy.PeerLostError as e:
        return e.rank
    return None


@pytest.mark.parametrize("victim", [0, 2])
def test_a_killed_rank_is_the_lost_rank_everywhere(fresh, victim):
    """Relayed or seen first-hand, PeerLostError.rank is the killed rank."""
    w = fresh(4)
    w.run(lambda_barrier)
    w.kill(victim, signal.SIGKILL)
    others = [r for r in range(4) if r != victim]
    assert w.run(killed_peer_report, victim, ranks=others, timeout=30) == [victim] * 3
