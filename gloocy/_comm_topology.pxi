# Process topologies (mpi4py's Topocomm and, in _comm_cart_graph.pxi,
# Cartcomm, Graphcomm, Distgraphcomm): the neighbours of a rank and the
# neighbour collectives over them (the exchange: _neighbors.pxi). The
# arithmetic (shapes, coordinates, neighbour lists, argument checks, which
# tag each block travels with) is gloocy.topology's.

from gloocy import topology as _topology

include "_neighbors.pxi"


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
        if self._made_in_new():
            return
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
        return UNDEFINED if self._topo is None else self._t().kind

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
            return self._new_like((ctx,), {"procs": procs, "topo": self._topo})
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
        ins, outs = self._t().neighbors()
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
        return self._t().neighbors()

    @property
    def inedges(self):
        return self._t().neighbors()[0]

    @property
    def outedges(self):
        return self._t().neighbors()[1]

    cdef object _t(self):
        """The topology; ArgumentError (ERR_COMM) once freed (or null)."""
        self.live()
        return self._topo

    cdef tuple _exchange_plan(self):
        self.live()
        if self._plan is None:
            self._plan = self._t().exchange_plan()
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
    # Each blocking one and its nonblocking form (a schedule: start=True)
    # cut the same blocks (_neighbors.pxi).

    def Neighbor_allgather(self, sendbuf, recvbuf, *, timeout=None):
        """sendbuf to every outgoing neighbour; block j of recvbuf from
        incoming neighbour j."""
        self._allgather(sendbuf, recvbuf, False, timeout, False)

    def Ineighbor_allgather(self, sendbuf, recvbuf):
        return self._allgather(sendbuf, recvbuf, False, None, True)

    def Neighbor_allgatherv(self, sendbuf, recvbuf, *, timeout=None):
        """recvbuf is [buf, counts] or [buf, (counts, displs)], one block
        per incoming neighbour."""
        self._allgather(sendbuf, recvbuf, True, timeout, False)

    def Ineighbor_allgatherv(self, sendbuf, recvbuf):
        return self._allgather(sendbuf, recvbuf, True, None, True)

    cdef _allgather(self, sendbuf, recvbuf, bint vector, timeout, bint start):
        plan = self._exchange_plan()
        cdef Message s = message(sendbuf, "sendbuf", True)
        cdef Message r = (vector_message(recvbuf, len(plan[0]), "recvbuf")
                          if vector else
                          message(recvbuf, "recvbuf", False, False,
                                  len(plan[0])))
        view = _view(s.buf)
        _keep_untouched(r, plan[0])
        return self._move([view] * len(plan[1]), _vector_blocks(r) if vector
                          else _equal_blocks(r, len(plan[0]), "recvbuf"),
                          timeout, start, (s, r), _finish(r))

    def Neighbor_alltoall(self, sendbuf, recvbuf, *, timeout=None):
        """Block i of sendbuf to outgoing neighbour i; block j of recvbuf
        from incoming neighbour j."""
        self._alltoall(sendbuf, recvbuf, False, timeout, False)

    def Ineighbor_alltoall(self, sendbuf, recvbuf):
        return self._alltoall(sendbuf, recvbuf, False, None, True)

    def Neighbor_alltoallv(self, sendbuf, recvbuf, *, timeout=None):
        self._alltoall(sendbuf, recvbuf, True, timeout, False)

    def Ineighbor_alltoallv(self, sendbuf, recvbuf):
        return self._alltoall(sendbuf, recvbuf, True, None, True)

    cdef _alltoall(self, sendbuf, recvbuf, bint vector, timeout, bint start):
        plan = self._exchange_plan()
        cdef int nin = len(plan[0]), nout = len(plan[1])
        cdef Message s, r
        if vector:
            s = vector_message(sendbuf, nout, "sendbuf", True)
            r = vector_message(recvbuf, nin, "recvbuf")
            sends, recvs = _vector_blocks(s), _vector_blocks(r)
        else:
            s = message(sendbuf, "sendbuf", True, False, nout)
            r = message(recvbuf, "recvbuf", False, False, nin)
            sends = _equal_blocks(s, nout, "sendbuf")
            recvs = _equal_blocks(r, nin, "recvbuf")
        _keep_untouched(r, plan[0])
        return self._move(sends, recvs, timeout, start, (s, r), _finish(r))

    def Neighbor_alltoallw(self, sendbuf, recvbuf, *, timeout=None):
        """[buf, (counts, displs in bytes), datatypes]: a datatype per
        block; the blocks travel packed."""
        self._alltoallw(sendbuf, recvbuf, timeout, False)

    def Ineighbor_alltoallw(self, sendbuf, recvbuf):
        return self._alltoallw(sendbuf, recvbuf, None, True)

    cdef _alltoallw(self, sendbuf, recvbuf, timeout, bint start):
        plan = self._exchange_plan()
        sends = _w_blocks(sendbuf, len(plan[1]), "sendbuf", True)
        recvs = _w_blocks(recvbuf, len(plan[0]), "recvbuf", False)
        packed = [d.pack(mem, c, at) for mem, c, at, d in sends]
        received = [np.empty(c * d.size, np.uint8) for _, c, _, d in recvs]

        def unpack():
            for (src, _), (mem, c, at, d), data in zip(plan[0], recvs,
                                                       received):
                if src != PROC_NULL:
                    d.unpack(data.view(d.np_dtype), mem, c, at)
        return self._move(packed, received, timeout, start,
                          (packed, received), unpack)

    cdef _move(self, list sends, list recvs, timeout, bint start, keep,
               after):
        """The exchange of these blocks (by the plan's slots), then
        after(): now, or (start) as a schedule, whose request this is."""
        cdef Context nctx = self._neighbor_context()
        plan = self._exchange_plan()
        if start:
            return nbc_request(_start_exchange(nctx, sends, recvs, plan),
                               keep, after)
        _exchange(nctx, sends, recvs, plan, timeout)
        after()

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
        return [None if b is None else _pickle_loads(b) for b in bufs]

    # -- nonblocking and persistent ------------------------------------------

    def Idup(self, info=None):
        """(communicator of the same topology, request), as Intracomm's."""
        new, request = Intracomm.Idup(self, info)
        new._topo = self._topo
        return new, request

    Idup_with_info = Idup

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


include "_comm_cart_graph.pxi"
