"""Process topologies and neighbour collectives on real rank processes.

Cartesian grids (shapes and periods drawn by hypothesis) are checked
against NumPy: a rank's neighbours are read off np.roll of the grid of
ranks, and what a neighbour collective delivers off np.roll of the grid of
what every rank sent (so a rank that is its own neighbour, in periodic
dimensions of size 1 or 2, must get two different blocks). Graphs and
distributed graphs (random multigraphs) are checked against MPI's rule for
repeated edges: the k-th block from p to q lands in q's slot of the k-th
time q lists p. Compute_dims is checked against mpi4py on MPICH."""

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gloocy.constants import ANY_SOURCE, ANY_TAG, PROC_NULL
from gloocy.topology import (CART, DIST_GRAPH, GRAPH, UNWEIGHTED,
                             WEIGHTS_EMPTY, compute_dims)
from conftest import examples

SIZES = [1, 2, 3, 4, 5]
K = 3                       # items per block


# -- oracles ------------------------------------------------------------------


def cart_oracle(dims, periods, rank):
    """(coords, [source0, dest0, source1, dest1...]) by NumPy."""
    grid = np.arange(int(np.prod(dims, dtype=np.int64))).reshape(dims)
    coords = [int(c) for c in np.unravel_index(rank, dims)] if dims else []
    out = []
    for d in range(len(dims)):
        src = int(np.roll(grid, 1, axis=d)[tuple(coords)])
        dst = int(np.roll(grid, -1, axis=d)[tuple(coords)])
        if not periods[d]:
            if coords[d] == 0:
                src = PROC_NULL
            if coords[d] == dims[d] - 1:
                dst = PROC_NULL
        out += [src, dst]
    return coords, out


def block_value(rank, slot):
    return 1000 * rank + slot + 1


def cart_alltoall_oracle(dims, periods, rank):
    """What rank's recv blocks hold after a neighbour alltoall in which
    every rank r sends block_value(r, slot) in each slot (-1: untouched).
    F[..., s] is the grid of what each rank sends in slot s; slot 2d
    receives what the -1 neighbour sent towards +1 (its slot 2d+1)."""
    n = int(np.prod(dims, dtype=np.int64))
    nslots = 2 * len(dims)
    F = np.array([[block_value(r, s) for s in range(nslots)]
                  for r in range(n)]).reshape(list(dims) + [nslots])
    coords = tuple(int(c) for c in np.unravel_index(rank, dims)) if dims else ()
    want = []
    for d in range(len(dims)):
        lo = np.roll(F[..., 2 * d + 1], 1, axis=d)[coords]
        hi = np.roll(F[..., 2 * d], -1, axis=d)[coords]
        if not periods[d]:
            if coords[d] == 0:
                lo = -1
            if coords[d] == dims[d] - 1:
                hi = -1
        want += [int(lo), int(hi)]
    return want


def matched_oracle(rank, sources, dests_of):
    """The recv blocks of `rank` whose incoming list is `sources`, when
    rank p sends block_value(p, i) in slot i to dests_of[p][i]: the k-th
    time we list p gets p's k-th block to us."""
    seen = {}
    want = []
    for p in sources:
        k = seen.get(p, 0)
        seen[p] = k + 1
        slots = [i for i, q in enumerate(dests_of[p]) if q == rank]
        want.append(block_value(p, slots[k]))
    return want


# -- Cartesian ------------------------------------------------------------------


