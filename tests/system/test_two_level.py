"""Two-level collectives (gloocy/_hier.pxi) on ranks spread over hosts made
of network namespaces: uneven layouts (3 + 1, 2 + 2, 1 + 1 + 2), every
two-level collective against NumPy with hypothesis-sampled sizes and
roots, "auto" choosing two-level above its thresholds and a forced flat
algorithm not, a peer
killed mid-call named by every survivor, nothing left in /dev/shm. One
world per layout, reused across examples."""

import os
import signal
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gloocy import MPI
from gloocy.testing import World, netns

pytestmark = pytest.mark.skipif(netns.missing() is not None,
                                reason=str(netns.missing()))

LAYOUTS = {"3+1": [3, 1], "2+2": [2, 2], "1+1+2": [1, 1, 2]}


def shm_names():
    """/dev/shm's names, less the peers' own (MPICH's, run by the link-bytes
    test or by anyone else on this machine)."""
    from conftest import _dev_shm
    return _dev_shm()


# The pipeline segment of the worlds below: a two-level bcast above it goes
# piece by piece (_hier.pxi's pipeline_piece: at least a segment, at most 4
# pieces; allreduce and allgather between two hosts at most 16), so the
# sampled sizes from 70_000 int64 run pipelined.
SEGMENT = 64 << 10


