"""Barrier on derived communicators (Dup, Split by parity,
Split_type(COMM_TYPE_SHARED), Create_group with holes): it runs in the
communicator's own node segment when its members share a host (from its
first call: the segment is made as that call begins), over the pairs
otherwise, and still lets nobody leave before everyone entered. Also the
`algorithm=` keyword and GLOOCY_ALGORITHM_BARRIER: a forced "shm" without a
segment falls back to the pairs' automatic choice, as for the other
collectives, and a bad name is a ValueError naming it.

Over "shm" every rank is on one host; over "mix" ranks alternate between
two pretend hosts, so the parity split and Split_type are on one host and
the others span both.
"""

import os
import time

import pytest

import gloocy
from gloocy import MPI

TRANSPORTS = ("shm", "mix")
DELAY = 0.05


def _derived(world, how):
    r = world.rank
    if how == "dup":
        return world.Dup()
    if how == "parity":
        return world.Split(r % 2, -r)           # reversed order as well
    if how == "shared":
        return world.Split_type(MPI.COMM_TYPE_SHARED, key=r)
    # a group with a hole: world rank 1 left out
    return world.Create_group(world.Get_group().Excl([1]))


def r_barrier_rounds(world, how, algorithm):
    """On a fresh `how` communicator, per round: (entry, exit, the
    algorithm that ran); in round k its rank k % size enters DELAY seconds
    after the others. Returned with its members' world ranks (in its rank
    order), our rank in it and whether its members share one host; None
    where we are not a member."""
    comm = _derived(world, how)
    if comm == MPI.COMM_NULL:
        world.Barrier()
        return None
    try:
        out = []
        for k in range(max(comm.size, 2)):
            if comm.rank == k % comm.size:
                time.sleep(DELAY)
            t_in = time.monotonic_ns()          # one clock for every process
            if algorithm is None:
                comm.Barrier()
            else:
                comm.Barrier(algorithm=algorithm)
            out.append((t_in, time.monotonic_ns(), comm._ctx.last_algorithm))
        members = tuple(comm.allgather(world.rank))
        hosts = comm.allgather(gloocy.transport.shm.host_identity())
        return members, comm.rank, out, len(set(hosts)) == 1
    finally:
        comm.Free()
        world.Barrier()


def _check_rounds(got):
    """Barrier semantics on each derived communicator, against the entry
    and exit clocks of its members."""
    comms = {}
    for members, rank, out, _ in got:
        comms.setdefault(members, {})[rank] = out
    for members, outs in comms.items():
        size = len(members)
        assert sorted(outs) == list(range(size)), members
        late = []
        for k in range(len(outs[0])):
            entries = [outs[r][k][0] for r in range(size)]
            exits = [outs[r][k][1] for r in range(size)]
            assert min(exits) >= max(entries), f"{members} round {k}: someone left early"
            late.append(entries[k % size] - min(entries))
        # The check has teeth: the late rank was late in some round at least.
        assert max(late) >= DELAY * 1e9 * 0.25, late


CASES = [("dup", 2), ("dup", 3), ("dup", 5),
         ("shared", 2), ("shared", 3), ("shared", 5),
         ("parity", 4), ("parity", 5),          # halves of 2 + 2, 3 + 2
         ("group", 3), ("group", 4), ("group", 6)]   # 2, 3, 5 members


@pytest.mark.parametrize("how,size", CASES)
def test_barrier_runs_in_the_segment_of_a_derived_communicator(world, how, size):
    got = world(size).run(r_barrier_rounds, how, None)
    members = [g for g in got if g is not None and len(g[0]) >= 2]
    if not members:     # over "mix", Split_type of 2 ranks: one each
        pytest.skip(f"every {how} communicator of {size} ranks has one member")
    _check_rounds(members)
    for _, _, out, same_host in members:
        # every round, the first one too: node segment iff one host
        want = "shm" if same_host else "recursive_doubling"
        assert [o[2] for o in out] == [want] * len(out)


@pytest.mark.parametrize("algorithm", ["recursive_doubling", "dissemination",
                                       "shm", "auto"])
def test_barrier_algorithm_keyword(world, algorithm):
    got = world(3).run(r_barrier_rounds, "dup", algorithm)
    _check_rounds(got)
    for _, _, out, same_host in got:
        want = {"auto": "shm", "shm": "shm"}.get(algorithm, algorithm)
        if not same_host and want == "shm":     # no segment: the pairs' auto
            want = "recursive_doubling"
        assert [o[2] for o in out] == [want] * len(out)


def _set_env(comm, name, value):
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def r_forced(world, keyword):
    """A Dup made with GLOOCY_ALGORITHM_BARRIER set (see the caller): the
    algorithm its Barrier ran, with `keyword` (or none), and whether its
    members share a host."""
    dup = world.Dup()
    try:
        dup.Barrier(algorithm=keyword)
        ran = dup._ctx.last_algorithm
        hosts = dup.allgather(gloocy.transport.shm.host_identity())
        return ran, len(set(hosts)) == 1
    finally:
        dup.Free()


def test_forced_shm_runs_where_it_can_and_the_keyword_wins(world):
    w = world(4)
    w.run(_set_env, "GLOOCY_ALGORITHM_BARRIER", "shm")
    try:
        for ran, same_host in w.run(r_forced, None):
            assert ran == ("shm" if same_host else "recursive_doubling")
        for ran, _ in w.run(r_forced, "dissemination"):
            assert ran == "dissemination"
        w.run(_set_env, "GLOOCY_ALGORITHM_BARRIER", "dissemination")
        for ran, same_host in w.run(r_forced, "auto"):
            assert ran == ("shm" if same_host else "recursive_doubling")
    finally:
        w.run(_set_env, "GLOOCY_ALGORITHM_BARRIER", None)


def r_bad_name(world, where, name, env):
    _set_env(world, "GLOOCY_ALGORITHM_BARRIER", env)
    try:
        comm = world.Dup() if where == "dup" else MPI.COMM_SELF.Dup()
    finally:
        _set_env(world, "GLOOCY_ALGORITHM_BARRIER", None)
    try:
        comm.Barrier(algorithm=name)
    except ValueError as e:
        return str(e)
    finally:
        comm.Free()
    return None


@pytest.mark.parametrize("where", ["dup", "self"])
def test_a_bad_barrier_algorithm_is_a_value_error_naming_it(world, where):
    w = world(2)
    for msg in w.run(r_bad_name, where, "ring", None):
        assert msg is not None and "'ring'" in msg and "barrier" in msg
    for msg in w.run(r_bad_name, where, None, "bogus"):
        assert msg is not None and "GLOOCY_ALGORITHM_BARRIER" in msg
        assert "'bogus'" in msg