def r_cart(comm, dims, periods):
    cart = comm.Create_cart(dims, periods)
    if cart == _null(comm):
        return None
    try:
        ins, outs = cart.inoutedges
        nslots = len(outs)
        send = np.array([[block_value(cart.rank, s)] * K
                         for s in range(nslots)], np.int64).reshape(-1)
        recv = np.full(nslots * K, -1, np.int64)
        cart.Neighbor_alltoall(send, recv)
        gathered = np.full(nslots * K, -1, np.int64)
        cart.Neighbor_allgather(np.full(K, cart.rank, np.int64), gathered)
        # v-variants: block j of recv at a stride of K + 1 items
        counts = [K] * nslots
        displs = [j * (K + 1) for j in range(nslots)]
        recvv = np.full(nslots * (K + 1), -1, np.int64)
        cart.Neighbor_alltoallv([send, counts], [recvv, (counts, displs)])
        req = cart.Ineighbor_alltoall(send, recvi := np.full(nslots * K, -1,
                                                              np.int64))
        req.Wait()
        objs = cart.neighbor_alltoall([(cart.rank, s) for s in range(nslots)])
        shifts = [cart.Shift(d, 1) for d in range(cart.ndim)]
        return dict(
            topology=cart.Get_topology(), topo=cart.Get_topo(),
            coords=cart.coords, dims=cart.dims, periods=cart.periods,
            ins=ins, outs=outs, degrees=cart.degrees, shifts=shifts,
            ranks=[cart.Get_cart_rank(cart.Get_coords(r))
                   for r in range(cart.size)],
            recv=recv.reshape(nslots, K)[:, 0].tolist() if nslots else [],
            uniform=bool((recv.reshape(nslots, K) ==
                          recv.reshape(nslots, K)[:, :1]).all()) if nslots
            else True,
            gathered=gathered[::K].tolist(),
            recvv=[recvv[d:d + K].tolist() for d in displs],
            gaps=recvv[K::K + 1].tolist(),
            recvi=recvi[::K].tolist(), objs=objs)
    finally:
        cart.Free()


def _null(comm):
    from gloocy.communicator import COMM_NULL
    return COMM_NULL


def check_cart(results, dims, periods):
    n = int(np.prod(dims, dtype=np.int64)) if dims else 1
    for rank, got in enumerate(results):
        if rank >= n:
            assert got is None, rank
            continue
        coords, nbrs = cart_oracle(dims, periods, rank)
        want = cart_alltoall_oracle(dims, periods, rank)
        assert got["topology"] == CART
        assert got["topo"] == (list(dims), [int(p) for p in periods], coords)
        assert got["coords"] == coords and got["dims"] == list(dims)
        assert got["ins"] == nbrs and got["outs"] == nbrs
        assert got["degrees"] == (len(nbrs), len(nbrs))
        assert got["shifts"] == [tuple(nbrs[2 * d:2 * d + 2])
                                 for d in range(len(dims))]
        assert got["ranks"] == list(range(n))
        assert got["recv"] == want, (rank, got["recv"], want)
        assert got["uniform"]
        assert got["gathered"] == [-1 if p == PROC_NULL else p for p in nbrs]
        assert got["recvv"] == [[w] * K for w in want]
        assert got["gaps"] == [-1] * len(nbrs)
        assert got["recvi"] == want
        assert got["objs"] == [None if w == -1 else (w // 1000, w % 1000 - 1)
                               for w in want]


@pytest.mark.parametrize("size,dims,periods", [
    (1, [1], [True]),               # a rank its own neighbour twice
    (1, [1, 1], [True, False]),
    (2, [2], [True]),               # the other rank twice
    (2, [2, 1], [True, True]),
    (3, [3], [False]),
    (4, [2, 2], [True, True]),
    (5, [2, 2], [False, True]),     # rank 4 outside the grid
    (5, [5, 1, 1], [True, False, True]),
    (3, [], []),                    # zero dimensions: one rank, no neighbours
])
def test_cart_cases(world, size, dims, periods):
    check_cart(world(size).run(r_cart, dims, periods), dims, periods)


@st.composite
def cart_shapes(draw):
    size = draw(st.sampled_from(SIZES))
    ndim = draw(st.integers(1, 3))
    n = draw(st.integers(1, size))
    dims = compute_dims(n, ndim)
    dims = draw(st.permutations(dims))
    periods = draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim))
    return size, list(dims), periods


