# Process topologies (mpi4py's Topocomm, Cartcomm, Graphcomm,
# Distgraphcomm) and the neighbour collectives. The arithmetic (shapes,
# coordinates, neighbour lists, argument checks, which tag each neighbour
# block travels with) is gloocy.topology's; here are the classes and the
# exchange.
#
# A neighbour exchange runs over a private context of its own, derived
# locally (every rank computes its id: the communicator's with the SHADOW
# and NEIGHBORS bits), so its blocks never meet the user's point-to-point
# messages (an ANY_SOURCE/ANY_TAG receive cannot take one). Each block is
# one message, tagged by its slot, so a rank that is a neighbour twice
# gets two distinct blocks; PROC_NULL neighbours move nothing.

from cpython.buffer cimport PyBUF_WRITE
from cpython.memoryview cimport PyMemoryView_FromMemory

from gloocy._core cimport Buf

import ctypes
import time as _time

from gloocy import topology as _topology
from gloocy.constants import BOTTOM
from gloocy.datatypes import Datatype as _Datatype

# With SHADOW: the neighbour exchanges' context; with both NEIGHBORS bits,
# the one of the nonblocking neighbour collectives (run by the worker).
cdef uint32_t NEIGHBORS = 0x20000000
cdef uint32_t NEIGHBORS_NB = 0x10000000


cdef object _view(Buf b):
    """The bytes of b, writable, as a memoryview (to slice into blocks)."""
    return PyMemoryView_FromMemory(b.ptr, b.nbytes, PyBUF_WRITE)


cdef list _equal_blocks(Message m, int n, str name):
    """n equal slices of m's bytes."""
    if n == 0:
        return []
    if m.count % n:
        raise ArgumentError(f"{name}: {m.count} items do not split into {n} "
                            "equal neighbour blocks", ERR_COUNT)
    view = _view(m.buf)
    cdef int64_t size = m.buf.nbytes // n
    return [view[i * size:(i + 1) * size] for i in range(n)]


cdef list _vector_blocks(Message m):
    view = _view(m.buf)
    return [view[o:o + s] for s, o in zip(m.sizes, m.offsets)]


cdef object _exchange(Context nctx, list sends, list recvs, tuple plan,
                      timeout):
    """Send block i to the i-th destination of `plan`, receive block j
    from its j-th source, each with its slot's tag; PROC_NULL slots are
    skipped (their receive block stays as it was)."""
    ins, outs = plan
    cdef double t = nctx.timeout if timeout is None else timeout
    deadline = _time.monotonic() + t
    handles = []
    me = nctx.rank
    try:
        later = []
        for (src, tag), block in zip(ins, recvs):
            if src == PROC_NULL:
                continue
            if src == me:               # after our sends to ourselves
                later.append((block, src, tag))
            else:
                handles.append(nctx.irecv(block, src, tag))
        for (dest, tag), block in zip(outs, sends):
            if dest != PROC_NULL:
                handles.append(nctx.isend(block, dest, tag))
        for block, src, tag in later:
            handles.append(nctx.irecv(block, src, tag))
        for h in handles:
            h.wait(max(deadline - _time.monotonic(), 0.001))
    except BaseException:
        for h in handles:
            if not h.done:
                try:
                    h.cancel()
                except Exception:
                    pass
        raise


