"""Nonblocking collectives of intercommunicators and of process topologies,
and user ops, as schedules in the core (no thread), on real processes:
many outstanding at once, completed in a different order on each rank,
interleaved with blocking calls, every result against NumPy; a peer
killed during an intercommunicator's Iallreduce is named by the
survivors; a commutative user op over many ranks; a non-commutative one
(2x2 matrix products) combined in rank order.
"""

import threading

import numpy as np
import pytest

import gloocy
from gloocy.constants import PROC_NULL, ROOT
from gloocy.errors import GloocyError

from conftest import TRANSPORT_ENV

from gloocy.testing.processes import ProcessWorld

TOTAL = 12          # elements the reduce_scatter splits over a group


def data(p, k, salt=0):
    """What world rank p sends: k int64 values."""
    return np.arange(k, dtype=np.int64) * (p + 2) + 100 * p + salt


def groups(size, a, p):
    """(our group, the other group) of world rank p, as world ranks."""
    b = [r for r in range(size) if r not in a]
    return (a, b) if p in a else (b, a)


def counts(n):
    """TOTAL elements over a group of n, unevenly."""
    return [TOTAL // n + (1 if i < TOTAL % n else 0) for i in range(n)]


def r_inter_scrambled(comm, a, k):
    """Every nonblocking intercommunicator collective, all outstanding at
    once (a blocking one in between), waited for in a shuffled order (half
    by Waitall, half by a Testsome loop)."""
    p = comm.rank
    mine, theirs = groups(comm.size, a, p)
    local = comm.Split(0 if p in a else 1, mine.index(p))
    ic = local.Create_intercomm(0, comm, theirs[0])
    me, rs, in_a = mine.index(p), len(theirs), p in a
    x = data(p, k)
    out, reqs = {}, []

    def keep(name, req, buf):
        out[name] = buf
        reqs.append(req)
    keep("barrier", ic.Ibarrier(), None)
    b = x.copy() if not in_a else np.zeros(k, np.int64)     # B's last roots
    if in_a:
        keep("bcast", ic.Ibcast(b, rs - 1), b)
    else:
        keep("bcast", ic.Ibcast(b, ROOT if me == len(mine) - 1
                                else PROC_NULL), None)
    y = np.empty(k, np.int64)
    keep("allreduce", ic.Iallreduce(x, y, gloocy.SUM), y)
    y = np.zeros(k, np.int64)                               # A's first gets
    if in_a:
        keep("reduce", ic.Ireduce(None, y, gloocy.MAX,
                                  ROOT if me == 0 else PROC_NULL),
             y if me == 0 else None)
    else:
        keep("reduce", ic.Ireduce(x, None, gloocy.MAX, 0), None)
    blocking = np.empty(k, np.int64)
    ic.Allreduce(x + 1, blocking, gloocy.MIN)               # meanwhile
    out["blocking min"] = blocking
    y = np.empty(rs * k, np.int64)
    keep("allgather", ic.Iallgather(x, y), y)
    y = np.zeros(rs * k, np.int64)                          # A's first gets
    if in_a:
        keep("gather", ic.Igather(None, y, ROOT if me == 0 else PROC_NULL),
             y if me == 0 else None)
    else:
        keep("gather", ic.Igather(x, None, 0), None)
    y = np.zeros(k, np.int64)                               # A's first sends
    if in_a:
        src = np.concatenate([data(q, k) + 7 for q in theirs])
        keep("scatter", ic.Iscatter(src, None, ROOT if me == 0 else PROC_NULL),
             None)
    else:
        keep("scatter", ic.Iscatter(None, y, 0), y)
    src = np.concatenate([x + 1000 * j for j in range(rs)])
    y = np.empty(rs * k, np.int64)
    keep("alltoall", ic.Ialltoall(src, y), y)
    mycounts = counts(len(mine))
    y = np.zeros(mycounts[me], np.int64)
    keep("reduce_scatter", ic.Ireduce_scatter(data(p, TOTAL), y, mycounts,
                                              gloocy.SUM), y)
    sizes = [(j % 3) + 1 for j in range(rs)]
    y = np.zeros(sum(sizes), np.int64)
    keep("allgatherv", ic.Iallgatherv(x[:(me % 3) + 1], [y, sizes]), y)
    order = np.random.default_rng(p).permutation(len(reqs))
    shuffled = [reqs[i] for i in order]
    half = len(shuffled) // 2
    pending = shuffled[:half]
    while pending:
        done = gloocy.Request.Testsome(pending) or []
        pending = [q for i, q in enumerate(pending) if i not in done]
    gloocy.Request.Waitall(shuffled[half:])
    ic.Free()
    local.Free()
    return {name: None if v is None else v.tolist() for name, v in out.items()}


def inter_expected(size, a, p, k):
    mine, theirs = groups(size, a, p)
    me, in_a = mine.index(p), p in a
    ins = [data(q, k) for q in theirs]
    want = {"barrier": None}
    want["bcast"] = data(theirs[-1], k) if in_a else None
    want["allreduce"] = np.sum(ins, axis=0)
    want["reduce"] = np.max(ins, axis=0) if in_a and me == 0 else None
    want["blocking min"] = np.min(ins, axis=0) + 1
    want["allgather"] = np.concatenate(ins)
    want["gather"] = np.concatenate(ins) if in_a and me == 0 else None
    want["scatter"] = None if in_a else data(p, k) + 7
    want["alltoall"] = np.concatenate([data(q, k) + 1000 * me
                                       for q in theirs])
    mycounts = counts(len(mine))
    start = sum(mycounts[:me])
    want["reduce_scatter"] = np.sum([data(q, TOTAL) for q in theirs],
                                    axis=0)[start:start + mycounts[me]]
    want["allgatherv"] = np.concatenate([data(q, k)[:(j % 3) + 1]
                                         for j, q in enumerate(theirs)])
    return {name: None if v is None else np.asarray(v).tolist()
            for name, v in want.items()}


@pytest.mark.parametrize("size,a", [(2, [0]), (3, [1]), (5, [0, 2, 4])])
def test_outstanding_intercomm_collectives_finish_in_any_order(world, size,
                                                               a):
    k = 4
    for p, got in enumerate(world(size).run(r_inter_scrambled, a, k)):
        assert got == inter_expected(size, a, p, k), p


def r_neighbors_scrambled(comm, k):
    """Neighbour collectives on a periodic ring (a rank is its own
    neighbour on rings of 1 and 2) and a distributed graph, all outstanding
    at once, waited for in a shuffled order."""
    n, r = comm.size, comm.rank
    ring = comm.Create_cart([n], [True])
    graph = comm.Create_dist_graph_adjacent([(r + 2) % n], [(r - 2) % n])
    x = data(r, k)
    out, reqs = {}, []
    y = np.zeros(2 * k, np.int64)
    reqs.append(ring.Ineighbor_allgather(x, y))
    out["allgather"] = y
    y = np.zeros(2 * k, np.int64)
    reqs.append(ring.Ineighbor_alltoall(np.concatenate([x, x + 10]), y))
    out["alltoall"] = y
    y = np.zeros(3, np.int64)
    reqs.append(ring.Ineighbor_alltoallv([np.concatenate([x[:1], x[:2]]),
                                          [1, 2]], [y, [2, 1]]))
    out["alltoallv"] = y
    blocking = np.zeros(2 * k, np.int64)
    ring.Neighbor_allgather(x + 5, blocking)
    out["blocking allgather"] = blocking
    y = np.zeros(k, np.int64)
    reqs.append(graph.Ineighbor_allgather(x, y))
    out["graph allgather"] = y
    order = np.random.default_rng(r).permutation(len(reqs))
    gloocy.Request.Waitall([reqs[i] for i in order])
    ring.Free()
    graph.Free()
    return {name: v.tolist() for name, v in out.items()}


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_outstanding_neighbor_collectives_finish_in_any_order(world, size):
    k = 3
    for r, got in enumerate(world(size).run(r_neighbors_scrambled, k)):
        left, right = data((r - 1) % size, k), data((r + 1) % size, k)
        assert got["allgather"] == np.concatenate([left, right]).tolist()
        # left's block 1 went right (to us); right's block 0 went left
        assert got["alltoall"] == np.concatenate([left + 10, right]).tolist()
        assert got["alltoallv"] == np.concatenate(
            [data((r - 1) % size, 2), data((r + 1) % size, 1)]).tolist()
        assert got["blocking allgather"] == np.concatenate(
            [left + 5, right + 5]).tolist()
        assert got["graph allgather"] == data((r + 2) % size, k).tolist()


_KEPT = {}          # a rank's intercommunicator between two runs


def r_make_intercomm(comm):
    """Groups [0] and [1, 2]; kept for r_inter_iallreduce_until_lost."""
    p = comm.rank
    mine, theirs = groups(3, [0], p)
    _KEPT["local"] = comm.Split(0 if p == 0 else 1, mine.index(p))
    _KEPT["ic"] = _KEPT["local"].Create_intercomm(0, comm, theirs[0])
    comm.Barrier()


def r_inter_iallreduce_until_lost(comm):
    """An intercommunicator Iallreduce that world rank 2 never joins: (the
    rank the PeerLostError names, its message)."""
    x = np.ones(1000)
    try:        # (under load the peer may be gone before the start: it raises)
        _KEPT["ic"].Iallreduce(x, np.empty_like(x)).Wait()
    except GloocyError as e:       # (another kind fails the test, named)
        return getattr(e, "rank", None), f"{type(e).__name__}: {e}"
    finally:
        _KEPT.pop("ic").Free()
        _KEPT.pop("local").Free()
    return None, "Wait returned"


def test_peer_killed_during_intercomm_iallreduce_is_named(transport):
    size = 3
    with ProcessWorld(size, env=TRANSPORT_ENV[transport]) as w:
        w.run(r_make_intercomm)                 # connected, then killed
        timer = threading.Timer(0.5, w.kill, (2,))
        timer.start()
        try:
            got = w.run(r_inter_iallreduce_until_lost, ranks=[0, 1],
                        timeout=30)
        finally:
            timer.cancel()
    for lost, text in got:        # (world rank 2 is union rank 2 too)
        assert lost == 2 and "lost peer rank 2" in text, text
        assert text.startswith("PeerLostError"), text


def add(invec, inoutvec):
    inoutvec[:] = invec + inoutvec


def matrices(rank, m, salt=0):
    """m small 2x2 integer matrices of `rank`, flat (4 int64 each)."""
    j = np.arange(m)
    a = np.stack([np.ones(m, np.int64), (rank + j + salt) % 3,
                  (rank * j + 1 + salt) % 2, np.full(m, 1 + rank % 2)], 1)
    return a.reshape(-1).astype(np.int64)


def matmul(invec, inoutvec):
    """Non-commutative: inoutvec = invec @ inoutvec, matrix by matrix."""
    inoutvec[:] = np.matmul(invec.reshape(-1, 2, 2),
                            inoutvec.reshape(-1, 2, 2)).reshape(-1)


def product(ranks, m, salt=0):
    acc = np.tile(np.eye(2, dtype=np.int64), (m, 1, 1))
    for q in ranks:
        acc = np.matmul(acc, matrices(q, m, salt).reshape(-1, 2, 2))
    return acc.reshape(-1).tolist()


def r_user_ops(comm, k, m):
    """A commutative user op (a sum, on buffers big enough for the ring)
    and a non-commutative one (2x2 matrix products), blocking and
    nonblocking."""
    n, r = comm.size, comm.rank
    plus = gloocy.Op.create(add, commute=True)
    mul = gloocy.Op.create(matmul, commute=False)
    out = {}
    x = data(r, k)
    y = np.empty(k, np.int64)
    comm.Allreduce(x, y, plus)
    out["sum"] = y.tolist()
    y2 = np.empty(k, np.int64)
    q1 = comm.Iallreduce(x, y2, plus)
    blocks = np.concatenate([x + j for j in range(n)])
    y3 = np.empty(k, np.int64)
    q2 = comm.Ireduce_scatter_block(blocks, y3, plus)
    y4 = np.empty(k, np.int64)
    comm.Reduce_scatter_block(blocks, y4, plus)
    out["sum rsb"] = y4.tolist()
    a = matrices(r, m)
    p1 = np.empty_like(a)
    comm.Allreduce(a, p1, mul)
    out["product"] = p1.tolist()
    p2 = np.empty_like(a)
    q3 = comm.Iallreduce(a, p2, mul)
    p3 = np.zeros_like(a)
    q4 = comm.Ireduce(a, p3 if r == n - 1 else None, mul, n - 1)
    p4 = np.zeros_like(a)
    q5 = comm.Iscan(a, p4, mul)
    p5 = np.zeros_like(a)
    comm.Exscan(a, p5, mul)
    out["exscan"] = p5.tolist() if r else None
    mats = np.concatenate([matrices(r, m, j) for j in range(n)])
    p6 = np.zeros_like(a)
    q6 = comm.Ireduce_scatter_block(mats, p6, mul)
    p7 = np.zeros_like(a)
    comm.Reduce_scatter_block(mats, p7, mul)
    out["product rsb"] = p7.tolist()
    gloocy.Request.Waitall([q6, q3, q1, q5, q2, q4])
    out.update({"isum": y2.tolist(), "isum rsb": y3.tolist(),
                "iproduct": p2.tolist(), "ireduce": p3.tolist(),
                "iscan": p4.tolist(), "iproduct rsb": p6.tolist()})
    plus.Free()
    mul.Free()
    return out


@pytest.mark.parametrize("size", [6, 7])
def test_user_ops_commutative_and_in_rank_order(world, size):
    k, m = 20_000, 3
    total = np.sum([data(q, k) for q in range(size)], axis=0)
    for r, got in enumerate(world(size).run(r_user_ops, k, m)):
        assert got["sum"] == got["isum"] == total.tolist()
        assert got["sum rsb"] == got["isum rsb"] == (total + size * r).tolist()
        everyone = product(range(size), m)
        assert got["product"] == got["iproduct"] == everyone
        assert got["ireduce"] == (everyone if r == size - 1
                                  else [0] * (4 * m))
        assert got["iscan"] == product(range(r + 1), m)
        assert got["exscan"] == (product(range(r), m) if r else None)
        assert got["product rsb"] == got["iproduct rsb"] == product(
            range(size), m, r)
