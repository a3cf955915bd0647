"""The host layout told by the rendezvous (transport/lazy.py: rank 0's go)
and the two-level barrier and allreduce "auto" runs at scale (_hier.pxi's
two_level, GLOOCY_TWO_LEVEL_MIN_RANKS: lowered here so that a few rank
processes stand for thousands). Hosts are pretend ones (GLOOCY_HOST_ID per
rank through GLOOCY_TEST_HOSTS: rank r on host r % k, so each host's ranks
are interleaved and the layouts uneven) or network namespaces (3 + 1,
1 + 1 + 2). The oracle: the layout each rank was given, in closed form."""

import os
import signal
import time

import numpy as np
import pytest

from gloocy import MPI
from gloocy.testing import World, netns
from test_two_level import assert_every_survivor_names

AT_SCALE = {"GLOOCY_TWO_LEVEL_MIN_RANKS": "3"}


def round_robin(ranks, k):
    """The hosts of `ranks` (world ranks) when world rank r is on host
    r % k, as host_layout gives them: lists of indexes into `ranks`, hosts
    in the order of their lowest member."""
    hosts = {}
    for i, r in enumerate(ranks):
        hosts.setdefault(r % k, []).append(i)
    return list(hosts.values())


def blocks(layout):
    """The hosts of ranks laid out `layout` (ranks per host, in rank order)."""
    out, start = [], 0
    for k in layout:
        out.append(list(range(start, start + k)))
        start += k
    return out


def r_layout_of_a_barrier(comm, algorithm):
    """The layout the barrier used and how many collectives it ran on the
    world itself."""
    from gloocy import _core
    before = comm._ctx.seq
    comm.Barrier(algorithm=algorithm)
    return (_core.host_layout(comm._ctx), comm._ctx.seq - before,
            comm._ctx.last_algorithm)


def r_split_layouts(comm, k):
    """Layouts of a Split (rank 2 alone, the others reversed) and of a
    Create_group (every rank but 1), each learnt by a forced two-level
    barrier; with the world ranks each holds."""
    from gloocy import _core
    out = []
    sub = comm.Split(int(comm.rank == 2), -comm.rank)
    members = sub.group.Translate_ranks(list(range(sub.size)), comm.group)
    before = sub._ctx.seq
    sub.Barrier(algorithm="two_level")
    # (no allgather over the Split learnt its layout)
    assert sub.size < 3 or sub._ctx.seq == before, sub._ctx.seq - before
    out.append((members, _core.host_layout(sub._ctx)))
    sub.Free()
    group = comm.group.Excl([1])
    sub = comm.Create_group(group)
    if sub != MPI.COMM_NULL:
        members = group.Translate_ranks(list(range(sub.size)), comm.group)
        sub.Barrier(algorithm="two_level")
        out.append((members, _core.host_layout(sub._ctx)))
        sub.Free()
    group.Free()
    return out


@pytest.fixture(scope="module")
def pretend_hosts():
    """5 ranks on 2 pretend hosts (ranks 0, 2, 4 and 1, 3), at scale."""
    with World(5, backend="processes",
               env={"GLOOCY_TEST_HOSTS": "2", **AT_SCALE}) as world:
        yield world


def test_the_rendezvous_tells_the_interleaved_layout(pretend_hosts):
    want = round_robin(range(5), 2)
    assert want == [[0, 2, 4], [1, 3]]
    for layout, calls, ran in pretend_hosts.run(r_layout_of_a_barrier,
                                                "two_level"):
        # no collective on the world: the barrier runs on its phases'
        # contexts, and no allgather over the world learnt the layout
        assert (layout, calls, ran) == (want, 0, "two_level")