cdef class Topocomm(Intracomm):
    """An intracommunicator with a process topology (mpi4py's Topocomm):
    its neighbours, and the neighbour collectives over them."""

    cdef public object _topo      # gloocy.topology's Cart, Graph or DistGraph
    cdef public object _plan      # its exchange plan, made on first use
    cdef public object _nctx      # the neighbour exchanges' Context (lazy)
    cdef public object _nid       # its id (None: ours | SHADOW | NEIGHBORS)
    cdef bint _dupping            # inside Dup: _derived keeps the topology

    _kind = None                  # the topology a subclass holds

    def __init__(self, context=None, *, procs=None, name="", topo=None,
                 nid=None):
        """With another topology communicator of this class's kind: a
        second handle on it; with nothing: a null one."""
        if isinstance(context, _CommBase):
            other = context
            if other and not (isinstance(other, Topocomm) and (
                    self._kind is None or other._topo.kind == self._kind)):
                raise TypeError(f"expecting a {type(self).__name__}, got "
                                f"{type(other).__name__}")
            Intracomm.__init__(self, other)
            if other:
                topo, nid = other._topo, other._nid
                self._plan, self._nctx = other._plan, other._nctx
        else:
            Intracomm.__init__(self, context, procs=procs, name=name)
            if context is not None and topo is None:
                raise TypeError(f"{type(self).__name__}: a topology is needed")
        self._topo, self._nid = topo, nid

    def Get_topology(self):
        return UNDEFINED if self._topo is None else self._topo.kind

    topology = property(Get_topology)

    # -- new communicators keep the topology only through Dup --------------

    def Dup(self, info=None, *, timeout=None):
        """The same topology over a new communicator (its attributes copied
        as Comm.Dup does). Collective."""
        self._dupping = True
        try:
            return Intracomm.Dup(self, info, timeout=timeout)
        finally:
            self._dupping = False

    Clone = Dup

    def _derived(self, members, comm_id):
        """Dup keeps the topology; Split, Create...: plain
        intracommunicators."""
        members = list(members)
        procs = [self._procs[m] for m in members]
        ctx = self.live().derive(members, comm_id)
        if self._dupping:
            return type(self)(ctx, procs=procs, topo=self._topo)
        return Intracomm(ctx, procs=procs)

    def _close(self):
        if self._nctx is not None:
            self._nctx.close()
            self._nctx = None
        Intracomm._close(self)

    # -- neighbours ---------------------------------------------------------

    @property
    def degrees(self):
        """(indegree, outdegree)."""
        ins, outs = self._topo.neighbors()
        return len(ins), len(outs)

    @property
    def indegree(self):
        return self.degrees[0]

    @property
    def outdegree(self):
        return self.degrees[1]

    @property
    def inoutedges(self):
        """(incoming neighbours, outgoing neighbours), in slot order."""
        return self._topo.neighbors()

    @property
    def inedges(self):
        return self._topo.neighbors()[0]

    @property
    def outedges(self):
        return self._topo.neighbors()[1]

    cdef tuple _exchange_plan(self):
        self.live()
        if self._plan is None:
            self._plan = self._topo.exchange_plan()
        return self._plan

    cdef Context _neighbor_context(self):
        cdef Context ctx = self.live()
        if self._nctx is None:
            nid = self._nid
            if nid is None:
                nid = ctx.comm_id | SHADOW | NEIGHBORS
            self._nctx = ctx.derive(range(ctx.size), nid)
        return self._nctx

    # -- neighbour collectives on buffers -------------------------------------

    def Neighbor_allgather(self, sendbuf, recvbuf, *, timeout=None):
        """sendbuf to every outgoing neighbour; block j of recvbuf from
        incoming neighbour j."""
        plan = self._exchange_plan()
        cdef Message s = message(sendbuf, "sendbuf", True)
        cdef Message r = message(recvbuf, "recvbuf", False, False,
                                 len(plan[0]))
        view = _view(s.buf)
        _exchange(self._neighbor_context(), [view] * len(plan[1]),
                  _equal_blocks(r, len(plan[0]), "recvbuf"), plan, timeout)
        r.unpack()

    def Neighbor_allgatherv(self, sendbuf, recvbuf, *, timeout=None):
        """recvbuf is [buf, counts] or [buf, (counts, displs)], one block
        per incoming neighbour."""
        plan = self._exchange_plan()
        cdef Message s = message(sendbuf, "sendbuf", True)
        cdef Message r = vector_message(recvbuf, len(plan[0]), "recvbuf")
        view = _view(s.buf)
        _exchange(self._neighbor_context(), [view] * len(plan[1]),
                  _vector_blocks(r), plan, timeout)
        r.unpack()

    def Neighbor_alltoall(self, sendbuf, recvbuf, *, timeout=None):
        """Block i of sendbuf to outgoing neighbour i; block j of recvbuf
        from incoming neighbour j."""
        plan = self._exchange_plan()
        cdef Message s = message(sendbuf, "sendbuf", True, False,
                                 len(plan[1]))
        cdef Message r = message(recvbuf, "recvbuf", False, False,
                                 len(plan[0]))
        _exchange(self._neighbor_context(),
                  _equal_blocks(s, len(plan[1]), "sendbuf"),
                  _equal_blocks(r, len(plan[0]), "recvbuf"), plan, timeout)
        r.unpack()

    def Neighbor_alltoallv(self, sendbuf, recvbuf, *, timeout=None):
        plan = self._exchange_plan()
        cdef Message s = vector_message(sendbuf, len(plan[1]), "sendbuf", True)
        cdef Message r = vector_message(recvbuf, len(plan[0]), "recvbuf")
        _exchange(self._neighbor_context(), _vector_blocks(s),
                  _vector_blocks(r), plan, timeout)
        r.unpack()

    def Neighbor_alltoallw(self, sendbuf, recvbuf, *, timeout=None):
        """[buf, (counts, displs in bytes), datatypes]: a datatype per
        block; the blocks travel packed."""
        plan = self._exchange_plan()
        sends = _w_blocks(sendbuf, len(plan[1]), "sendbuf", True)
        recvs = _w_blocks(recvbuf, len(plan[0]), "recvbuf", False)
        packed = [d.pack(mem, c, at) for mem, c, at, d in sends]
        received = [np.empty(c * d.size, np.uint8) for _, c, _, d in recvs]
        _exchange(self._neighbor_context(), packed, received, plan, timeout)
        for (src, _), (mem, c, at, d), data in zip(plan[0], recvs, received):
            if src != PROC_NULL:
                d.unpack(data.view(d.np_dtype), mem, c, at)

    # -- on objects -------------------------------------------------------------

    def neighbor_allgather(self, sendobj, *, timeout=None):
        """List of the objects of the incoming neighbours (None for
        PROC_NULL ones)."""
        plan = self._exchange_plan()
        data = _dumps(sendobj)
        return self._objects([data] * len(plan[1]), plan, timeout)

    def neighbor_alltoall(self, sendobj, *, timeout=None):
        """sendobj[i] to outgoing neighbour i; the list of what the
        incoming ones sent us."""
        plan = self._exchange_plan()
        objs = list(sendobj)
        if len(objs) != len(plan[1]):
            raise ArgumentError(f"sendobj: {len(objs)} objects for "
                                f"{len(plan[1])} outgoing neighbours",
                                ERR_COUNT)
        return self._objects([_dumps(o) for o in objs], plan, timeout)

    def _objects(self, list datas, tuple plan, timeout):
        """Lengths first, then the pickles."""
        cdef Context nctx = self._neighbor_context()
        ins = plan[0]
        lengths = [array("q", (len(d),)) for d in datas]
        got = [array("q", (-1,)) for _ in ins]
        _exchange(nctx, lengths, got, plan, timeout)
        bufs = [bytearray(g[0]) if g[0] >= 0 else None for g in got]
        _exchange(nctx, datas, [b if b is not None else bytearray()
                                for b in bufs], plan, timeout)
        return [None if b is None else pickle.loads(b) for b in bufs]

    # -- nonblocking and persistent ------------------------------------------

    def _start(self, method, *args, **kwargs):
        """As Intracomm's, with a shadow of the same topology whose
        neighbour exchanges have a context of their own."""
        if self._shadow is None:
            ctx = self.live()
            self._shadow = type(self)(
                ctx.derive(range(ctx.size), ctx.comm_id | SHADOW),
                procs=self._procs, topo=self._topo,
                nid=ctx.comm_id | SHADOW | NEIGHBORS | NEIGHBORS_NB)
            self._worker = _requests.Worker(f"gloocy-nonblocking-{self.rank}")
        return Intracomm._start(self, method, *args, **kwargs)

    def Ineighbor_allgather(self, sendbuf, recvbuf):
        return self._start("Neighbor_allgather", sendbuf, recvbuf)

    def Ineighbor_allgatherv(self, sendbuf, recvbuf):
        return self._start("Neighbor_allgatherv", sendbuf, recvbuf)

    def Ineighbor_alltoall(self, sendbuf, recvbuf):
        return self._start("Neighbor_alltoall", sendbuf, recvbuf)

    def Ineighbor_alltoallv(self, sendbuf, recvbuf):
        return self._start("Neighbor_alltoallv", sendbuf, recvbuf)

    def Ineighbor_alltoallw(self, sendbuf, recvbuf):
        return self._start("Neighbor_alltoallw", sendbuf, recvbuf)

    # persistent: each Start() runs the nonblocking form again (Comm's
    # _persistent, as the other persistent collectives)

    def Neighbor_allgather_init(self, sendbuf, recvbuf, info=None):
        return self._persistent("Ineighbor_allgather", sendbuf, recvbuf)

    def Neighbor_allgatherv_init(self, sendbuf, recvbuf, info=None):
        return self._persistent("Ineighbor_allgatherv", sendbuf, recvbuf)

    def Neighbor_alltoall_init(self, sendbuf, recvbuf, info=None):
        return self._persistent("Ineighbor_alltoall", sendbuf, recvbuf)

    def Neighbor_alltoallv_init(self, sendbuf, recvbuf, info=None):
        return self._persistent("Ineighbor_alltoallv", sendbuf, recvbuf)

    def Neighbor_alltoallw_init(self, sendbuf, recvbuf, info=None):
        return self._persistent("Ineighbor_alltoallw", sendbuf, recvbuf)


