"""Process topologies: the arithmetic of Cartesian grids and graphs.

Pure computations, no communication (the communicator classes in
`_comm_topology.pxi` use them): balanced grid shapes (Compute_dims),
coordinates, shifts, neighbour lists, the checks of the user's arguments,
and how the blocks of a neighbour collective are matched between ranks
(a tag per neighbour slot). Imports nothing of the communicator.
"""

import operator

from gloocy.constants import PROC_NULL, UNDEFINED
from gloocy.errors import ArgumentError, ERR_ARG, ERR_DIMS, ERR_RANK, ERR_TOPOLOGY

__all__ = ["CART", "GRAPH", "DIST_GRAPH", "UNWEIGHTED", "WEIGHTS_EMPTY",
           "compute_dims", "Cart", "Graph", "DistGraph", "dist_graph_edges"]

# Topo_test's answers (mpi4py's values on MPICH).
GRAPH = 1
CART = 2
DIST_GRAPH = 3


class _Weights:
    """A marker for the weights arguments of the distributed graphs."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return self._name

    def __reduce__(self):
        return self._name


UNWEIGHTED = _Weights("UNWEIGHTED")         # no weights (as None)
WEIGHTS_EMPTY = _Weights("WEIGHTS_EMPTY")   # weighted, with no edges


def _ints(values, name):
    """A list of ints from a sequence; TypeError naming the argument."""
    try:
        return [operator.index(v) for v in values]
    except TypeError:
        raise TypeError(f"{name}: expected a sequence of integers, got "
                        f"{values!r}") from None


def _int(value, name):
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {value!r}") from None


def _product(values):
    p = 1
    for v in values:
        p *= v
    return p


# -- balanced grid shapes -------------------------------------------------------


def _balanced(n, k):
    """k factors of n, non-increasing, with the smallest spread (max - min;
    among those, the largest smallest one, then the lexicographically
    smallest), as MPICH chooses."""
    if k == 0:
        return []
    divisors = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    divisors = sorted(set(divisors + [n // d for d in divisors]), reverse=True)
    best = None

    def search(rest, k, most, chosen):
        nonlocal best
        if k == 1:
            if rest <= most:
                found = chosen + [rest]
                key = (found[0] - rest, -rest, found)
                if best is None or key < best[0]:
                    best = (key, found)
            return
        for f in divisors:              # the largest factor left comes next
            if f > most or rest % f:
                continue
            if f ** k < rest:
                break
            search(rest // f, k - 1, f, chosen + [f])

    search(n, k, n, [])
    return best[1]


def compute_dims(nnodes, dims):
    """Compute_dims(nnodes, dims): a grid of `nnodes` processes in
    len(dims) dimensions (or `dims` of them), as balanced as possible,
    largest first; nonzero entries of `dims` are kept as given."""
    nnodes = _int(nnodes, "nnodes")
    try:
        ndims = operator.index(dims)
    except TypeError:
        dims = _ints(dims, "dims")
    else:
        if ndims < 0:
            raise ArgumentError(f"dims: a negative number of dimensions "
                                f"({ndims})", ERR_DIMS)
        dims = [0] * ndims
    if nnodes < 1:
        raise ArgumentError(f"nnodes: must be positive, got {nnodes}", ERR_ARG)
    for i, d in enumerate(dims):
        if d < 0:
            raise ArgumentError(f"dims[{i}]: must be >= 0, got {d}", ERR_DIMS)
    if not dims:
        return []
    fixed = _product(d for d in dims if d)
    free = [i for i, d in enumerate(dims) if d == 0]
    if nnodes % fixed or (not free and fixed != nnodes):
        raise ArgumentError(
            f"dims: {dims} cannot make a grid of {nnodes} processes "
            f"(the given sizes multiply to {fixed})", ERR_DIMS)
    out = list(dims)
    for i, f in zip(free, _balanced(nnodes // fixed, len(free))):
        out[i] = f
    return out


# -- Cartesian grids ---------------------------------------------------------------


class Cart:
    """A Cartesian grid of ranks (row-major: the last dimension varies
    fastest), seen from rank `rank`."""

    kind = CART

    def __init__(self, dims, periods, rank):
        self.dims = list(dims)
        self.periods = list(periods)
        self.rank = rank
        self.nnodes = _product(self.dims)

    @classmethod
    def make(cls, dims, periods, size, rank):
        """Check Create_cart's arguments for a communicator of `size`
        ranks; ArgumentError (a ValueError) naming the bad one."""
        dims = _ints(dims, "dims")
        if periods is None:
            periods = [0] * len(dims)
        elif isinstance(periods, bool):
            periods = [int(periods)] * len(dims)
        else:
            periods = [int(bool(p)) for p in periods]
            if len(periods) != len(dims):
                raise ArgumentError(
                    f"periods: {len(periods)} values for {len(dims)} "
                    "dimensions", ERR_ARG)
        for i, d in enumerate(dims):
            if d < 1:
                raise ArgumentError(f"dims[{i}]: must be positive, got {d}",
                                    ERR_DIMS)
        n = _product(dims)
        if n > size:
            raise ArgumentError(
                f"dims: a {'x'.join(map(str, dims))} grid needs {n} "
                f"processes; the communicator has {size}", ERR_DIMS)
        return cls(dims, periods, rank)

    @property
    def ndim(self):
        return len(self.dims)

    def coords_of(self, rank):
        """Coordinates of `rank`."""
        rank = _int(rank, "rank")
        if not 0 <= rank < self.nnodes:
            raise ArgumentError(f"rank: {rank} is not in the grid of "
                                f"{self.nnodes} ranks", ERR_RANK)
        coords = [0] * len(self.dims)
        for i in range(len(self.dims) - 1, -1, -1):
            rank, coords[i] = divmod(rank, self.dims[i])
        return coords

    def rank_of(self, coords):
        """The rank at `coords` (wrapped around periodic dimensions)."""
        coords = _ints(coords, "coords")
        if len(coords) != len(self.dims):
            raise ArgumentError(f"coords: {len(coords)} coordinates for "
                                f"{len(self.dims)} dimensions", ERR_ARG)
        rank = 0
        for i, (c, d, p) in enumerate(zip(coords, self.dims, self.periods)):
            if p:
                c %= d
            elif not 0 <= c < d:
                raise ArgumentError(
                    f"coords[{i}]: {c} is outside 0..{d - 1} (dimension {i} "
                    "is not periodic)", ERR_ARG)
            rank = rank * d + c
        return rank

    def shift(self, direction, disp, rank=None):
        """(source, dest) of a shift by `disp` along `direction`:
        PROC_NULL off the edge of a non-periodic dimension."""
        direction, disp = _int(direction, "direction"), _int(disp, "disp")
        if not 0 <= direction < len(self.dims):
            raise ArgumentError(f"direction: {direction} is not a dimension "
                                f"(0..{len(self.dims) - 1})", ERR_ARG)
        coords = self.coords_of(self.rank if rank is None else rank)

        def moved(by):
            c = list(coords)
            c[direction] += by
            d = self.dims[direction]
            if not self.periods[direction] and not 0 <= c[direction] < d:
                return PROC_NULL
            return self.rank_of(c)

        return moved(-disp), moved(disp)

    def sub(self, remain_dims):
        """(color, remaining dims, remaining periods, our rank in the
        sub-grid) of Sub(remain_dims)."""
        remain = [bool(r) for r in remain_dims]
        if len(remain) != len(self.dims):
            raise ArgumentError(f"remain_dims: {len(remain)} values for "
                                f"{len(self.dims)} dimensions", ERR_ARG)
        coords = self.coords_of(self.rank)
        color = key = 0
        for c, d, r in zip(coords, self.dims, remain):
            if r:
                key = key * d + c
            else:
                color = color * d + c
        dims = [d for d, r in zip(self.dims, remain) if r]
        periods = [p for p, r in zip(self.periods, remain) if r]
        return color, key, dims, periods

    def neighbors(self):
        """(inedges, outedges): per dimension the source then the
        destination of shift(d, 1), PROC_NULL included."""
        out = []
        for d in range(len(self.dims)):
            out.extend(self.shift(d, 1))
        return out, list(out)

    def exchange_plan(self):
        """(sources with their tags, destinations with their tags) of a
        neighbour exchange. A block sent towards -1 along d travels with
        tag 2d and lands in the receiver's slot 2d+1 (from its +1 side);
        one sent towards +1 has tag 2d+1 and lands in slot 2d: so a rank
        that is its own neighbour (periodic sizes 1, 2) still gets the
        right block in each slot."""
        ins, outs = self.neighbors()
        rtags = [2 * (i // 2) + (1 - i % 2) for i in range(len(ins))]
        stags = list(range(len(outs)))
        return list(zip(ins, rtags)), list(zip(outs, stags))


# -- graphs --------------------------------------------------------------------


def _occurrence_tags(peers):
    """Per slot, how many earlier slots name the same peer: the k-th block
    between two ranks matches the other side's k-th."""
    seen = {}
    tags = []
    for p in peers:
        tags.append(seen.get(p, 0))
        seen[p] = tags[-1] + 1
    return tags