def test_derived_communicators_map_the_layout_through_their_ranks(
        pretend_hosts):
    got = pretend_hosts.run(r_split_layouts, 2)
    for rank, subs in enumerate(got):
        for members, layout in subs:
            want = round_robin(members, 2)
            # (a communicator on one host, or of one rank, has no layout)
            assert layout == (want if len(want) > 1 else None), (rank, members)
        split = [2] if rank == 2 else [4, 3, 1, 0]
        assert [members for members, _ in subs] == (
            [split] if rank == 1 else [split, [0, 2, 3, 4]])


def r_barrier_allreduce(comm, n):
    """A barrier, then allreduces of n and of 1 int64 (64 KiB is "auto"'s
    two-level threshold at any size: below it here), each with the
    algorithm it ran."""
    comm.Barrier()
    ran = [comm._ctx.last_algorithm]
    out = []
    for count in (n, 1):
        x = np.arange(count, dtype=np.int64) * (comm.rank + 1)
        comm.Allreduce(MPI.IN_PLACE, x)
        ran.append(comm._ctx.last_algorithm)
        out.append(x)
    return ran, out


def test_auto_runs_barrier_and_small_allreduce_two_level_at_scale(
        pretend_hosts):
    n = 1000
    got = pretend_hosts.run(r_barrier_allreduce, n)
    factor = sum(range(1, 6))
    for ran, (big, one) in got:
        assert ran == ["two_level"] * 3
        np.testing.assert_array_equal(big, np.arange(n) * factor)
        np.testing.assert_array_equal(one, [0])


def r_large_then_small_allreduce(comm):
    """The algorithms of a 1 MiB allreduce (two-level from 64 KiB at any
    rank count) and of an 8 B one after it, with their results."""
    ran, ok = [], True
    for count in (1 << 17, 1):
        x = np.ones(count, np.int64)
        comm.Allreduce(MPI.IN_PLACE, x)
        ran.append(comm._ctx.last_algorithm)
        ok = ok and bool((x == comm.size).all())
    return ran, ok


def test_under_eager_connections_small_calls_stay_flat_after_a_large_one():
    """Eager links: the rendezvous tells no layout, so the at-scale rule
    does not apply; a large call learning the layout by its allgather
    must not turn the small calls after it two-level (it once did)."""
    with World(5, backend="processes",
               env={"GLOOCY_TEST_HOSTS": "2", "GLOOCY_CONNECT": "eager",
                    **AT_SCALE}) as world:
        for ran, ok in world.run(r_large_then_small_allreduce):
            assert ok
            assert ran[0] == "two_level" and ran[1] != "two_level", ran


def r_forced(comm):
    """The algorithms a barrier and a small allreduce run when forced flat
    (the keyword; the environment's GLOOCY_ALGORITHM_BARRIER)."""
    comm.Barrier(algorithm="dissemination")
    ran = [comm._ctx.last_algorithm]
    x = np.ones(4, np.int64)
    comm.Allreduce(MPI.IN_PLACE, x, algorithm="recursive_doubling")
    ran.append(comm._ctx.last_algorithm)
    assert (x == comm.size).all()
    return ran


def test_a_named_algorithm_still_runs_flat_at_scale(pretend_hosts):
    for ran in pretend_hosts.run(r_forced):
        assert ran == ["dissemination", "recursive_doubling"]


def test_below_the_rank_count_auto_stays_flat_and_learns_nothing():
    with World(4, backend="processes", env={"GLOOCY_TEST_HOSTS": "2"}) as world:
        for ran, _ in world.run(r_barrier_allreduce, 8):
            assert "two_level" not in ran
        # nothing learnt, so nothing to show
        assert world.run(lambda_layout) == [None] * 4


def lambda_layout(comm):
    from gloocy import _core
    return _core.host_layout(comm._ctx)


def test_the_environment_forces_the_flat_barrier_at_scale():
    with World(4, backend="processes",
               env={"GLOOCY_TEST_HOSTS": "2",
                    "GLOOCY_ALGORITHM_BARRIER": "recursive_doubling",
                    **AT_SCALE}) as world:
        for ran, _ in world.run(r_barrier_allreduce, 8):
            assert ran == ["recursive_doubling", "two_level", "two_level"]