@settings(max_examples=examples(15), deadline=None)   # --long: 15
@given(shape=cart_shapes())
def test_cart_hypothesis(world, shape):
    size, dims, periods = shape
    check_cart(world(size).run(r_cart, dims, periods), dims, periods)


def r_sub(comm, dims, remain):
    cart = comm.Create_cart(dims, [True] * len(dims))
    try:
        sub = cart.Sub(remain)
        out = (type(sub).__name__, sub.dims, sub.coords, sub.size,
               sorted(sub.allgather(cart.rank)))
        sub.Free()
        idup, req = cart.Idup()        # the shadow first made by Idup...
        req.Wait()
        got = np.full(2 * cart.ndim, -1.0)
        cart.Ineighbor_allgather(np.ones(1), got).Wait()   # ...serves these
        idup_ok = (type(idup).__name__, idup.Get_topo() == cart.Get_topo(),
                   got.tolist() == [-1.0 if p == PROC_NULL else 1.0
                                    for p in cart.inedges] or None)
        idup.Free()
        dup = cart.Dup()
        split = cart.Split(0, 0)
        out += (type(dup).__name__, dup.Get_topo(), dup.Get_topology(),
                type(split).__name__, split.Get_topology(), idup_ok)
        dup.Free()
        split.Free()
        return out
    finally:
        cart.Free()


@pytest.mark.parametrize("size,dims,remain", [
    (4, [2, 2], [True, False]), (4, [2, 2], [False, True]),
    (5, [5, 1, 1], [False, True, True]), (3, [3, 1], [False, False])])
def test_cart_sub_dup_split(world, size, dims, remain):
    grid = np.arange(size).reshape(dims)
    for rank, got in enumerate(world(size).run(r_sub, dims, remain)):
        coords = tuple(int(c) for c in np.unravel_index(rank, dims))
        # the ranks sharing our coordinates in the dropped dimensions
        index = tuple(slice(None) if r else c for c, r in zip(coords, remain))
        members = grid[index]
        assert got[0] == "Cartcomm"
        assert got[1] == [d for d, r in zip(dims, remain) if r]
        assert got[2] == [c for c, r in zip(coords, remain) if r]
        assert got[3] == members.size
        assert got[4] == sorted(members.reshape(-1).tolist())
        assert got[5:] == ("Cartcomm", (dims, [1] * len(dims), list(coords)),
                           CART, "Intracomm", -32766,
                           ("Cartcomm", True, True))


# -- graphs ------------------------------------------------------------------------


@st.composite
def symmetric_graphs(draw):
    """A symmetric multigraph (self loops allowed) as index/edges; index
    in the standard adjacency form (a leading 0), which mpi4py reads as
    well, so that a node without edges first is not ambiguous."""
    size = draw(st.sampled_from(SIZES))
    nnodes = draw(st.integers(1, size))
    pairs = draw(st.lists(st.tuples(st.integers(0, nnodes - 1),
                                    st.integers(0, nnodes - 1)), max_size=8))
    nbrs = [[] for _ in range(nnodes)]
    for a, b in pairs:
        nbrs[a].append(b)
        nbrs[b].append(a)
    nbrs = [draw(st.permutations(n)) for n in nbrs]
    index = [0] + [int(i) for i in np.cumsum([len(n) for n in nbrs])]
    return size, index, [e for n in nbrs for e in n], nbrs


def r_graph(comm, index, edges):
    graph = comm.Create_graph(index, edges)
    if graph == _null(comm):
        return None
    try:
        n = graph.nneighbors
        send = np.repeat(np.array([block_value(graph.rank, i)
                                   for i in range(n)], np.int64), K)
        recv = np.full(n * K, -1, np.int64)
        graph.Neighbor_alltoall(send, recv)
        objs = graph.neighbor_allgather(graph.rank)
        return (graph.Get_topology(), graph.Get_dims(), graph.Get_topo(),
                graph.neighbors, [graph.Get_neighbors(r)
                                  for r in range(graph.size)],
                graph.inoutedges, recv[::K].tolist(), objs)
    finally:
        graph.Free()