class Graph:
    """A general graph (Create_graph): node i's neighbours are
    edges[index[i-1]:index[i]]; the same on every rank."""

    kind = GRAPH

    def __init__(self, index, edges, rank):
        self.index, self.edges, self.rank = index, edges, rank
        self.nnodes = len(index)

    @classmethod
    def make(cls, index, edges, size, rank):
        index = _ints(index, "index")
        edges = _ints(edges, "edges")
        # mpi4py's extension: the standard adjacency array (a leading 0)
        if index and index[0] == 0 and index[-1] == len(edges):
            index = index[1:]
        if len(index) > size:
            raise ArgumentError(f"index: a graph of {len(index)} nodes; the "
                                f"communicator has {size} processes", ERR_ARG)
        last = 0
        for i, n in enumerate(index):
            if n < last:
                raise ArgumentError(f"index[{i}]: {n} is below index[{i - 1}]"
                                    f" = {last} (must not decrease)", ERR_ARG)
            last = n
        if last != len(edges):
            raise ArgumentError(f"index: its last entry ({last}) must be the "
                                f"number of edges ({len(edges)})", ERR_ARG)
        for i, e in enumerate(edges):
            if not 0 <= e < len(index):
                raise ArgumentError(f"edges[{i}]: {e} is not a node "
                                    f"(0..{len(index) - 1})", ERR_RANK)
        return cls(index, edges, rank)

    def neighbors_of(self, rank):
        rank = _int(rank, "rank")
        if not 0 <= rank < self.nnodes:
            raise ArgumentError(f"rank: {rank} is not a node of the graph "
                                f"(0..{self.nnodes - 1})", ERR_RANK)
        return self.edges[self.index[rank - 1] if rank else 0:self.index[rank]]

    def neighbors(self):
        mine = self.neighbors_of(self.rank)
        return mine, list(mine)

    def exchange_plan(self):
        """Every neighbour both sends to us and receives from us; the k-th
        edge to a peer matches the peer's k-th edge to us. That needs as
        many edges both ways between every two nodes (else an exchange
        would wait forever): checked over the whole graph, so every rank
        raises."""
        pairs = {}
        for node in range(self.nnodes):
            for peer in self.neighbors_of(node):
                pairs[node, peer] = pairs.get((node, peer), 0) + 1
        for (a, b), n in sorted(pairs.items()):
            if pairs.get((b, a), 0) != n:
                raise ArgumentError(
                    f"the graph is not symmetric: node {a} lists node {b} "
                    f"{n} time(s), node {b} lists node {a} "
                    f"{pairs.get((b, a), 0)} time(s), so a neighbour "
                    "collective cannot match their blocks", ERR_TOPOLOGY)
        mine = self.neighbors_of(self.rank)
        tags = _occurrence_tags(mine)
        return list(zip(mine, tags)), list(zip(mine, tags))


