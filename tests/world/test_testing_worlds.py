"""gloocy.testing's worlds, both back ends: results, failures naming the
rank, hang stacks, captured output, the rank's COMM_WORLD, and the faults
(kill, freeze, mismatch, a delayed or cut link). The oracles are closed
forms and gloocy's own exception classes."""

import re
import sys
import time

import numpy as np
import pytest

import gloocy
from gloocy import MPI
from gloocy.errors import CollectiveTimeout, MismatchError, PeerLostError
from gloocy.testing import (COMM_WORLD, Freeze, Kill, Mismatch, RankError,
                            RankFailure, RankTimeout, World, current_comm)

BACKENDS = ["threads", "processes"]


def total(comm, n):
    x = np.full(n, comm.rank + 1.0)
    comm.Allreduce(gloocy.IN_PLACE, x)
    return float(x[0])


def total_via_comm_world(comm, n):
    assert COMM_WORLD.rank == comm.rank and current_comm() is comm
    print(f"rank {COMM_WORLD.rank} says hello")
    x = np.full(n, COMM_WORLD.rank + 1.0)
    COMM_WORLD.Allreduce(gloocy.IN_PLACE, x)
    return float(x[0])


def fail_on(comm, bad):
    print(f"rank {comm.rank} before failing")
    assert comm.rank != bad, f"rank {comm.rank} is bad"
    return comm.rank


def sleep_on(comm, rank, seconds):
    if comm.rank == rank:
        time.sleep(seconds)
    return comm.rank


def mpi_world(comm):
    return (MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size(),
            MPI.COMM_WORLD.allreduce(comm.rank))


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_results_failures_and_output(backend):
    with World(3, backend=backend, timeout=20) as w:
        assert w.run(total, 5) == [6.0, 6.0, 6.0]
        assert w.run_each(fail_on, [(9,), (9,), (9,)]) == [0, 1, 2]
        assert w.run(total_via_comm_world, 2) == [6.0] * 3
        assert "rank 2 says hello" in w.log(2)
        with pytest.raises(RankFailure) as info:
            w.run(fail_on, 1)
        text = str(info.value)
        assert set(info.value.errors) == {1} and info.value.results[0] == 0
        assert "rank 1 failed in" in text and "[rank 1] AssertionError: rank 1 is bad" in text
        assert "rank 1 before failing" in text          # its captured output
        assert "rank 0 before failing" not in text
        assert not w.reusable
        res = w.run(fail_on, 2, check=False)
        assert res[:2] == [0, 1] and res[2].is_a("AssertionError")


def test_thread_world_hang_shows_the_stack():
    w = World(2, timeout=20)
    try:
        with pytest.raises(RankTimeout) as info:
            w.run(sleep_on, 1, 1.5, timeout=0.3)
        text = str(info.value)
        assert info.value.hung == [1] and "rank 1 did not finish" in text
        assert "[rank 1]" in text and "in sleep_on" in text   # its stack
        assert not w.alive
        with pytest.raises(RuntimeError, match="dead"):
            w.run(total, 1)
    finally:
        w.close()


def fail_then_total(comm, bad):
    """Rank `bad` raises an error of its own before an allreduce that the
    others enter and wait in."""
    if comm.rank == bad:
        raise IndexError(f"rank {comm.rank} is bad")
    return total(comm, 2)