@settings(max_examples=examples(15), deadline=None)   # --long: 15
@given(g=symmetric_graphs())
def test_graph_hypothesis(world, g):
    size, index, edges, nbrs = g
    for rank, got in enumerate(world(size).run(r_graph, index, edges)):
        if rank >= len(nbrs):
            assert got is None
            continue
        assert got[:5] == (GRAPH, (len(nbrs), len(edges)), (index[1:], edges),
                           nbrs[rank], nbrs)
        assert got[5] == (nbrs[rank], nbrs[rank])
        assert got[6] == matched_oracle(rank, nbrs[rank], nbrs)
        assert got[7] == nbrs[rank]


def r_dist(comm, edge_list, namer):
    """Adjacent form from the edge list (in its order), and the general
    form with edge e named by rank namer[e]."""
    rank = comm.rank
    sources = [s for s, d in edge_list if d == rank]
    dests = [d for s, d in edge_list if s == rank]
    weights = list(range(1, len(dests) + 1))
    adj = comm.Create_dist_graph_adjacent(sources, dests, None, weights)
    mine = [(s, d) for e, (s, d) in enumerate(edge_list) if namer[e] == rank]
    gen = comm.Create_dist_graph([s for s, d in mine], [1] * len(mine),
                                 [d for s, d in mine])
    out = []
    try:
        for topo in (adj, gen):
            ins, outs = topo.inoutedges
            send = np.repeat(np.array([block_value(rank, i)
                                       for i in range(len(outs))], np.int64), K)
            recv = np.full(len(ins) * K, -1, np.int64)
            topo.Neighbor_alltoall(send, recv)
            objs = topo.neighbor_alltoall([(rank, i) for i in range(len(outs))])
            out.append((topo.Get_topology(), topo.Get_dist_neighbors(),
                        topo.Get_dist_neighbors_count(), recv[::K].tolist(),
                        objs))
        return out
    finally:
        adj.Free()
        gen.Free()


@st.composite
def directed_graphs(draw):
    size = draw(st.sampled_from(SIZES))
    edges = draw(st.lists(st.tuples(st.integers(0, size - 1),
                                    st.integers(0, size - 1)), max_size=10))
    namer = draw(st.lists(st.integers(0, size - 1), min_size=len(edges),
                          max_size=len(edges)))
    return size, edges, namer