def _weights(weights, degree, name):
    """(weighted, list of weights) of a weights argument."""
    if weights is None or weights is UNWEIGHTED:
        return False, [1] * degree
    if weights is WEIGHTS_EMPTY:
        if degree:
            raise ArgumentError(f"{name}: WEIGHTS_EMPTY (empty weights) but "
                                f"{degree} edges", ERR_ARG)
        return True, []
    weights = _ints(weights, name)
    if len(weights) != degree:
        raise ArgumentError(f"{name}: {len(weights)} weights for {degree} "
                            "edges", ERR_ARG)
    return True, weights


def _ranks(values, name, size):
    values = [] if values is None else _ints(values, name)
    for i, r in enumerate(values):
        if not 0 <= r < size:
            raise ArgumentError(f"{name}[{i}]: {r} is not a rank "
                                f"(0..{size - 1})", ERR_RANK)
    return values


class DistGraph:
    """A distributed graph: this rank's sources and destinations (and
    their weights; None if unweighted)."""

    kind = DIST_GRAPH

    def __init__(self, sources, destinations, weights):
        self.sources, self.destinations = sources, destinations
        self.weights = weights      # (sourceweights, destweights) or None

    @classmethod
    def adjacent(cls, sources, destinations, sourceweights, destweights, size):
        sources = _ranks(sources, "sources", size)
        destinations = _ranks(destinations, "destinations", size)
        ws, sw = _weights(sourceweights, len(sources), "sourceweights")
        wd, dw = _weights(destweights, len(destinations), "destweights")
        return cls(sources, destinations, (sw, dw) if ws or wd else None)

    def neighbors(self):
        return list(self.sources), list(self.destinations)

    def exchange_plan(self):
        return (list(zip(self.sources, _occurrence_tags(self.sources))),
                list(zip(self.destinations,
                         _occurrence_tags(self.destinations))))