def _w_blocks(spec, int n, str name, bint readonly):
    """Neighbor_alltoallw's [buf, (counts, displs), datatypes] (displs in
    bytes; with BOTTOM, addresses) -> [(memory, count, byte offset,
    datatype)] per neighbour (bufspec.w_blocks reads the spec)."""
    if n == 0:
        return []
    if isinstance(spec, (list, tuple)) and spec and spec[0] is BOTTOM:
        if len(spec) == 3:
            counts, displs = spec[1]
        else:
            counts, displs = spec[1], spec[2]
        types = spec[-1]
        if not (len(counts) == len(displs) == len(types) == n):
            raise ArgumentError(f"{name}: {n} counts, addresses and datatypes "
                                f"needed (one per neighbour), got "
                                f"{len(counts)}, {len(displs)}, {len(types)}",
                                ERR_COUNT)
        return [(_at_address(int(a), int(c), d, f"{name} block {i}"), int(c),
                 0, d) for i, (c, a, d) in enumerate(zip(counts, displs, types))]
    mem, blocks = bufspec.w_blocks(spec, n, name=name, readonly=readonly)
    return [(mem, c, at, d) for c, at, d in blocks]


# -- the topologies ---------------------------------------------------------------


cdef class Cartcomm(Topocomm):
    """A Cartesian grid of ranks (mpi4py's Cartcomm): row-major, the last
    dimension varying fastest."""

    _kind = _topology.CART

    def Get_dim(self):
        return len(self._topo.dims)

    dim = ndim = property(Get_dim)

    def Get_topo(self):
        """(dims, periods, our coordinates)."""
        t = self._topo
        return list(t.dims), list(t.periods), t.coords_of(t.rank)

    topo = property(Get_topo)

    @property
    def dims(self):
        return list(self._topo.dims)

    @property
    def periods(self):
        return list(self._topo.periods)

    @property
    def coords(self):
        return self._topo.coords_of(self._topo.rank)

    def Get_cart_rank(self, coords):
        """The rank at `coords` (periodic dimensions wrap around)."""
        return self._topo.rank_of(coords)

    def Get_coords(self, rank):
        return self._topo.coords_of(rank)

    def Shift(self, direction, disp):
        """(source, dest): the ranks `disp` steps back and ahead of us
        along `direction`; PROC_NULL off a non-periodic edge."""
        return self._topo.shift(direction, disp)

    def Sub(self, remain_dims, *, timeout=None):
        """The sub-grid of our rank keeping the dimensions flagged in
        `remain_dims` (a Cartcomm). Collective."""
        cdef Context ctx = self.live()
        color, key, dims, periods = self._topo.sub(remain_dims)
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
        return self._topo.nnodes, len(self._topo.edges)

    dims = property(Get_dims)

    @property
    def nnodes(self):
        return self._topo.nnodes

    @property
    def nedges(self):
        return len(self._topo.edges)

    def Get_topo(self):
        """(index, edges)."""
        return list(self._topo.index), list(self._topo.edges)

    topo = property(Get_topo)

    @property
    def index(self):
        return list(self._topo.index)

    @property
    def edges(self):
        return list(self._topo.edges)

    def Get_neighbors_count(self, rank):
        return len(self._topo.neighbors_of(rank))

    def Get_neighbors(self, rank):
        return list(self._topo.neighbors_of(rank))

    @property
    def nneighbors(self):
        return len(self._topo.neighbors_of(self._topo.rank))

    @property
    def neighbors(self):
        return list(self._topo.neighbors_of(self._topo.rank))


cdef class Distgraphcomm(Topocomm):
    """A distributed graph (mpi4py's Distgraphcomm): each rank knows its
    own incoming and outgoing neighbours."""

    _kind = _topology.DIST_GRAPH

    def Get_dist_neighbors_count(self):
        """(indegree, outdegree, weighted)."""
        t = self._topo
        return len(t.sources), len(t.destinations), t.weights is not None

    def Get_dist_neighbors(self):
        """(sources, destinations, (sourceweights, destweights) or None)."""
        t = self._topo
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


def _at_address(address, count, datatype, str name):
    """BOTTOM: the memory of `count` items of `datatype` at an absolute
    address (what Get_address gave)."""
    lb, extent = datatype.Get_extent()
    true_lb, true_extent = datatype.Get_true_extent()
    if true_lb < 0:
        raise NotImplementedError(f"{name}: a datatype with a negative lower "
                                  "bound at an absolute address")
    span = true_lb + (count - 1) * extent + true_extent if count else 0
    if span == 0:
        return np.zeros(0, np.uint8)
    return np.frombuffer((ctypes.c_char * span).from_address(address),
                         np.uint8)
