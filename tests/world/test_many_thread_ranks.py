"""Hundreds of thread ranks of one process through the node segment (the
default transport): rendezvous through the in-process store, a barrier,
small allreduces (at this many ranks each rank reduces a block, not every
slot), a bcast and a Split, each against a closed form. 512 ranks, 4,096
under --long (bench/scale.py's worlds are TCP, over several processes)."""

import numpy as np
import pytest

import gloocy
from gloocy import _core
from conftest import long_runs
from gloocy.errors import PeerLostError
from gloocy.testing import World

SIZE = 4096 if long_runs() else 512


@pytest.fixture(scope="module")
def world():
    with World(SIZE, timeout=900.0 if long_runs() else 300.0) as w:
        yield w


def test_collectives_of_many_thread_ranks(world):
    n = SIZE

    def run(comm):
        r = comm.Get_rank()
        comm.Barrier()
        got = []
        for count in (1, 16, 300):        # 300 int64s x 512 ranks: block path
            x = np.arange(count, dtype=np.int64) + r
            comm.Allreduce(gloocy.IN_PLACE, x)
            got.append(x)
        top = np.array([float(r)])
        comm.Allreduce(gloocy.IN_PLACE, top, op=gloocy.MAX)
        y = np.arange(64, dtype=np.float64) if r == n - 1 else np.zeros(64)
        comm.Bcast(y, root=n - 1)
        sub = comm.Split(r % 8, -r)       # keys reversed: ranks reordered
        z = np.array([r], dtype=np.int64)
        sub.Allreduce(gloocy.IN_PLACE, z)
        where = sub.Get_rank()
        sub.Free()
        comm.Barrier()
        return got, top[0], y, z[0], where

    results = world.run(run)
    for r, (got, top, y, z, where) in enumerate(results):
        for x, count in zip(got, (1, 16, 300)):
            assert (x == n * np.arange(count) + n * (n - 1) // 2).all(), (r, count)
        assert top == n - 1
        assert (y == np.arange(64)).all()
        members = list(range(r % 8, n, 8))
        assert z == sum(members)
        assert where == len(members) - 1 - members.index(r)


def test_small_bcasts_go_through_the_segment(world):
    """Past NODE_BCAST_TREE_MAX_RANKS a bcast of a few bytes goes through
    the node segment: no pair is connected for it (a binomial tree would
    connect N - 1 pairs in this process), as auto_algorithm says."""
    n = SIZE
    roots = (0, n // 2 + 1, n - 1)
    sizes = (1, 64, 4096)                 # bytes

    def run(comm):
        r = comm.Get_rank()
        before = len(comm._ctx.links.connected)
        got, algos = [], set()
        for root in roots:
            for nbytes in sizes:
                y = (np.arange(nbytes, dtype=np.uint8) ^ (root & 0xFF)
                     if r == root else np.zeros(nbytes, np.uint8))
                comm.Bcast(y, root=root)
                algos.add(comm._ctx.last_algorithm)
                got.append(y)
        return got, algos, len(comm._ctx.links.connected) - before

    assert _core.auto_algorithm("bcast", n, 1, node=True) == "shm"
    for got, algos, made in world.run(run):
        assert algos == {"shm"}
        assert made == 0
        want = [np.arange(nbytes, dtype=np.uint8) ^ (root & 0xFF)
                for root in roots for nbytes in sizes]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_split_into_64_groups(world):
    """A Split into 64 groups, each of which runs an allreduce and a bcast.
    Groups of more than 32 (4,096 ranks under --long: 64 each) share a node
    segment of their own, offered through the store: no pair connected."""
    n = SIZE
    groups = 64

    def run(comm):
        r = comm.Get_rank()
        before = len(comm._ctx.links.connected)
        sub = comm.Split(r % groups, r)
        x = np.array([r, 1], dtype=np.int64)
        sub.Allreduce(gloocy.IN_PLACE, x)
        last = sub.Get_size() - 1
        y = (np.arange(32, dtype=np.float64) * (r % groups) if sub.Get_rank() == last
             else np.zeros(32))
        sub.Bcast(y, root=last)
        segment = sub._ctx.node is not None
        made = len(comm._ctx.links.connected) - before
        where = sub.Get_size(), sub.Get_rank()
        sub.Free()
        comm.Barrier()
        return x, y, where, segment, made

    members = {g: np.arange(g, n, groups) for g in range(groups)}
    for r, (x, y, (size, rank), segment, made) in enumerate(world.run(run)):
        mine = members[r % groups]
        assert x.tolist() == [int(mine.sum()), len(mine)]
        np.testing.assert_array_equal(y, np.arange(32) * (r % groups))
        assert (size, rank) == (len(mine), int(np.flatnonzero(mine == r)[0]))
        assert segment                     # every rank of the job on this host
        if len(mine) > 32:
            assert made == 0


def test_a_rank_lost_among_many_is_named(world):
    """A rank that dies before the barrier is named by the others, though
    each sleeps for the last rank not there alone."""
    victim = SIZE // 3

    def run(comm):
        if comm.Get_rank() == victim:
            raise RuntimeError("this rank dies here")
        comm.Barrier()

    out = world.run(run, check=False, grace=120.0)
    assert out[victim].type_name == "RuntimeError"
    others = [e for r, e in enumerate(out) if r != victim]
    assert all(e is not None and e.is_a(PeerLostError) for e in others)
    assert all(f"rank {victim}" in e.message for e in others)


def _node_mappings():
    """This process's mappings of node segments (memfds named gloocy-node),
    as the kernel lists them."""
    with open("/proc/self/maps") as f:
        return sum("gloocy-node" in line for line in f)


def test_one_mapping_of_a_segment_per_process():
    """The ranks of a thread world share one mapping of each node segment
    (the world's, and each group's of a Split), let go with the last of
    them: a mapping per rank would fault every page it reads in again."""
    before = _node_mappings()
    with World(8) as w:
        w.run(lambda comm: comm.Barrier())
        assert _node_mappings() == before + 1

        def split(comm):
            sub = comm.Split(comm.Get_rank() % 2)
            sub.Barrier()                 # its node segment: at its first call
            comm.Barrier()
            if comm.Get_rank() == 0:
                held = _node_mappings()
            comm.Barrier()
            shared = sub._ctx.node is not None
            sub.Free()
            return (held if comm.Get_rank() == 0 else None), shared

        got = w.run(split)
        assert all(shared for _, shared in got)
        assert got[0][0] == before + 3    # the world's and the two groups'
        assert _node_mappings() == before + 1
    assert _node_mappings() == before


def test_switch_interval_grows_while_many_ranks_run():
    """A world of more than RANKS_PER_SLICE rank threads runs with the GIL's
    switch interval scaled by its size, and puts the usual one back."""
    import sys
    from gloocy.testing.threads import RANKS_PER_SLICE
    usual = sys.getswitchinterval()
    size = 2 * RANKS_PER_SLICE
    with World(size) as w:
        got = w.run(lambda comm: sys.getswitchinterval())
        assert sys.getswitchinterval() == usual
    assert got == [pytest.approx(usual * size / RANKS_PER_SLICE)] * size