def dist_graph_edges(sources, degrees, destinations, weights, size):
    """Create_dist_graph's arguments, checked: (weighted, [(source, dest,
    weight)...]) of the edges this rank names."""
    sources = _ranks(sources, "sources", size)
    degrees = [] if degrees is None else _ints(degrees, "degrees")
    if len(degrees) != len(sources):
        raise ArgumentError(f"degrees: {len(degrees)} degrees for "
                            f"{len(sources)} sources", ERR_ARG)
    for i, d in enumerate(degrees):
        if d < 0:
            raise ArgumentError(f"degrees[{i}]: must be >= 0, got {d}", ERR_ARG)
    destinations = _ranks(destinations, "destinations", size)
    if len(destinations) != sum(degrees):
        raise ArgumentError(f"destinations: {len(destinations)} for degrees "
                            f"adding up to {sum(degrees)}", ERR_ARG)
    weighted, weights = _weights(weights, len(destinations), "weights")
    edges = []
    k = 0
    for s, d in zip(sources, degrees):
        for _ in range(d):
            edges.append((s, destinations[k], weights[k]))
            k += 1
    return weighted, edges


def dist_graph_from_edges(every, rank):
    """The DistGraph of `rank` from every rank's (weighted, edges), in
    rank order: its in-edges and out-edges in the order they were named
    (so both ends of an edge list it at the same place among their
    edges to each other)."""
    weighted = any(w for w, _ in every)
    sources, sw, destinations, dw = [], [], [], []
    for _, edges in every:
        for s, d, w in edges:
            if d == rank:
                sources.append(s)
                sw.append(w)
            if s == rank:
                destinations.append(d)
                dw.append(w)
    return DistGraph(sources, destinations, (sw, dw) if weighted else None)