@settings(max_examples=examples(15), deadline=None)   # --long: 15
@given(g=directed_graphs())
def test_dist_graph_hypothesis(world, g):
    size, edge_list, namer = g
    results = world(size).run(r_dist, edge_list, namer)
    # the general form's neighbour order: rank by rank, in the order named
    by_namer = [e for r in range(size) for e, n in zip(edge_list, namer)
                if n == r]
    for rank, (adj, gen) in enumerate(results):
        sources = [s for s, d in edge_list if d == rank]
        dests = [d for s, d in edge_list if s == rank]
        dests_of = [[d for s, d in edge_list if s == p] for p in range(size)]
        want = matched_oracle(rank, sources, dests_of)
        assert adj[0] == DIST_GRAPH
        assert adj[1] == (sources, dests, ([1] * len(sources),
                                           list(range(1, len(dests) + 1))))
        assert adj[2] == (len(sources), len(dests), True)
        assert adj[3] == want
        assert adj[4] == [(v // 1000, v % 1000 - 1) for v in want]
        gsources = [s for s, d in by_namer if d == rank]
        gdests = [d for s, d in by_namer if s == rank]
        assert gen[0] == DIST_GRAPH
        assert gen[1] == (gsources, gdests, None)
        assert sorted(gsources) == sorted(sources)
        gdests_of = [[d for s, d in by_namer if s == p] for p in range(size)]
        assert gen[3] == matched_oracle(rank, gsources, gdests_of)


# -- neighbour traffic stays apart from the user's ------------------------------------


def r_apart(comm):
    """A user's ANY_SOURCE/ANY_TAG receive posted before a neighbour
    exchange gets the user's message, not a neighbour block."""
    cart = comm.Create_cart([comm.size], [True])
    try:
        got = np.full(4, -1, np.int64)
        req = cart.Irecv(got, ANY_SOURCE, ANY_TAG)
        recv = np.full(2 * K, -1, np.int64)
        cart.Neighbor_allgather(np.full(K, 7, np.int64), recv)
        iv = np.full(2 * K, -1, np.int64)
        r2 = cart.Ineighbor_allgather(np.full(K, 8, np.int64), iv)
        cart.Send(np.full(4, 100 + cart.rank, np.int64),
                  (cart.rank + 1) % cart.size, 5)
        req.Wait()
        r2.Wait()
        return got.tolist(), recv.tolist(), iv.tolist()
    finally:
        cart.Free()


@pytest.mark.parametrize("size", [1, 2, 3])
def test_neighbour_blocks_never_meet_user_receives(world, size):
    for rank, (got, recv, iv) in enumerate(world(size).run(r_apart)):
        assert got == [100 + (rank - 1) % size] * 4
        assert recv == [7] * (2 * K) and iv == [8] * (2 * K)


def r_persistent(comm):
    cart = comm.Create_cart([comm.size], [False])
    try:
        send = np.arange(2 * K, dtype=np.int64) + 10 * cart.rank
        recv = np.full(2 * K, -1, np.int64)
        req = cart.Neighbor_alltoall_init(send, recv)
        out = []
        for i in range(3):
            send += 1000
            req.Start()
            req.Wait()
            out.append(recv.tolist())
        req.Free()
        return out
    finally:
        cart.Free()


@pytest.mark.parametrize("size", [1, 3])
def test_persistent(world, size):
    for rank, out in enumerate(world(size).run(r_persistent)):
        for i, recv in enumerate(out):
            base = 1000 * (i + 1)
            lo = ([base + 10 * (rank - 1) + K + j for j in range(K)]
                  if rank > 0 else [-1] * K)
            hi = ([base + 10 * (rank + 1) + j for j in range(K)]
                  if rank < size - 1 else [-1] * K)
            assert recv == lo + hi


def r_strided(comm):
    """A non-contiguous receive datatype (every other int64) on a line
    whose ends have a PROC_NULL neighbour: their blocks stay as they were,
    and so do the gaps."""
    from gloocy.datatypes import INT64_T
    every_other = INT64_T.Create_vector(K, 1, 2).Commit()
    line = comm.Create_cart([comm.size], [False])
    try:
        recv = np.full(2 * 2 * K, -5, np.int64)
        line.Neighbor_allgather(np.full(K, line.rank, np.int64),
                                [recv, 1, every_other])
        recv2 = np.full(2 * 2 * K, -5, np.int64)
        line.Neighbor_alltoallv(np.arange(2 * K, dtype=np.int64) + 10 * line.rank,
                                [recv2, ([1, 1], [0, 1]), every_other])
        return recv.tolist(), recv2.tolist()
    finally:
        line.Free()
        every_other.Free()


@pytest.mark.parametrize("size", [1, 2, 3])
def test_strided_receive_keeps_proc_null_blocks(world, size):
    for rank, (got, got2) in enumerate(world(size).run(r_strided)):
        want = np.full(4 * K, -5)
        want2 = np.full(4 * K, -5)
        # the vector type's extent is 2K - 1 items: block j starts there
        ext = 2 * K - 1
        if rank > 0:
            want[0:2 * K:2][:K] = rank - 1
            want2[0:ext + 1:2][:K] = 10 * (rank - 1) + K + np.arange(K)
        if rank < size - 1:
            want[ext:ext + 2 * K:2][:K] = rank + 1
            want2[ext:ext + 2 * K:2][:K] = 10 * (rank + 1) + np.arange(K)
        assert got == want.tolist(), rank
        assert got2 == want2.tolist(), rank


# -- errors ----------------------------------------------------------------------------


def r_errors(comm):
    """(exception type, message) of each bad call, in order."""
    def attempt(fn):
        try:
            fn()
        except Exception as e:
            return type(e).__name__, str(e), isinstance(e, ValueError)
        return None

    size = comm.size
    out = [attempt(lambda: comm.Create_cart([size + 1])),
           attempt(lambda: comm.Create_cart([-1, 2])),
           attempt(lambda: comm.Create_cart([size], [True, False])),
           attempt(lambda: comm.Create_graph([1, 2], [1, 5])),
           attempt(lambda: comm.Create_dist_graph_adjacent([size], [])),
           attempt(lambda: comm.Create_dist_graph_adjacent(
               [0], [0], WEIGHTS_EMPTY, WEIGHTS_EMPTY)),
           attempt(lambda: comm.Create_dist_graph([0], [2], [0])),
           attempt(lambda: compute_dims(6, [4, 0])),
           attempt(lambda: compute_dims(6, [-1, 0]))]
    cart = comm.Create_cart([size], [False])
    try:
        out += [attempt(lambda: cart.Get_cart_rank([size])),
                attempt(lambda: cart.Get_cart_rank([0, 0])),
                attempt(lambda: cart.Get_coords(size)),
                attempt(lambda: cart.Shift(1, 1)),
                attempt(lambda: cart.Neighbor_alltoall(
                    np.zeros(3, np.int64), np.zeros(2, np.int64))),
                attempt(lambda: cart.neighbor_alltoall([1, 2, 3]))]
    finally:
        cart.Free()
    out.append(attempt(lambda: cart.Get_coords(0)))     # freed
    # an asymmetric graph: node 0 lists 0 once more than... itself: fine;
    # node 0 lists node 1 but node 1 does not list node 0
    if size >= 2:
        graph = comm.Create_graph([1] + [1] * (size - 1), [1])
        try:
            out.append(attempt(lambda: graph.Neighbor_allgather(
                np.zeros(1), np.zeros(graph.nneighbors))))
        finally:
            graph.Free()
    return out


def test_errors_name_the_argument(world):
    size = 2
    for got in world(size).run(r_errors):
        words = ["dims", "dims[0]", "periods", "edges[1]", "sources[0]",
                 "sourceweights", "destinations", "dims", "dims[0]",
                 "coords[0]", "coords", "rank", "direction", "sendbuf",
                 "sendobj", "communicator"]
        for (kind, text, is_value_error), word in zip(got, words):
            assert text.startswith(word + ":") or text.startswith(word + " "),\
                (word, text)
            assert is_value_error, (kind, text)
        assert got[-1] is not None and "not symmetric" in got[-1][1]
        assert len(got) == len(words) + 1


MPICH_DIMS = """
import json
from mpi4py import MPI
cases = [(n, k) for n in range(1, 400) for k in range(5)]
cases += [(12, [0, 3, 0]), (24, [0, 0, 2]), (30, [5, 0, 0]), (8, [2, 2, 2]),
          (720720, 4), (2**20, 3)]
print(json.dumps([(n, k, MPI.Compute_dims(n, k)) for n, k in cases]))
"""


def test_compute_dims_matches_mpich():
    """mpi4py on MPICH (a singleton, in a process of its own) decides."""
    pytest.importorskip("mpi4py")
    done = subprocess.run([sys.executable, "-c", MPICH_DIMS], text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for n, k, want in json.loads(done.stdout):
        assert compute_dims(n, k) == want, (n, k)