@pytest.mark.parametrize("kind", ["threads-auto", "threads-tcp", "processes"])
def test_a_rank_that_raises_is_a_crash_to_the_peers_waiting_for_it(kind):
    """As an uncaught error would end the rank's process in a real job, the
    rank that raised loses its connections: the peers waiting for it get
    PeerLostError naming it long before the grace (30 s here) ends, and
    the call raises RankFailure (not RankTimeout) with the first failure
    first."""
    options = (dict(backend="processes") if kind == "processes" else
               dict(transport=kind.split("-")[1]))
    w = World(3, timeout=60, comm_timeout=60, **options)
    try:
        t0 = time.monotonic()
        with pytest.raises(RankFailure) as info:
            w.run(fail_then_total, 1, grace=30)
        assert time.monotonic() - t0 < 25
        errors = info.value.errors
        assert errors[1].is_a(IndexError)
        for r in (0, 2):
            assert errors[r].is_a(PeerLostError), errors
            assert "rank 1" in errors[r].message, errors[r].message
        assert str(info.value).index("IndexError") < str(info.value).index(
            "PeerLostError")
        with pytest.raises(RuntimeError, match="rank 1 of .* are dead"):
            w.run(total, 1)
    finally:
        w.close()


def test_process_world_rank_sees_its_mpi_comm_world():
    with World(2, backend="processes", timeout=20) as w:
        assert w.run(mpi_world) == [(0, 2, 1), (1, 2, 1)]


# The worlds the faults are tried in: thread worlds over their default
# transport (shared memory) and over TCP, and process worlds.
FAULT_WORLDS = {"threads": dict(backend="threads"),
                "threads-tcp": dict(backend="threads", transport="tcp"),
                "processes": dict(backend="processes")}


def pair_kinds(comm):
    """The transport of each pair this rank has connected."""
    links = comm._ctx.links
    return sorted({type(links.pairs[p]).__name__ for p in links.connected})


def ring(comm):
    """Each rank sends its rank to the next, receives from the previous."""
    x = np.full(2, float(comm.rank))
    y = np.empty(2)
    comm.Sendrecv(x, dest=(comm.rank + 1) % comm.size, recvbuf=y,
                  source=(comm.rank - 1) % comm.size)
    return float(y[0])


def test_thread_worlds_default_to_shared_memory():
    with World(3) as w:
        assert w.transport == "auto"
        assert w.run(ring) == [2.0, 0.0, 1.0]
        assert w.run(pair_kinds) == [["ShmPair"]] * 3
    with World(3, env={"GLOOCY_TRANSPORT": "tcp"}) as w:
        w.run(ring)
        assert w.run(pair_kinds) == [["TcpPair"]] * 3
    with World(2, link_faults=[(0, 1)]) as w:    # the proxies sit on sockets
        w.run(ring)
        assert w.run(pair_kinds) == [["TcpPair"]] * 2
    with pytest.raises(ValueError, match="link_faults need transport='tcp'"):
        World(2, transport="auto", link_faults=[(0, 1)])
    with pytest.raises(ValueError, match="disagree"):
        World(2, transport="shm", env={"GLOOCY_TRANSPORT": "tcp"})


# A long comm_timeout: a peer must see the fault itself, within the run's
# grace after the faulty rank ends (else RankTimeout fails the test), not
# at its deadline.
@pytest.mark.parametrize("kind", FAULT_WORLDS)
def test_kill_at_a_call_is_a_lost_peer_to_the_others(kind):
    with World(3, timeout=20, comm_timeout=60, **FAULT_WORLDS[kind]) as w:
        res = w.run(total, 4, check=False, faults=[Kill(1, "Allreduce")])
        assert res[1].type_name in ("RankKilled", "ProcessDied")
        for r in (0, 2):
            assert res[r].is_a(PeerLostError), res[r]
            assert "rank 1" in res[r].message
        assert not w.reusable


@pytest.mark.parametrize("kind", ["threads", "processes"])
def test_kill_while_a_peer_waits_on_its_pair(kind):
    """Over a pair connected before (a shared-memory ring), not the node
    segment: rank 2 waits to receive from the killed rank 1."""
    with World(3, timeout=20, comm_timeout=60, **FAULT_WORLDS[kind]) as w:
        assert w.run(ring) == [2.0, 0.0, 1.0]
        assert w.run(pair_kinds) == [["ShmPair"]] * 3
        res = w.run(ring, check=False, faults=[Kill(1, "Sendrecv")])
        assert res[2].is_a(PeerLostError) and "rank 1" in res[2].message, res[2]
        # rank 0's send to rank 1 may have gone before it died
        assert res[0] == 2.0 or res[0].is_a(PeerLostError), res[0]