def pipeline_pieces(nbytes, segment=SEGMENT):
    """How many pieces a two-level bcast of nbytes moves (closed form)."""
    if nbytes <= segment:
        return 1
    piece = max(segment, -(-nbytes // 4))
    return -(-nbytes // piece)


@pytest.fixture(scope="module", params=list(LAYOUTS))
def hosts_world(request):
    before = shm_names()
    layout = LAYOUTS[request.param]
    world = World(sum(layout), backend="processes", hosts=layout,
                  env={"GLOOCY_SEGMENT_BYTES": SEGMENT})
    yield layout, world
    world.close()
    assert shm_names() - before == set(), "left in /dev/shm"


def data(rank, n, seed):
    """Rank's input: exact in int64 (sums of these never round)."""
    return np.random.default_rng([seed, rank]).integers(-1000, 1000, n)


TL = "two_level"


def r_collectives(comm, n, root, seed, counts):
    """Every two-level collective once, forced (and the names they ran);
    the test checks each result against NumPy."""
    ctx = comm._ctx
    rank, size = comm.rank, comm.size
    mine = data(rank, n, seed)
    out, ran = {}, {}

    x = np.empty(n, np.int64)
    comm.Allreduce(mine, x, algorithm=TL)
    out["allreduce"], ran["allreduce"] = x, ctx.last_algorithm
    y = mine.astype(np.float64)
    comm.Allreduce(MPI.IN_PLACE, y, op=MPI.MAX, algorithm=TL)
    out["allreduce_max"] = y

    b = mine.copy()
    comm.Bcast(b, root=root, algorithm=TL)
    out["bcast"], ran["bcast"] = b, ctx.last_algorithm

    g = np.empty(size * n, np.int64)
    comm.Allgather(mine, g, algorithm=TL)
    out["allgather"], ran["allgather"] = g, ctx.last_algorithm

    gv = np.full(sum(counts) + size, -7, np.int64)   # gaps stay untouched
    displs = [sum(counts[:i]) + i for i in range(size)]
    comm.Allgatherv(mine[:counts[rank]], [gv, (counts, displs)], algorithm=TL)
    out["allgatherv"] = gv

    r = np.empty(n, np.int64) if rank == root else None
    comm.Reduce(mine, r, op=MPI.SUM, root=root, algorithm=TL)
    out["reduce"], ran["reduce"] = r, ctx.last_algorithm
    r2 = mine.copy()
    comm.Reduce(MPI.IN_PLACE if rank == root else r2, r2 if rank == root else None,
                op=MPI.MIN, root=root, algorithm=TL)
    out["reduce_min_in_place"] = r2 if rank == root else None

    comm.Barrier()
    out["flat"] = np.empty(n, np.int64)
    comm.Allreduce(mine, out["flat"], algorithm="ring")
    ran["flat"] = ctx.last_algorithm
    return out, ran


def oracle(size, n, root, seed, counts):
    every = np.stack([data(r, n, seed) for r in range(size)])
    displs = [sum(counts[:i]) + i for i in range(size)]
    gv = np.full(sum(counts) + size, -7, np.int64)
    for r in range(size):
        gv[displs[r]:displs[r] + counts[r]] = every[r, :counts[r]]
    return {"allreduce": every.sum(0), "allreduce_max": every.max(0).astype(float),
            "bcast": every[root], "allgather": every.reshape(-1),
            "allgatherv": gv, "reduce": every.sum(0),
            "reduce_min_in_place": every.min(0), "flat": every.sum(0)}


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.sampled_from([1, 7, 1000, 70_000, 300_001]),
       root=st.integers(0, 3), seed=st.integers(0, 2**16),
       cuts=st.lists(st.integers(0, 1000), min_size=4, max_size=4))
def test_every_two_level_collective_matches_numpy(hosts_world, n, root, seed,
                                                   cuts):
    layout, world = hosts_world
    size = world.size
    counts = [min(c, n) for c in cuts[:size]]
    got = world.run(r_collectives, n, root, seed, counts, timeout=120)
    want = oracle(size, n, root, seed, counts)
    for rank, (out, ran) in enumerate(got):
        for name, value in want.items():
            if out[name] is None:
                assert name.startswith("reduce") and rank != root
                continue
            assert np.array_equal(out[name], value), (layout, rank, name)
        assert ran["flat"] == "ring"
        for name in ("allreduce", "bcast", "allgather", "reduce"):
            assert ran[name] == TL, (layout, rank, name, ran[name])


def r_bcasts_back_to_back(comm, sizes, seed):
    """Two-level bcasts one after another, the root moving round the ranks
    and the size changing between a host's pairs (small: a leader may run
    ahead of its host's ranks) and its node segment (large)."""
    got = []
    for k, n in enumerate(sizes):
        root = k % comm.size
        x = data(root, n, seed + k) if comm.rank == root else np.empty(n, np.int64)
        comm.Bcast(x, root=root, algorithm=TL)
        got.append(x)
    return got


def r_pipelined_bcast(comm, n, root, seed, dtype):
    """One forced two-level bcast of n elements of dtype from root (data
    of the root's), and the name it ran."""
    x = (data(root, n, seed).astype(dtype) if comm.rank == root
         else np.full(n, 99, dtype))
    comm.Bcast(x, root=root, algorithm=TL)
    return x, comm._ctx.last_algorithm


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.sampled_from([0, 3, 8191, 8193, 70_001, 300_000, 1_000_003]),
       root=st.integers(0, 3), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([np.int64, np.int16, np.uint8]))
def test_pipelined_two_level_bcast_matches_numpy(hosts_world, n, root, seed,
                                                 dtype):
    """Sizes around the segment (one piece) and above it (up to 4 pieces,
    the last one short, odd byte counts), every root of every layout."""
    layout, world = hosts_world
    root %= world.size
    got = world.run(r_pipelined_bcast, n, root, seed, dtype, timeout=120)
    want = data(root, n, seed).astype(dtype)
    nbytes = n * np.dtype(dtype).itemsize
    for rank, (x, ran) in enumerate(got):
        assert np.array_equal(x, want), (layout, rank, n, root,
                                         pipeline_pieces(nbytes))
        assert ran == TL


def test_back_to_back_two_level_bcasts_match_numpy(hosts_world):
    layout, world = hosts_world
    sizes = [1, 5, 1, 1000, 40_000, 1, 3, 1, 7] * 4
    for rank, got in enumerate(world.run(r_bcasts_back_to_back, sizes, 11,
                                         timeout=120)):
        for k, n in enumerate(sizes):
            want = data(k % world.size, n, 11 + k)
            assert np.array_equal(got[k], want), (layout, rank, k, n)


def r_auto(comm, cases):
    """What "auto" ran for each (collective, bytes): the barrier, and the
    others with float64 buffers of that many bytes (allgather: gathered)."""
    ran = []
    for coll, nbytes in cases:
        x = np.ones(nbytes // 8)
        if coll == "allreduce":
            comm.Allreduce(MPI.IN_PLACE, x)
        elif coll == "reduce":
            comm.Reduce(MPI.IN_PLACE if comm.rank == 0 else x, x, root=0)
        elif coll == "bcast":
            comm.Bcast(x, root=1)
        elif coll == "allgather":
            comm.Allgather(np.ones(len(x) // comm.size), x)
        else:
            comm.Barrier()
        ran.append(comm._ctx.last_algorithm)
    return ran


def test_auto_runs_two_level_above_the_table_thresholds(hosts_world):
    layout, world = hosts_world
    from gloocy import _core
    t = _core.ALGORITHM_THRESHOLDS
    red, blocks = t["two_level_reduce_min"], t["two_level_blocks_min"]
    bc = t["two_level_bcast_min"]
    cases = [("allreduce", 8), ("allreduce", red - 8), ("allreduce", red),
             ("reduce", red - 8), ("reduce", red), ("bcast", bc - 8),
             ("bcast", bc), ("allgather", blocks - 32),
             ("allgather", blocks)]
    got = world.run(r_auto, cases)
    want = [_core.auto_algorithm(c, 4, b, itemsize=8, hosts=len(layout))
            for c, b in cases]
    for ran in got:
        assert ran == want, list(zip(cases, ran, want))
    assert [w == "two_level" for w in want] == [
        False, False, True, False, True, False, True, False, True]


def r_barriers(comm):
    """Barriers in which each rank arrives late in turn: nobody may leave
    one before the late rank has entered it."""
    left_early = 0
    for late in range(comm.size):
        if comm.rank == late:
            time.sleep(0.05)
        entered = time.monotonic()
        stamps = np.array([entered, 0.0])
        comm.Barrier()
        out = np.empty(2 * comm.size)
        comm.Allgather(stamps, out, algorithm="ring")   # after the barrier
        if comm.rank != late and time.monotonic() < out[2 * late]:
            left_early += 1
    return left_early, comm._ctx.last_algorithm


def test_the_barrier_runs_two_level_when_the_environment_says_so():
    with World(4, backend="processes", hosts=[3, 1],
               env={"GLOOCY_ALGORITHM_BARRIER": "two_level"}) as world:
        for early, ran in world.run(r_barriers):
            assert early == 0
            assert ran == "ring"          # the allgather's: the barrier's below
        world.run(lambda_free_barrier)


def lambda_free_barrier(comm):
    comm.Barrier()
    assert comm._ctx.last_algorithm == "two_level"


def r_layout(comm):
    from gloocy import _core
    comm.Barrier()
    return _core.host_layout(comm._ctx)


def test_the_layout_is_the_namespaces(hosts_world):
    layout, world = hosts_world
    expected, start = [], 0
    for k in layout:
        expected.append(list(range(start, start + k)))
        start += k
    assert world.run(r_layout) == [expected] * world.size


def r_bcast_choices(comm, cases):
    """(algorithm "auto" ran, the result) of a float64 Bcast per (elements,
    root)."""
    out = []
    for n, root in cases:
        x = (np.arange(n, dtype=np.float64) * (root + 1) if comm.rank == root
             else np.zeros(n))
        comm.Bcast(x, root=root)
        out.append((comm._ctx.last_algorithm, x))
    return out


def test_auto_bcast_runs_the_chain_between_hosts_of_one_rank_each():
    # No host has two ranks (no two-level): from a pipeline of enough
    # segments (1 MiB each) the chain, whose root's link carries the buffer
    # once; below a segment the binomial tree.
    cases = [(1 << 19, 0), (1 << 19, 2), (1000, 1)]      # 4 MiB, 4 MiB, 8 KB
    world = World(3, backend="processes", hosts=[1, 1, 1])
    try:
        got = world.run(r_bcast_choices, cases, timeout=120)
    finally:
        world.close()
    for rank, results in enumerate(got):
        for (n, root), (ran, x), want in zip(cases, results,
                                              ["chain", "chain", "binomial"]):
            assert ran == want, (rank, n, root, ran)
            assert np.array_equal(x, np.arange(n, dtype=np.float64) * (root + 1))


def r_die_or_allreduce(comm, victim):
    x = np.ones(1 << 16, np.float64)
    if comm.rank == victim:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        comm.Allreduce(MPI.IN_PLACE, x, timeout=30, algorithm="two_level")
    except Exception as e:        # every survivor names the lost rank
        return type(e).__name__, getattr(e, "rank", None), str(e)
    return "no error", None, ""


@pytest.mark.parametrize("victim", [1, 3], ids=["leader-host-member",
                                                "other-host-member"])
def test_a_peer_killed_in_a_two_level_call_is_named(victim):
    before = shm_names()
    with World(4, backend="processes", hosts=[2, 2]) as world:
        got = world.run(r_die_or_allreduce, victim, check=False, timeout=60)
        assert_every_survivor_names(victim, got)
    assert shm_names() - before == set()


def assert_every_survivor_names(victim, got):
    """Each rank's (error type, rank named, message) from a call in which
    rank `victim` died: the others raised PeerLostError naming it."""
    for rank, r in enumerate(got):
        if rank == victim:
            assert getattr(r, "type_name", None) == "ProcessDied"
            continue
        kind, lost, msg = r
        assert kind == "PeerLostError", (rank, r)
        assert lost == victim and f"rank {victim}" in msg, (rank, r)


def r_die_in_a_pipelined_call(comm, victim, n, call):
    """A forced two-level bcast (from rank 0) or allreduce of n float64 over
    a slow link; the victim kills itself 0.5 s into it (pieces are
    crossing the link). (error type, lost rank, message, seconds the call
    took)."""
    import threading
    x = np.ones(n) if comm.rank == 0 or call == "allreduce" else np.empty(n)
    comm.Barrier()
    if comm.rank == victim:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
    t = time.monotonic()
    try:
        if call == "bcast":
            comm.Bcast(x, root=0, timeout=DEATH_DEADLINE, algorithm=TL)
        else:
            comm.Allreduce(MPI.IN_PLACE, x, timeout=DEATH_DEADLINE,
                           algorithm=TL)
    except Exception as e:        # every survivor names the lost rank
        return (type(e).__name__, getattr(e, "rank", None), str(e),
                time.monotonic() - t)
    return "no error", None, "", time.monotonic() - t


DEATH_DEADLINE = 30


# By default each call loses one role (a bcast a member, an allreduce a
# leader); --long runs each call with both.
@pytest.mark.parametrize("call,victim", [
    pytest.param("bcast", 2, marks=pytest.mark.long), ("bcast", 3),
    pytest.param("allreduce", 1, marks=pytest.mark.long), ("allreduce", 2)])
def test_a_peer_killed_in_a_pipelined_call_is_named(call, victim):
    """8 MiB over 20 Mbit/s links (about 3.4 s each way; a bcast in 4
    pieces of 2 MiB, an allreduce in 8 of 1 MiB): the victim, a leader (2) or a member (1, 3), dies while pieces
    cross. The survivors still waiting name it within the call's deadline;
    in a bcast the root's host may finish its part first (its sends sit
    in the kernel's buffers), then it reports no error."""
    before = shm_names()
    with World(4, backend="processes", hosts=[2, 2], timeout=120) as world:
        world.netns.limit("20mbit")
        got = world.run(r_die_in_a_pipelined_call, victim, 1 << 20, call,
                        check=False, timeout=90)
    for rank, r in enumerate(got):
        if rank != victim:
            assert r[3] < DEATH_DEADLINE, (rank, r)
    finished = (0, 1) if call == "bcast" else ()
    assert_survivors_name(got, victim, may_finish=finished)
    assert shm_names() - before == set()


def assert_survivors_name(got, victim, may_finish):
    """The victim's slot says its process died; every other rank raised
    PeerLostError naming it, except ranks in `may_finish` that report no
    error (they finished their part first); at least one named it."""
    named = 0
    for rank, r in enumerate(got):
        if rank == victim:
            assert getattr(r, "type_name", None) == "ProcessDied"
            continue
        kind, lost, msg = r[:3]
        if kind == "no error" and rank in may_finish:
            continue
        assert kind == "PeerLostError", (rank, r)
        assert lost == victim and f"rank {victim}" in msg, (rank, r)
        named += 1
    assert named >= 1


def r_mismatch(comm):
    x = np.ones(1000, np.float64)
    try:
        if comm.rank == 3:
            comm.Bcast(x, root=0, timeout=20, algorithm="two_level")
        else:
            comm.Allreduce(MPI.IN_PLACE, x, timeout=20, algorithm="two_level")
    except Exception as e:
        return type(e).__name__, str(e)
    return "no error", ""


def test_ranks_calling_different_two_level_collectives_are_told():
    """Rank 3 bcasts while the others allreduce: the phase inside its host
    sees the fingerprints differ, and every rank hears of the mismatch."""
    with World(4, backend="processes", hosts=[2, 2]) as world:
        got = world.run(r_mismatch, check=False, timeout=60)
    for rank, (kind, msg) in enumerate(got):
        assert kind == "MismatchError", (rank, kind, msg)
        assert "bcast" in msg and ("allreduce" in msg or "reduce" in msg), msg


# -- gather(v), scatter(v), alltoall(v), reduce_scatter(_block) ---------------

def pair_count(seed, s, d, most):
    """How many int64 rank s sends rank d in the alltoallv (0 included)."""
    return int(np.random.default_rng([seed, s, d, 7]).integers(0, most + 1))


def pair_data(seed, s, d, most):
    return np.arange(pair_count(seed, s, d, most)) + 1000 * s + 100_000 * d


def r_blocks(comm, n, root, seed, counts, algorithm=TL):
    """Every block-moving two-level collective once (forced), with NumPy
    arrays the test checks against oracle_blocks; gaps in the v forms'
    buffers hold -7 and must stay so. Returns (results, algorithms ran)."""
    rank, size = comm.rank, comm.size
    ctx = comm._ctx
    mine = data(rank, n, seed)
    out, ran = {}, {}
    at_root = rank == root
    gaps = [sum(counts[:i]) + i for i in range(size)]     # displs with gaps

    g = np.empty(size * n, np.int64) if at_root else None
    comm.Gather(mine, g, root=root, algorithm=algorithm)
    out["gather"], ran["gather"] = g, ctx.last_algorithm

    gv = np.full(sum(counts) + size, -7, np.int64) if at_root else None
    comm.Gatherv(mine[:counts[rank]], [gv, (counts, gaps)] if at_root else None,
                 root=root, algorithm=algorithm)
    out["gatherv"] = gv

    gi = None
    if at_root:                       # in place: the root's block is there
        gi = np.zeros(size * n, np.int64)
        gi[root * n:(root + 1) * n] = mine
    comm.Gather(MPI.IN_PLACE if at_root else mine, gi, root=root,
                algorithm=algorithm)
    out["gather_in_place"] = gi

    s = np.empty(n, np.int64)
    comm.Scatter(np.concatenate([data(r, n, seed + 1) for r in range(size)])
                 if at_root else None, s, root=root, algorithm=algorithm)
    out["scatter"], ran["scatter"] = s, ctx.last_algorithm

    sv = np.full(counts[rank], -7, np.int64)
    src = None
    if at_root:
        src = np.full(sum(counts) + size, -9, np.int64)
        for r in range(size):
            src[gaps[r]:gaps[r] + counts[r]] = data(r, n, seed + 2)[:counts[r]]
    comm.Scatterv([src, (counts, gaps)] if at_root else None, sv, root=root,
                  algorithm=algorithm)
    out["scatterv"] = sv

    a = np.empty(size * n, np.int64)
    comm.Alltoall(data(rank, size * n, seed + 3), a, algorithm=algorithm)
    out["alltoall"], ran["alltoall"] = a, ctx.last_algorithm

    most = max(counts)
    sc = [pair_count(seed, rank, d, most) for d in range(size)]
    rc = [pair_count(seed, s_, rank, most) for s_ in range(size)]
    sd = [sum(sc[:i]) + 2 * i for i in range(size)]      # gaps both sides
    rd = [sum(rc[:i]) + 3 * i for i in range(size)]
    sbuf = np.full(sum(sc) + 2 * size, -5, np.int64)
    for d in range(size):
        sbuf[sd[d]:sd[d] + sc[d]] = pair_data(seed, rank, d, most)
    rbuf = np.full(sum(rc) + 3 * size, -7, np.int64)
    comm.Alltoallv([sbuf, (sc, sd)], [rbuf, (rc, rd)], algorithm=algorithm)
    out["alltoallv"] = rbuf

    rs = np.full(counts[rank] + 2, -7, np.int64)
    comm.Reduce_scatter(data(rank, sum(counts), seed + 4), rs, counts,
                        algorithm=algorithm)
    out["reduce_scatter"], ran["reduce_scatter"] = rs, ctx.last_algorithm

    rb = np.empty(n, np.int64)
    comm.Reduce_scatter_block(data(rank, size * n, seed + 5), rb,
                              op=MPI.MAX, algorithm=algorithm)
    out["reduce_scatter_block_max"] = rb
    return out, ran


def oracle_blocks(rank, size, n, root, seed, counts):
    """What r_blocks must give `rank`, from NumPy alone (None: no result)."""
    gaps = [sum(counts[:i]) + i for i in range(size)]
    every = np.stack([data(r, n, seed) for r in range(size)])
    want = {}
    want["gather"] = every.reshape(-1) if rank == root else None
    want["gather_in_place"] = want["gather"]
    gv = np.full(sum(counts) + size, -7, np.int64)
    for r in range(size):
        gv[gaps[r]:gaps[r] + counts[r]] = every[r, :counts[r]]
    want["gatherv"] = gv if rank == root else None
    want["scatter"] = data(rank, n, seed + 1)
    want["scatterv"] = data(rank, n, seed + 2)[:counts[rank]]
    want["alltoall"] = np.concatenate(
        [data(s, size * n, seed + 3)[rank * n:(rank + 1) * n]
         for s in range(size)])
    most = max(counts)
    rc = [pair_count(seed, s, rank, most) for s in range(size)]
    rd = [sum(rc[:i]) + 3 * i for i in range(size)]
    av = np.full(sum(rc) + 3 * size, -7, np.int64)
    for s in range(size):
        av[rd[s]:rd[s] + rc[s]] = pair_data(seed, s, rank, most)
    want["alltoallv"] = av
    total = np.sum([data(r, sum(counts), seed + 4) for r in range(size)], 0)
    off = sum(counts[:rank])
    rs = np.full(counts[rank] + 2, -7, np.int64)
    rs[:counts[rank]] = total[off:off + counts[rank]]
    want["reduce_scatter"] = rs
    mx = np.max([data(r, size * n, seed + 5) for r in range(size)], 0)
    want["reduce_scatter_block_max"] = mx[rank * n:(rank + 1) * n]
    return want


def check_blocks(got, layout, size, n, root, seed, counts, algorithm=TL):
    for rank, (out, ran) in enumerate(got):
        want = oracle_blocks(rank, size, n, root, seed, counts)
        for name, value in want.items():
            if value is None:
                assert out[name] is None, (layout, rank, name)
                continue
            assert np.array_equal(out[name], value), (layout, rank, name,
                                                      out[name], value)
        for name, algo in ran.items():
            assert algo == algorithm, (layout, rank, name, algo)


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.sampled_from([0, 1, 5, 1000, 70_000]),
       root=st.integers(0, 3), seed=st.integers(0, 2**16),
       cuts=st.lists(st.integers(0, 300), min_size=4, max_size=4))
def test_every_two_level_block_collective_matches_numpy(hosts_world, n, root,
                                                         seed, cuts):
    layout, world = hosts_world
    size = world.size
    counts = [min(c, n) for c in cuts[:size]]
    got = world.run(r_blocks, n, root, seed, counts, timeout=120)
    check_blocks(got, layout, size, n, root, seed, counts)


def r_blocks_reordered(comm, n, root, seed, counts, keys):
    """r_blocks on a Split of the world ordered by `keys` (world rank r is
    the split's rank keys[r]), whose rank order interleaves the hosts (a
    host's ranks not consecutive: the blocks are reordered)."""
    sub = comm.Split(0, keys[comm.rank])
    try:
        return r_blocks(sub, n, root, seed, counts)
    finally:
        sub.Free()


# World ranks 0..3 as the split's ranks keys[r]: in 1 + 1 + 2 (hosts A B C
# C) the first puts hosts A C C B in rank order, the second C A C B (three
# hosts, one of them split by another's rank, the root's host last).
ORDERS = {"0321": ([0, 3, 2, 1], 1), "1302": ([1, 3, 0, 2], 3)}


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("n", [3, 4000])
def test_two_level_block_collectives_on_interleaved_hosts(hosts_world, n,
                                                          order):
    layout, world = hosts_world
    size = world.size
    keys, root = ORDERS[order]
    counts = [min(c, n) for c in [5, 0, 3, 7][:size]]
    got = world.run(r_blocks_reordered, n, root, 11, counts, keys,
                    timeout=120)
    # the split's rank k is the world rank whose key is k
    by_split_rank = sorted(range(size), key=lambda r: keys[r])
    check_blocks([got[w] for w in by_split_rank], layout, size, n, root, 11,
                 counts)


def r_auto_blocks(comm, cases):
    """What "auto" (or a forced name) ran for each (call, bytes per block
    or per input, algorithm), with float64 buffers."""
    ran = []
    size = comm.size
    for call, nbytes, algorithm in cases:
        k = nbytes // 8
        x = np.ones(k * size)
        y = np.empty(k * size)
        if call == "Alltoall":
            comm.Alltoall(x, y, algorithm=algorithm)
        elif call == "Alltoallv":
            comm.Alltoallv([x, [k] * size], [y, [k] * size],
                           algorithm=algorithm)
        elif call == "Gather":
            comm.Gather(x[:k], y, root=0, algorithm=algorithm)
        elif call == "Gatherv":
            comm.Gatherv(x[:k], [y, [k] * size] if comm.rank == 0 else None,
                         root=0, algorithm=algorithm)
        elif call == "Scatter":
            comm.Scatter(x, y[:k], root=1, algorithm=algorithm)
        else:
            comm.Reduce_scatter_block(np.ones(k), np.empty(k // size),
                                      algorithm=algorithm)
        ran.append(comm._ctx.last_algorithm)
    return ran


def test_auto_runs_the_block_collectives_two_level_where_the_table_says(
        hosts_world):
    layout, world = hosts_world
    from gloocy import _core
    t = _core.ALGORITHM_THRESHOLDS
    red = t["two_level_blocks_min"]
    cases = [("Alltoall", 8, None), ("Alltoall", 4096, None),
             ("Alltoallv", 8, None), ("Gather", 8, None),
             ("Gather", 4096, None), ("Gatherv", 8, None),
             ("Scatter", 8, None), ("Scatter", 4096, None),
             ("Alltoall", 8, "direct"), ("Gather", 8, "direct"),
             ("Reduce_scatter", red - 32 * 8, None),
             ("Reduce_scatter", red, None), ("Reduce_scatter", red, "ring")]
    got = world.run(r_auto_blocks, cases, timeout=120)
    coll = {"Alltoall": "alltoall", "Gather": "gather", "Scatter": "scatter",
            "Reduce_scatter": "reduce_scatter"}
    for ran in got:
        for (call, nbytes, algorithm), name in zip(cases, ran):
            if algorithm is not None:
                assert name == algorithm, (call, nbytes, name)
            elif call.endswith("v"):           # a v form: never by itself
                assert name != TL, (call, name)
            else:
                want = _core.auto_algorithm(coll[call], 4, nbytes,
                                            itemsize=8, hosts=len(layout))
                assert (name == TL) == (want == TL), (call, nbytes, name, want)
    # the table itself: large reductions two-level, small ones not
    assert _core.auto_algorithm("reduce_scatter", 4, red, hosts=2) == TL
    assert _core.auto_algorithm("reduce_scatter", 4, red - 8, hosts=2) != TL
    for coll in ("alltoall", "gather", "scatter"):    # where the table says
        most = t[f"two_level_{coll}_max"]
        assert (_core.auto_algorithm(coll, 4, 8, hosts=2) == TL) == (most >= 8)


def r_die_or_call(comm, victim, call):
    """r_die_or_allreduce for the block collectives' two-level forms."""
    x = np.ones(1 << 12, np.float64)
    y = np.empty(1 << 12, np.float64)
    k = len(x) // comm.size
    calls = {"alltoall": lambda: comm.Alltoall(x, y, timeout=30,
                                               algorithm=TL),
             "gather": lambda: comm.Gather(x[:k], y, root=2, timeout=30,
                                           algorithm=TL),
             "scatter": lambda: comm.Scatter(x, y[:k], root=0, timeout=30,
                                             algorithm=TL),
             "reduce_scatter": lambda: comm.Reduce_scatter_block(
                 x, y[:k], timeout=30, algorithm=TL)}
    if comm.rank == victim:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        calls[call]()
    except Exception as e:
        return type(e).__name__, getattr(e, "rank", None), str(e)
    return "no error", None, ""


@pytest.mark.parametrize("call,victim", [("alltoall", 1), ("gather", 0),
                                         ("scatter", 3),
                                         ("reduce_scatter", 2)])
def test_a_peer_killed_in_a_two_level_block_call_is_named(call, victim):
    """The victim is a leader (0, 2) or a member (1, 3) of a 2 + 2 layout;
    the survivors wait for it in a phase inside their host or between the
    leaders, and each names it (a survivor that finished its part before
    the death may report no error)."""
    before = shm_names()
    with World(4, backend="processes", hosts=[2, 2]) as world:
        got = world.run(r_die_or_call, victim, call, check=False, timeout=90)
    assert_survivors_name(got, victim, may_finish=range(4))
    assert shm_names() - before == set()


def test_the_link_carries_no_more_than_mpich(tmp_path):
    """Bytes through host 0's link (both ways) per call of each new
    two-level collective ("auto" at a size where it runs two-level, or
    forced), against MPICH's for the same calls under mpiexec into the
    same namespaces (bench/hosts.py's harness)."""
    from peers import installed, mpiexec, MPI as NEEDS
    if not installed("mpi4py") or mpiexec() is None:
        pytest.skip(f"needs {NEEDS}")
    import sys
    bench = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
    sys.path.insert(0, os.path.abspath(bench))
    import hosts as harness
    prog = tmp_path / "prog.py"
    prog.write_text(harness.MPI_PROGRAM)
    nbytes, calls = 256 << 10, 8
    with World(4, backend="processes", hosts=[2, 2], timeout=300) as world:
        for coll in ("alltoall", "gather", "scatter", "reduce_scatter"):
            _, ours = harness.gloocy_time(world, coll, nbytes, TL, calls)
            _, theirs = harness.mpich_time(world.netns, prog, coll, nbytes,
                                           calls)
            assert ours <= theirs * 1.01 + 4096, (coll, ours, theirs)
