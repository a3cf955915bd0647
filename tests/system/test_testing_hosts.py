"""gloocy.testing's link faults between hosts: a process world whose ranks
live in network namespaces (World(..., hosts=[...])). A faulty link between
ranks of two hosts goes through a proxy in the bridge's namespace, and only
that link: the others stay direct (TCP between hosts, shared memory within
one). ``world.netns.cut(i, j)`` drops every packet between two hosts,
telling nobody. Oracles: closed forms, the pairs' transport classes, the
delay's lower bound, and gloocy's own exception classes."""

import time

import numpy as np
import pytest

import gloocy
from gloocy.errors import CollectiveTimeout, PeerLostError
from gloocy.testing import World, netns

pytestmark = pytest.mark.skipif(netns.missing() is not None,
                                reason=str(netns.missing()))


def total(comm):
    x = np.full(3, comm.rank + 1.0)
    comm.Allreduce(gloocy.IN_PLACE, x)
    return float(x[0])


def pair_kinds(comm):
    """{peer: its pair's class} once a message went each way between every
    two ranks (point to point: node collectives use no pair)."""
    r, n = comm.rank, comm.size
    for k in range(1, n):
        assert comm.sendrecv(r, dest=(r + k) % n, source=(r - k) % n) == (r - k) % n
    return {p: type(pair).__name__ for p, pair in enumerate(comm._ctx.links.pairs)
            if pair is not None}


def round_trips(comm, peer, n):
    """n exchanges with `peer` (a message each way at once); seconds."""
    t0 = time.monotonic()
    for _ in range(n):
        assert comm.sendrecv(comm.rank, dest=peer, source=peer) == peer
    return time.monotonic() - t0


def test_only_the_faulty_link_goes_through_the_proxy():
    # hosts: {0, 1} and {2, 3}; the faulty link is 0-2
    with World(4, backend="processes", hosts=[2, 2], link_faults=[(0, 2)],
               timeout=30, comm_timeout=20) as w:
        assert w.run(total) == [10.0] * 4
        kinds = w.run(pair_kinds)
        for r in range(4):
            for p, kind in kinds[r].items():
                same_host = r // 2 == p // 2
                assert kind == ("ShmPair" if same_host else "TcpPair"), (r, kinds)
        # Half a second each way on 0-2: two exchanges there take at least
        # 1 s; at the same time 1-3 (direct) gets no delay at all.
        w.link(0, 2).delay = 0.5
        slow = w.run_each(round_trips, [(2, 2), (3, 2), (0, 2), (1, 2)])
        assert min(slow[0], slow[2]) >= 2 * 0.5, slow
        assert max(slow[1], slow[3]) < slow[0], slow
        w.link(0, 2).delay = 0.0
        w.link(2, 0).cut()
        res = w.run_each(round_trips, {0: (2, 1), 2: (0, 1)}, ranks=[0, 2],
                         check=False)
        assert res[0].is_a(PeerLostError) and "rank 2" in res[0].message, res
        assert res[1].is_a(PeerLostError) and "rank 0" in res[1].message, res


def test_link_faults_within_a_host_are_refused():
    with pytest.raises(ValueError, match="ranks 0 and 1 are on one host"):
        World(3, backend="processes", hosts=[2, 1], link_faults=[(0, 1)])
    with pytest.raises(ValueError, match="not a pair of distinct ranks"):
        World(3, backend="processes", hosts=[2, 1], link_faults=[(0, 3)])


def test_a_silent_cut_between_two_hosts_leaves_the_others_up():
    # three hosts of one rank each; hosts 0 and 1 lose each other
    with World(3, backend="processes", hosts=[1, 1, 1], timeout=30,
               comm_timeout=3) as w:
        assert w.run(total) == [6.0] * 3
        w.run(pair_kinds)                      # every pair connected, then
        w.netns.cut(0, 1)
        # 0-2 and 1-2 still carry messages
        assert w.run_each(round_trips, [(2, 1), (2, 1), (0, 1)], ranks=[0, 2])
        assert w.run_each(round_trips, [(2, 1), (2, 1), (1, 1)], ranks=[1, 2])
        # 0-1 is gone, and nobody was told: nothing comes back, and each
        # rank's deadline (3 s) ends its call. (The message of a timed-out
        # point-to-point call names what was called and the peer.)
        t0 = time.monotonic()
        res = w.run_each(round_trips, [(1, 1), (0, 1), (0, 1)], ranks=[0, 1],
                         check=False, timeout=25)
        assert time.monotonic() - t0 >= 3 * 0.9
        assert all(e.is_a(CollectiveTimeout) for e in res), res


def test_cut_arguments_are_checked():
    with netns.Hosts(2) as hosts:
        with pytest.raises(ValueError, match="two distinct hosts"):
            hosts.cut(0, 0)
        with pytest.raises(ValueError, match="two distinct hosts"):
            hosts.cut(0, 2)