def twice(comm):
    x = np.ones(2)
    comm.Allreduce(gloocy.IN_PLACE, x)
    comm.Allreduce(gloocy.IN_PLACE, x)
    return float(x[0])


@pytest.mark.parametrize("kind", FAULT_WORLDS)
def test_freeze_makes_the_peers_time_out_naming_it(kind):
    with World(3, timeout=20, comm_timeout=0.5, **FAULT_WORLDS[kind]) as w:
        res = w.run(twice, check=False,
                    faults=[Freeze(0, "Allreduce", nth=2, seconds=1.5)])
        assert res[0].type_name == "RankFrozen"
        for r in (1, 2):
            assert res[r].is_a(CollectiveTimeout), res[r]
            # named as the one waited for, or as the root cause over TCP
            # (a peer's timeout came first: "rank 0 never came")
            assert re.search(r"waiting for rank\(s\) 0$|rank 0 never came",
                             res[r].message), res[r]


@pytest.mark.parametrize("kind", FAULT_WORLDS)
def test_mismatch_is_reported_on_every_rank(kind):
    with World(3, timeout=20, **FAULT_WORLDS[kind]) as w:
        res = w.run(total, 3, check=False, faults=[Mismatch(2, "Allreduce", instead="Barrier")])
        assert all(isinstance(e, RankError) and e.is_a(MismatchError) for e in res), res
        assert all("barrier" in e.message and "allreduce" in e.message for e in res)


def bcast_time(comm, n):
    x = np.arange(n, dtype=np.float64) if comm.rank == 0 else np.empty(n)
    t0 = time.monotonic()
    for _ in range(3):
        comm.Bcast(x, root=0)
        comm.Barrier()
    assert x[-1] == n - 1
    return time.monotonic() - t0


@pytest.mark.parametrize("backend", BACKENDS)
def test_link_delay_and_cut(backend):
    with World(2, backend=backend, timeout=20, comm_timeout=10,
               link_faults=[(0, 1)]) as w:
        assert max(w.run(bcast_time, 10)) < 1.0
        w.link(0, 1).delay = 0.05           # every chunk either way
        assert min(w.run(bcast_time, 10)) >= 0.05 * 3
        w.link(1, 0).cut()
        res = w.run(total, 2, check=False)
        assert all(e.is_a(PeerLostError) for e in res), res
        assert "rank 1" in res[0].message and "rank 0" in res[1].message


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="backend"):
        World(2, backend="fibers")
    with pytest.raises(ValueError, match="size"):
        World(0)
    with World(2) as w:
        with pytest.raises(ValueError, match="ranks"):
            w.run(total, 1, ranks=[0, 2])
        with pytest.raises(ValueError, match="faults: rank 5"):
            w.run(total, 1, faults=[Kill(5, "Allreduce")])
        with pytest.raises(ValueError, match="no link_faults"):
            w.link(0, 1)


def test_thread_ranks_run_concurrently_and_output_goes_back():
    """A world's ranks run at once (a barrier among them completes) and
    what the test process prints while they run is not captured."""
    with World(4) as w:
        assert w.run(lambda c: c.Barrier() or c.rank) == [0, 1, 2, 3]
    print("after", file=sys.stdout)
    assert not type(sys.stdout).__name__ == "_Router"


@pytest.mark.parametrize("kind", FAULT_WORLDS)
def test_kill_between_calls(kind):
    with World(3, timeout=20, comm_timeout=60, **FAULT_WORLDS[kind]) as w:
        w.kill(1)
        assert not w.alive
        with pytest.raises(RuntimeError, match="rank 1 of .* are dead"):
            w.run(total, 1)
        res = w.run(total, 1, ranks=[0, 2], check=False)
        assert all(e.is_a(PeerLostError) and "rank 1" in e.message for e in res), res