def r_bad_knob(comm):
    try:
        comm.Barrier()
    except ValueError as e:
        return str(e)
    return "no error"


def test_a_bad_rank_count_is_a_clear_error():
    with World(3, backend="processes",
               env={"GLOOCY_TWO_LEVEL_MIN_RANKS": "two"}) as world:
        for said in world.run(r_bad_knob):
            assert "GLOOCY_TWO_LEVEL_MIN_RANKS='two'" in said


@pytest.mark.skipif(netns.missing() is not None, reason=str(netns.missing()))
@pytest.mark.parametrize("layout", [[3, 1], [1, 1, 2]], ids=["3+1", "1+1+2"])
def test_namespaces_layouts_are_told_and_run_two_level(layout):
    with World(sum(layout), backend="processes", hosts=layout,
               env=AT_SCALE) as world:
        for got, calls, ran in world.run(r_layout_of_a_barrier, None):
            assert (got, calls, ran) == (blocks(layout), 0, "two_level")
        n = sum(layout)
        for ran, (big, one) in world.run(r_barrier_allreduce, 10):
            assert ran == ["two_level"] * 3
            np.testing.assert_array_equal(big, np.arange(10) * n * (n + 1) // 2)


def r_die_or_barrier(comm, victim):
    if comm.rank == victim:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        comm.Barrier(timeout=30)
    except Exception as e:        # every survivor names the lost rank
        return type(e).__name__, getattr(e, "rank", None), str(e)
    return "no error", None, comm._ctx.last_algorithm


@pytest.mark.parametrize("victim", [2, 3], ids=["host-0-member",
                                                "host-1-member"])
def test_a_peer_killed_in_an_automatic_two_level_barrier_is_named(victim):
    with World(5, backend="processes",
               env={"GLOOCY_TEST_HOSTS": "2", **AT_SCALE}) as world:
        world.run(r_layout_of_a_barrier, None)     # two-level from here on
        got = world.run(r_die_or_barrier, victim, check=False, timeout=60)
        assert_every_survivor_names(victim, got)


EXIT_RIGHT_AFTER = """
import numpy as np
from gloocy import MPI
comm = MPI.COMM_WORLD
x = np.full(4, comm.rank, np.int64)
comm.Allreduce(MPI.IN_PLACE, x)
assert (x == sum(range(comm.size))).all(), x
ran = comm._ctx.last_algorithm
sub = comm.Split(0, -comm.rank)
y = np.ones(2)
sub.Allreduce(MPI.IN_PLACE, y)
assert (y == comm.size).all(), y
print(comm.rank, ran, sub._ctx.last_algorithm, flush=True)
sub.Free()
"""


def test_two_launchers_as_hosts_exit_right_after_two_level_calls(tmp_path):
    """Two gloocy-run launchers (--nnodes 2) standing for two hosts of 3
    ranks each (GLOOCY_HOST_ID per launcher): the automatic two-level
    allreduce, in the world and in a Split, right before every rank
    exits (no barrier): every rank ends cleanly, none names a peer lost."""
    import socket
    import subprocess
    import sys
    prog = tmp_path / "prog.py"
    prog.write_text(EXIT_RIGHT_AFTER)
    for attempt in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [subprocess.Popen(
            [sys.executable, "-m", "gloocy.run", "-n", "3", "--nnodes", "2",
             "--node-rank", str(node), "--store", f"127.0.0.1:{port}",
             "--timeout", "60", str(prog)],
            env={**os.environ, "GLOOCY_HOST_ID": f"launcher-{node}", **AT_SCALE},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for node in (0, 1)]
        outs = [p.communicate(timeout=90) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, (attempt, out, err[-3000:])
        lines = sorted(line.split("] ", 1)[-1] for out, _ in outs
                       for line in out.splitlines())
        assert lines == [f"{r} two_level two_level" for r in range(6)], lines
