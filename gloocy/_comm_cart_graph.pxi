# The three topologies (mpi4py's Cartcomm, Graphcomm, Distgraphcomm) over
# Topocomm (_comm_topology.pxi), and how Intracomm's Create_cart,
# Create_graph, Create_dist_graph(_adjacent) make them.

cdef class Cartcomm(Topocomm):
    """A Cartesian grid of ranks (mpi4py's Cartcomm): row-major, the last
    dimension varying fastest."""

    _kind = _topology.CART

    def Get_dim(self):
        return len(self._t().dims)

    dim = ndim = property(Get_dim)

    def Get_topo(self):
        """(dims, periods, our coordinates)."""
        t = self._t()
        return list(t.dims), list(t.periods), t.coords_of(t.rank)

    topo = property(Get_topo)

    @property
    def dims(self):
        return list(self._t().dims)

    @property
    def periods(self):
        return list(self._t().periods)

    @property
    def coords(self):
        return self._t().coords_of(self._t().rank)

    def Get_cart_rank(self, coords):
        """The rank at `coords` (periodic dimensions wrap around)."""
        return self._t().rank_of(coords)

    def Get_coords(self, rank):
        return self._t().coords_of(rank)

    def Shift(self, direction, disp):
        """(source, dest): the ranks `disp` steps back and ahead of us
        along `direction`; PROC_NULL off a non-periodic edge."""
        return self._t().shift(direction, disp)

    def Sub(self, remain_dims, *, timeout=None):
        """The sub-grid of our rank keeping the dimensions flagged in
        `remain_dims` (a Cartcomm). Collective."""
        cdef Context ctx = self.live()
        color, key, dims, periods = self._t().sub(remain_dims)
        members, comm_id = _split(ctx, color, key, timeout)
        sub = _topology.Cart(dims, periods, members.index(ctx.rank))
        return Cartcomm(ctx.derive(members, comm_id),
                        procs=[self._procs[m] for m in members], topo=sub)


cdef class Graphcomm(Topocomm):
    """A general graph of ranks (mpi4py's Graphcomm); every rank knows the
    whole graph."""

    _kind = _topology.GRAPH

    def Get_dims(self):
        """(number of nodes, number of edges)."""
        return self._t().nnodes, len(self._t().edges)

    dims = property(Get_dims)

    @property
    def nnodes(self):
        return self._t().nnodes

    @property
    def nedges(self):
        return len(self._t().edges)

    def Get_topo(self):
        """(index, edges)."""
        return list(self._t().index), list(self._t().edges)

    topo = property(Get_topo)

    @property
    def index(self):
        return list(self._t().index)

    @property
    def edges(self):
        return list(self._t().edges)

    def Get_neighbors_count(self, rank):
        return len(self._t().neighbors_of(rank))

    def Get_neighbors(self, rank):
        return list(self._t().neighbors_of(rank))

    @property
    def nneighbors(self):
        return len(self._t().neighbors_of(self._t().rank))

    @property
    def neighbors(self):
        return list(self._t().neighbors_of(self._t().rank))


cdef class Distgraphcomm(Topocomm):
    """A distributed graph (mpi4py's Distgraphcomm): each rank knows its
    own incoming and outgoing neighbours."""

    _kind = _topology.DIST_GRAPH

    def Get_dist_neighbors_count(self):
        """(indegree, outdegree, weighted)."""
        t = self._t()
        return len(t.sources), len(t.destinations), t.weights is not None

    def Get_dist_neighbors(self):
        """(sources, destinations, (sourceweights, destweights) or None)."""
        t = self._t()
        w = t.weights
        return (list(t.sources), list(t.destinations),
                None if w is None else (list(w[0]), list(w[1])))


# -- making them (Intracomm's Create_cart... call these) -----------------------------


def _create_cart(Intracomm comm, dims, periods, timeout):
    cdef Context ctx = comm.live()
    cart = _topology.Cart.make(dims, periods, ctx.size, ctx.rank)
    comm_id = _new_id(ctx, timeout)
    if ctx.rank >= cart.nnodes:
        return COMM_NULL
    members = range(cart.nnodes)
    return Cartcomm(ctx.derive(members, comm_id),
                    procs=comm._procs[:cart.nnodes], topo=cart)


def _create_graph(Intracomm comm, index, edges, timeout):
    cdef Context ctx = comm.live()
    graph = _topology.Graph.make(index, edges, ctx.size, ctx.rank)
    comm_id = _new_id(ctx, timeout)
    if ctx.rank >= graph.nnodes:
        return COMM_NULL
    return Graphcomm(ctx.derive(range(graph.nnodes), comm_id),
                     procs=comm._procs[:graph.nnodes], topo=graph)


def _create_dist_graph_adjacent(Intracomm comm, sources, destinations,
                                sourceweights, destweights, timeout):
    cdef Context ctx = comm.live()
    graph = _topology.DistGraph.adjacent(sources, destinations, sourceweights,
                                         destweights, ctx.size)
    comm_id = _new_id(ctx, timeout)
    return Distgraphcomm(ctx.derive(range(ctx.size), comm_id),
                         procs=comm._procs, topo=graph)


def _create_dist_graph(Intracomm comm, sources, degrees, destinations,
                       weights, timeout):
    cdef Context ctx = comm.live()
    mine = _topology.dist_graph_edges(sources, degrees, destinations, weights,
                                      ctx.size)
    every = comm.allgather(mine, timeout=timeout)
    graph = _topology.dist_graph_from_edges(every, ctx.rank)
    comm_id = _new_id(ctx, timeout)
    return Distgraphcomm(ctx.derive(range(ctx.size), comm_id),
                         procs=comm._procs, topo=graph)
