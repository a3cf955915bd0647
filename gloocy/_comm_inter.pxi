# Intercommunicators (mpi4py's Intercomm): two disjoint groups of ranks
# that talk to each other. An Intercomm holds three contexts over the same
# connections:
#
#   ctx    point-to-point: the remote group's ranks, then ours (last), so a
#          remote rank is a rank of this context (and Status.source is one)
#   local  our own group, in its rank order (the local halves of the
#          collectives: reductions, broadcasts, scatters inside our group)
#   union  both groups, the first group's ranks then the other's: the
#          exchanges between the groups (an alltoallv whose blocks between
#          members of one group are empty) and the leaders' messages
#
# Every member of both groups derives them with ids agreed through the
# leaders (Create_intercomm) or over the union (Dup, Split, Create, Merge).

from gloocy.groups import SIMILAR, UNEQUAL

# What a rank does in a rooted intercommunicator collective.
cdef enum:
    AT_NONE = 0      # PROC_NULL: the root's group, not the root
    AT_ROOT = 1      # ROOT: the root
    AT_LEAF = 2      # the other group: root is the root's rank there



cdef list _one(int n, int at, int64_t size):
    """n sizes, all 0 but `size` at `at`."""
    out = [0] * n
    out[at] = size
    return out


cdef class Intercomm(Comm):
    """Two disjoint groups of ranks (mpi4py's Intercomm): point-to-point
    ranks and collective roots name ranks of the remote group; collectives
    move data between the groups (each group gets what the other sent)."""

    cdef Context local              # our group's collectives
    cdef Context union              # both groups: first group, then the other
    cdef public tuple _rprocs       # the remote group's processes, by world rank
    cdef public bint _first         # our group comes first in the union
    cdef public object _lcomm       # an Intracomm over `local`

    def __init__(self, comm=None, *, _parts=None):
        """A null intercommunicator, or a second handle on `comm` (an
        Intercomm; an intracommunicator is a TypeError)."""
        cdef Intercomm other
        if self._made_in_new():
            return
        if _parts is not None:
            p2p, local, union, procs, rprocs, first = _parts
            Comm.__init__(self, p2p, procs=procs)
            self._setup(local, union, rprocs, first)
        elif comm is None or (isinstance(comm, _CommBase) and not comm):
            Comm.__init__(self)
            self._rprocs = ()
        elif isinstance(comm, Intercomm):
            other = comm
            Comm.__init__(self, comm)
            self._setup(other.local, other.union, other._rprocs, other._first)
        else:
            raise TypeError(f"expected an intercommunicator, got {comm!r}")

    cdef _setup(self, Context local, Context union, tuple rprocs, bint first):
        self.local, self.union = local, union
        self._rprocs, self._first = rprocs, first
        self._lcomm = Intracomm(local, procs=self._procs)

    cdef Context _local(self):
        if self.local is None:
            _NULL_CONTEXT.rank              # raises: a null communicator
        return self.local

    cdef Context _union(self):
        if self.union is None:
            _NULL_CONTEXT.rank
        return self.union

    cdef int _loff(self):
        return 0 if self._first else len(self._rprocs)

    cdef int _roff(self):
        return self.local.size if self._first else 0

    # -- identity ----------------------------------------------------------

    @property
    def rank(self):
        """Our rank in our (the local) group."""
        return self._local().rank

    @property
    def size(self):
        """The size of our (the local) group."""
        return self._local().size

    def Get_rank(self):
        return self._local().rank

    @property
    def timeout(self):
        """Default deadline of every call, in seconds."""
        return self._ctx.timeout

    @timeout.setter
    def timeout(self, seconds):
        if not seconds > 0:
            raise ValueError(f"timeout must be positive, got {seconds!r}")
        for ctx in (self._ctx, self._local(), self.union):
            ctx.timeout = float(seconds)

    def Get_size(self):
        return self._local().size

    def Get_remote_size(self):
        """The size of the other group."""
        self._local()
        return len(self._rprocs)

    def Get_remote_group(self):
        """The other group (our rank in it: UNDEFINED)."""
        cdef Context local = self._local()
        return Group(self._rprocs, self._procs[local.rank])

    remote_size = property(Get_remote_size)
    remote_group = property(Get_remote_group)

    def Is_inter(self):
        return True

    def Is_intra(self):
        return False

    is_inter = property(Is_inter)
    is_intra = property(Is_intra)

    def __repr__(self):
        if not self:
            return "<gloocy.Intercomm NULL>"
        return (f"<gloocy.Intercomm rank {self.rank} of {self.size}, remote "
                f"size {len(self._rprocs)}>")

    def Compare(self, comm):
        """IDENT (the same), CONGRUENT (same groups, same order), SIMILAR
        (same processes) or UNEQUAL."""
        self._ctx.rank, comm._ctx.rank      # COMM_NULL raises here
        if comm is self or comm._ctx is self._ctx:
            return IDENT
        if not isinstance(comm, Intercomm):
            return UNEQUAL
        found = {self.Get_group().Compare(comm.Get_group()),
                 self.Get_remote_group().Compare(comm.Get_remote_group())}
        if found == {IDENT}:
            return CONGRUENT
        return UNEQUAL if UNEQUAL in found else SIMILAR

    # Point-to-point: Comm's, over the point-to-point context, once dest
    # and source are checked to name remote ranks (that context also holds
    # this rank, after them).
    Send = _remote_ranks(Comm.Send, 1, None)
    Ssend = _remote_ranks(Comm.Ssend, 1, None)
    Rsend = _remote_ranks(Comm.Rsend, 1, None)
    Bsend = _remote_ranks(Comm.Bsend, 1, None)
    Isend = _remote_ranks(Comm.Isend, 1, None)
    Issend = _remote_ranks(Comm.Issend, 1, None)
    Irsend = _remote_ranks(Comm.Irsend, 1, None)
    Ibsend = _remote_ranks(Comm.Ibsend, 1, None)
    Send_init = _remote_ranks(Comm.Send_init, 1, None)
    Ssend_init = _remote_ranks(Comm.Ssend_init, 1, None)
    Bsend_init = _remote_ranks(Comm.Bsend_init, 1, None)
    Rsend_init = _remote_ranks(Comm.Rsend_init, 1, None)
    send = _remote_ranks(Comm.send, 1, None)
    ssend = _remote_ranks(Comm.ssend, 1, None)
    bsend = _remote_ranks(Comm.bsend, 1, None)
    isend = _remote_ranks(Comm.isend, 1, None)
    issend = _remote_ranks(Comm.issend, 1, None)
    ibsend = _remote_ranks(Comm.ibsend, 1, None)
    Recv = _remote_ranks(Comm.Recv, None, 1)
    Irecv = _remote_ranks(Comm.Irecv, None, 1)
    Recv_init = _remote_ranks(Comm.Recv_init, None, 1)
    recv = _remote_ranks(Comm.recv, None, 1)
    irecv = _remote_ranks(Comm.irecv, None, 1)
    Probe = _remote_ranks(Comm.Probe, None, 0)
    Iprobe = _remote_ranks(Comm.Iprobe, None, 0)
    probe = _remote_ranks(Comm.probe, None, 0)
    iprobe = _remote_ranks(Comm.iprobe, None, 0)
    Sendrecv = _remote_ranks(Comm.Sendrecv, 1, 4)
    sendrecv = _remote_ranks(Comm.sendrecv, 1, 4)
    Sendrecv_replace = _remote_ranks(Comm.Sendrecv_replace, 1, 3)
    Isendrecv = _remote_ranks(Comm.Isendrecv, 1, 4)
    Isendrecv_replace = _remote_ranks(Comm.Isendrecv_replace, 1, 3)
    Mprobe = _remote_ranks(Comm.Mprobe, None, 0)
    Improbe = _remote_ranks(Comm.Improbe, None, 0)
    mprobe = _remote_ranks(Comm.mprobe, None, 0)
    improbe = _remote_ranks(Comm.improbe, None, 0)
    Psend_init = _remote_ranks(Comm.Psend_init, 2, None)
    Precv_init = _remote_ranks(Comm.Precv_init, None, 2)

    Scan = _not_on_intercomm("Scan")
    Exscan = _not_on_intercomm("Exscan")
    scan = _not_on_intercomm("scan")
    exscan = _not_on_intercomm("exscan")
    Iscan = _not_on_intercomm("Iscan")
    Iexscan = _not_on_intercomm("Iexscan")
    Create_group = _not_on_intercomm("Create_group")

    # -- lifetime ------------------------------------------------------------

    def _close(self):
        if self.local is not None:
            self.local.close()
            self.union.close()
            self.local = self.union = None
            self._lcomm = None
        Comm._close(self)

    def __reduce__(self):
        raise ValueError(f"cannot pickle {self!r}")

    # -- new communicators ---------------------------------------------------

    cdef list _ranks_of(self, Context c, members):
        return [c.world_rank(i) for i in members]

    cdef tuple _agree(self, mine, timeout):
        """Every union member's `mine`, by union rank, and an id none of
        them has used."""
        cdef Context union = self._union()
        table = allgather_objects(union, (mine, union.links.next_id), timeout,
                                  OBJ_ALLGATHER)
        return [t[0] for t in table], max(t[1] for t in table)

    cdef object _between(self, list lmembers, list rmembers, uint32_t uid):
        """The Intercomm between our ranks lmembers and the remote ranks
        rmembers (both non-empty, ours among lmembers)."""
        return _intercomm(self.union, self._ranks_of(self.local, lmembers),
                          self._ranks_of(self.ctx, rmembers),
                          tuple(self._procs[i] for i in lmembers),
                          tuple(self._rprocs[i] for i in rmembers),
                          self._first, uid)

    def Dup(self, info=None, *, timeout=None):
        """An intercommunicator of the same groups. Collective."""
        cdef Context local = self._local()
        uid = _new_id(self.union, timeout)
        return self._between(list(range(local.size)),
                             list(range(len(self._rprocs))), uid)

    Clone = Dup

    def Split(self, color=0, key=0, *, timeout=None):
        """Each group splits by `color` (ranked by key, then rank); the
        parts of one color in both groups form a new intercommunicator
        (COMM_NULL for UNDEFINED, or when the other group has no part of
        that color). Collective."""
        cdef Context local = self._local()
        table, uid = self._agree((color, key), timeout)
        if color == UNDEFINED:
            return COMM_NULL
        loff, roff = self._loff(), self._roff()
        pick = lambda off, n: sorted(
            (i for i in range(n) if table[off + i][0] == color),
            key=lambda i: (table[off + i][1], i))
        lmembers = pick(loff, local.size)
        rmembers = pick(roff, len(self._rprocs))
        if not rmembers:
            return COMM_NULL
        return self._between(lmembers, rmembers, uid)

    def Split_type(self, split_type, key=0, info=None, *, timeout=None):
        """Every split type of Intracomm.Split_type, with the hosts of both
        groups: the parts of one host (COMM_TYPE_SHARED, or a guided type
        naming mpi_shared_memory) in both groups form a new
        intercommunicator; COMM_TYPE_HW_UNGUIDED gives COMM_NULL when both
        groups are on one host. Collective."""
        _check_split_type(split_type)
        hosts = allgather_objects(self._union(), host_identity(), timeout,
                                  OBJ_ALLGATHER)
        color = _split_type_color(split_type, hosts, self._loff() + self.rank,
                                  info)
        return self.Split(color, key, timeout=timeout)

    def Create(self, group, *, timeout=None):
        """Each group passes a group of its own processes: the
        intercommunicator between the two (COMM_NULL outside them, or when
        either is empty). Collective over both groups."""
        cdef Context local = self._local()
        members = _members_of(self._procs, group)
        table, uid = self._agree(members, timeout)
        rmembers = table[self._roff()]
        if local.rank not in members or not rmembers:
            return COMM_NULL
        return self._between(members, list(rmembers), uid)

    def Merge(self, high=False, *, timeout=None):
        """An intracommunicator of both groups: the group passing
        high=False first (when both pass the same, the group created
        first). Collective."""
        cdef Context local = self._local()
        table, uid = self._agree(bool(high), timeout)
        mine, theirs = table[self._loff()], table[self._roff()]
        ours_first = (not mine and theirs) or (mine == theirs and self._first)
        lr = self._ranks_of(local, range(local.size))
        rr = self._ranks_of(self.ctx, range(len(self._rprocs)))
        order = lr + rr if ours_first else rr + lr
        procs = (self._procs + self._rprocs if ours_first
                 else self._rprocs + self._procs)
        return Intracomm(_context_over(self.union, order, uid), procs=procs)

    # -- the exchanges between the groups ---------------------------------------

    cdef int _where(self, root) except -1:
        """What we do in a rooted collective: AT_ROOT, AT_NONE, AT_LEAF."""
        cdef int n = len(self._rprocs)
        self._local()
        if root == ROOT:
            return AT_ROOT
        if root == PROC_NULL:
            return AT_NONE
        if 0 <= root < n:
            return AT_LEAF
        raise ArgumentError(f"root: {root!r} is neither MPI.ROOT (the root), "
                            f"MPI.PROC_NULL (the root's group) nor a rank of "
                            f"the remote group (size {n})", ERR_ROOT)

    cdef _swap(self, sendbuf, ssizes, soffs, recvbuf, rsizes, roffs, timeout,
               Message out=None, bint start=False, object after=None):
        """One alltoallv over the union: we send ssizes[i] bytes at soffs[i]
        of sendbuf to remote rank i, and receive rsizes[i] bytes from it at
        roffs[i] of recvbuf (None: nothing); then `out` is unpacked (or
        after() runs). start: as a schedule (its request), else done now."""
        cdef Context union = self._union()
        cdef int n = union.size, rs = len(self._rprocs), off = self._roff(), i
        cdef list S = [0] * n, SO = [0] * n, R = [0] * n, RO = [0] * n
        for i in range(rs):
            if ssizes is not None:
                S[off + i], SO[off + i] = ssizes[i], soffs[i]
            if rsizes is not None:
                R[off + i], RO[off + i] = rsizes[i], roffs[i]
        sendbuf = b"" if ssizes is None else sendbuf
        recvbuf = bytearray(0) if rsizes is None else recvbuf
        if after is None:
            after = _finish(out)
        if start:
            return nbc_request(union.ialltoallv(sendbuf, S, SO, recvbuf, R,
                                                RO), (out, sendbuf, recvbuf),
                               after)
        union.alltoallv(sendbuf, S, SO, recvbuf, R, RO, timeout, None)
        after()

    cdef list _swap_objects(self, list parts, timeout):
        """parts[i] (bytes, or None: nothing) to remote rank i; what each
        remote rank sent us (None: nothing)."""
        cdef int rs = len(self._rprocs), i
        sent = np.array([0 if p is None else len(p) for p in parts], np.int64)
        got = np.zeros(rs, np.int64)
        eights = [8] * rs
        at = [8 * i for i in range(rs)]
        self._swap(sent, eights, at, got, eights, at, timeout)
        sizes, rsizes = sent.tolist(), got.tolist()
        out = bytearray(sum(rsizes))
        self._swap(b"".join(p for p in parts if p is not None), sizes,
                   _starts(sizes), out, rsizes, _starts(rsizes), timeout)
        view, objs, start = memoryview(out), [], 0
        for i in range(rs):
            objs.append(_pickle_loads(view[start:start + rsizes[i]])
                        if rsizes[i] else None)
            start += rsizes[i]
        return objs

    # -- buffer collectives ------------------------------------------------------
    # Each is an alltoallv over the union (_swap); its nonblocking form the
    # same as a schedule (start=True).

    def Barrier(self, *, timeout=None):
        """Return once every rank of both groups has called Barrier."""
        self._union().barrier(timeout)

    def Ibarrier(self):
        return nbc_request(self._union().ibarrier(), None, None)

    def Bcast(self, buf, root=0, *, timeout=None, algorithm=None):
        """The root's buf (root=ROOT there; PROC_NULL in its group) into buf
        of every rank of the other group (root = its rank there)."""
        self._bcast(buf, root, timeout, False)

    def Ibcast(self, buf, root=0):
        return self._bcast(buf, root, None, True)

    cdef _bcast(self, buf, root, timeout, bint start):
        cdef int where = self._where(root), rs = len(self._rprocs)
        cdef Message m
        if where == AT_ROOT:
            m = message(buf, "buf", True)
            return self._swap(m.buf, [m.buf.nbytes] * rs, [0] * rs, None,
                              None, None, timeout, None, start)
        if where == AT_LEAF:
            m = message(buf, "buf")
            return self._swap(None, None, None, m.buf, _one(rs, root,
                              m.buf.nbytes), [0] * rs, timeout, m, start)
        return self._swap(None, None, None, None, None, None, timeout, None,
                          start)

    def Gather(self, sendbuf, recvbuf, root=0, *, timeout=None,
               algorithm=None):
        """The other group's sendbufs, in its rank order, into the root's
        recvbuf."""
        self._gather(sendbuf, recvbuf, root, False, timeout, False)

    def Igather(self, sendbuf, recvbuf, root=0):
        return self._gather(sendbuf, recvbuf, root, False, None, True)

    def Gatherv(self, sendbuf, recvbuf, root=0, *, timeout=None,
                algorithm=None):
        self._gather(sendbuf, recvbuf, root, True, timeout, False)

    def Igatherv(self, sendbuf, recvbuf, root=0):
        return self._gather(sendbuf, recvbuf, root, True, None, True)

    cdef _gather(self, sendbuf, recvbuf, root, bint vector, timeout,
                 bint start):
        cdef int where = self._where(root), rs = len(self._rprocs)
        cdef Message r, s
        if where == AT_ROOT:
            if vector:
                r = vector_message(recvbuf, rs, "recvbuf")
                sizes, offs = r.sizes, r.offsets
            else:
                r = message(recvbuf, "recvbuf", False, False, rs)
                _blocks(r, rs, "recvbuf")
                b = r.buf.nbytes // rs
                sizes, offs = [b] * rs, [i * b for i in range(rs)]
            return self._swap(None, None, None, r.buf, sizes, offs, timeout,
                              r, start)
        if where == AT_NONE:
            return self._swap(None, None, None, None, None, None, timeout,
                              None, start)
        s = message(sendbuf, "sendbuf", True)
        return self._swap(s.buf, _one(rs, root, s.buf.nbytes), [0] * rs,
                          None, None, None, timeout, None, start)

    def Scatter(self, sendbuf, recvbuf, root=0, *, timeout=None,
                algorithm=None):
        """Block i of the root's sendbuf into rank i of the other group."""
        self._scatter(sendbuf, recvbuf, root, False, timeout, False)

    def Iscatter(self, sendbuf, recvbuf, root=0):
        return self._scatter(sendbuf, recvbuf, root, False, None, True)

    def Scatterv(self, sendbuf, recvbuf, root=0, *, timeout=None,
                 algorithm=None):
        self._scatter(sendbuf, recvbuf, root, True, timeout, False)

    def Iscatterv(self, sendbuf, recvbuf, root=0):
        return self._scatter(sendbuf, recvbuf, root, True, None, True)

    cdef _scatter(self, sendbuf, recvbuf, root, bint vector, timeout,
                  bint start):
        cdef int where = self._where(root), rs = len(self._rprocs)
        cdef Message r, s
        if where == AT_ROOT:
            if vector:
                s = vector_message(sendbuf, rs, "sendbuf", True)
                sizes, offs = s.sizes, s.offsets
            else:
                s = message(sendbuf, "sendbuf", True, False, rs)
                _blocks(s, rs, "sendbuf")
                b = s.buf.nbytes // rs
                sizes, offs = [b] * rs, [i * b for i in range(rs)]
            return self._swap(s.buf, sizes, offs, None, None, None, timeout,
                              None, start)
        if where == AT_NONE:
            return self._swap(None, None, None, None, None, None, timeout,
                              None, start)
        r = message(recvbuf, "recvbuf")
        return self._swap(None, None, None, r.buf, _one(rs, root,
                          r.buf.nbytes), [0] * rs, timeout, r, start)

    def Allgather(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        """Every rank gets the other group's sendbufs, in its rank order."""
        self._allgather(sendbuf, recvbuf, False, timeout, False)

    def Iallgather(self, sendbuf, recvbuf):
        return self._allgather(sendbuf, recvbuf, False, None, True)

    def Allgatherv(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        self._allgather(sendbuf, recvbuf, True, timeout, False)

    def Iallgatherv(self, sendbuf, recvbuf):
        return self._allgather(sendbuf, recvbuf, True, None, True)

    cdef _allgather(self, sendbuf, recvbuf, bint vector, timeout,
                    bint start):
        cdef int rs = len(self._rprocs)
        cdef Message s = message(sendbuf, "sendbuf", True)
        cdef Message r
        if vector:
            r = vector_message(recvbuf, rs, "recvbuf")
            sizes, offs = r.sizes, r.offsets
        else:
            r = message(recvbuf, "recvbuf", False, False, rs)
            _blocks(r, rs, "recvbuf")
            b = r.buf.nbytes // rs
            sizes, offs = [b] * rs, [i * b for i in range(rs)]
        return self._swap(s.buf, [s.buf.nbytes] * rs, [0] * rs, r.buf, sizes,
                          offs, timeout, r, start)

    def Alltoall(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        """Block i of sendbuf to rank i of the other group; its block for us
        into block i of recvbuf."""
        self._alltoall(sendbuf, recvbuf, False, timeout, False)

    def Ialltoall(self, sendbuf, recvbuf):
        return self._alltoall(sendbuf, recvbuf, False, None, True)

    def Alltoallv(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        self._alltoall(sendbuf, recvbuf, True, timeout, False)

    def Ialltoallv(self, sendbuf, recvbuf):
        return self._alltoall(sendbuf, recvbuf, True, None, True)

    cdef _alltoall(self, sendbuf, recvbuf, bint vector, timeout, bint start):
        cdef int rs = len(self._rprocs)
        cdef Message s, r
        if vector:
            s = vector_message(sendbuf, rs, "sendbuf", True)
            r = vector_message(recvbuf, rs, "recvbuf")
            return self._swap(s.buf, s.sizes, s.offsets, r.buf, r.sizes,
                              r.offsets, timeout, r, start)
        s = message(sendbuf, "sendbuf", True, False, rs)
        r = message(recvbuf, "recvbuf", False, False, rs)
        _blocks(s, rs, "sendbuf")
        _blocks(r, rs, "recvbuf")
        sb, rb = s.buf.nbytes // rs, r.buf.nbytes // rs
        return self._swap(s.buf, [sb] * rs, [i * sb for i in range(rs)], r.buf,
                          [rb] * rs, [i * rb for i in range(rs)], timeout, r,
                          start)

    def Ialltoallw(self, sendbuf, recvbuf):
        packed, ssizes, received, rsizes, unpack = _alltoallw_packed(
            sendbuf, recvbuf, len(self._rprocs))
        return self._swap(packed, ssizes, _ends(ssizes), received, rsizes,
                          _ends(rsizes), None, None, True, unpack)

    # -- reductions: schedules over the union (_schedule_inter.pxi); the
    # blocking forms wait for theirs -----------------------------------------------

    def Reduce(self, sendbuf, recvbuf, op=_ops.SUM, root=0, *, timeout=None,
               algorithm=None):
        """op over the other group's sendbufs into the root's recvbuf."""
        _waited(self.Ireduce(sendbuf, recvbuf, op, root), timeout)

    def Allreduce(self, sendbuf, recvbuf, op=_ops.SUM, *, timeout=None,
                  algorithm=None):
        """recvbuf = op over the other group's sendbufs."""
        _waited(self.Iallreduce(sendbuf, recvbuf, op), timeout)

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=_ops.SUM,
                       *, timeout=None, algorithm=None):
        """op over the other group's sendbufs, scattered over our group:
        rank i gets recvcounts[i] items (default: each rank's recvbuf)."""
        _waited(self.Ireduce_scatter(sendbuf, recvbuf, recvcounts, op),
                timeout)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=_ops.SUM, *,
                             timeout=None, algorithm=None):
        """op over the other group's sendbufs, in equal blocks over our
        group (block i to rank i)."""
        _waited(self.Ireduce_scatter_block(sendbuf, recvbuf, op), timeout)

    # -- object collectives ------------------------------------------------------

    def barrier(self, *, timeout=None):
        self.Barrier(timeout=timeout)

    def bcast(self, obj=None, root=0, *, timeout=None):
        """The root's obj on every rank of the other group (None in the
        root's group)."""
        cdef int where = self._where(root), rs = len(self._rprocs)
        parts = [_dumps(obj)] * rs if where == AT_ROOT else [None] * rs
        got = self._swap_objects(parts, timeout)
        return got[root] if where == AT_LEAF else None

    def gather(self, obj, root=0, *, timeout=None):
        """At the root: the list of the other group's objs; None elsewhere."""
        cdef int where = self._where(root), rs = len(self._rprocs)
        parts = [None] * rs
        if where == AT_LEAF:
            parts[root] = _dumps(obj)
        got = self._swap_objects(parts, timeout)
        return got if where == AT_ROOT else None

    def scatter(self, objs, root=0, *, timeout=None):
        """objs[i] of the root's list (one per remote rank) to remote rank
        i."""
        cdef int where = self._where(root), rs = len(self._rprocs)
        parts = [None] * rs
        if where == AT_ROOT:
            objs = [None] * rs if objs is None else list(objs)
            if len(objs) != rs:
                raise ValueError(f"objs: expected {rs} items (the remote "
                                 f"group's size) at the root, got {len(objs)}")
            parts = [_dumps(o) for o in objs]
        got = self._swap_objects(parts, timeout)
        return got[root] if where == AT_LEAF else None

    def allgather(self, obj, *, timeout=None):
        """The list of the other group's objs, in its rank order."""
        self._local()
        return self._swap_objects([_dumps(obj)] * len(self._rprocs), timeout)

    def alltoall(self, objs, *, timeout=None):
        """objs[i] to remote rank i; what each remote rank sent us."""
        cdef int rs = len(self._rprocs)
        self._local()
        objs = [None] * rs if objs is None else list(objs)
        if len(objs) != rs:
            raise ValueError(f"objs: expected {rs} items (the remote group's "
                             f"size), got {len(objs)}")
        return self._swap_objects([_dumps(o) for o in objs], timeout)

    def reduce(self, obj, op=_ops.SUM, root=0, *, timeout=None):
        """At the root: op over the other group's objs, in its rank order."""
        self._where(root)
        _check_callable(op)
        objs = self.gather(obj, root, timeout=timeout)
        return None if objs is None else fold_objects(objs, op)

    def allreduce(self, obj, op=_ops.SUM, *, timeout=None):
        """op over the other group's objs, in its rank order."""
        _check_callable(op)
        return fold_objects(self.allgather(obj, timeout=timeout), op)

    # -- the reductions' schedules, and Idup (the union's id agreement as a
    # schedule) ------------------------------------------------------------------

    cdef tuple _group(self):
        """(our group's size, our rank in it, its first union rank, the
        union rank of the other group's leader)."""
        cdef Context local = self._local()
        return local.size, local.rank, self._loff(), self._roff()

    cdef object _user_reduction(self, op, Message m):
        """The core's UserOp for user op `op` on m's elements (None for a
        predefined op)."""
        if _op_code(op) != OP_USER:
            return None
        u = _kernel_op(op, m)
        if u is None:
            raise NotImplementedError(
                "op: a user op on elements the core has no type for (a "
                "datatype of mixed fields), on an intercommunicator")
        return u

    cdef object _started(self, start, op, Message r, Message s, avg):
        """Request of the core schedule start() makes (set_user_op around
        it for a user op); then r is unpacked (`avg` divided first, for
        AVG, by the other group's size)."""
        u = self._user_reduction(op, r if r is not None else s)
        if op is AVG:
            _core.check_floating(avg)
        if u is not None:
            _core.set_user_op(u)
        try:
            h = start()
        finally:
            if u is not None:
                _core.set_user_op(None)
        return nbc_request(h, (r, s, u), _finish(
            r, avg if op is AVG else None, len(self._rprocs)))

    def Iallreduce(self, sendbuf, recvbuf, op=_ops.SUM):
        """recvbuf = op over the other group's sendbufs."""
        lsize, lrank, loff, rleader = self._group()
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        cdef Message r = message(recvbuf, "recvbuf")
        return self._started(lambda: start_inter_allreduce(
            self.union, lsize, lrank, loff, rleader,
            None if s is None else s.buf, r.buf, _op_code(op)), op, r, s,
            r.buf)

    def Ireduce(self, sendbuf, recvbuf, op=_ops.SUM, root=0):
        """op over the other group's sendbufs into the root's recvbuf."""
        cdef int where = self._where(root)
        lsize, lrank, loff, rleader = self._group()
        cdef Message s = None, r = None
        if where == AT_NONE:            # (counted, moves nothing)
            return nbc_request(start_inter_reduce(
                self.union, lsize, lrank, loff, -1, 0, None, None, 0), None,
                None)
        if where == AT_ROOT:
            r = message(recvbuf, "recvbuf")
        else:
            s = message(sendbuf, "sendbuf", True, True)
        return self._started(lambda: start_inter_reduce(
            self.union, lsize, lrank, loff,
            rleader if where == AT_ROOT else rleader + root,
            1 if where == AT_ROOT else 2, None if s is None else s.buf,
            None if r is None else r.buf, _op_code(op)), op, r, s,
            None if r is None else r.buf)

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=_ops.SUM):
        """op over the other group's sendbufs, scattered over our group:
        rank i gets recvcounts[i] items (default: each rank's recvbuf)."""
        lsize, lrank, loff, rleader = self._group()
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        cdef Message r = message(recvbuf, "recvbuf")
        if recvcounts is None:
            counts = self._lcomm.allgather(r.count)
        else:
            counts = _counts(recvcounts, lsize, "recvcounts")
        items = r.buf.count // r.count if r.count else 1    # elements per item
        return self._started(lambda: start_inter_reduce_scatter(
            self.union, lsize, lrank, loff, rleader,
            None if s is None else s.buf, r.buf, [n * items for n in counts],
            _op_code(op)), op, r, s, r.data[:counts[lrank] * items])

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=_ops.SUM):
        """op over the other group's sendbufs, in equal blocks over our
        group (block i to rank i)."""
        cdef Message r = message(recvbuf, "recvbuf")
        return self.Ireduce_scatter(sendbuf, recvbuf,
                                    [r.count] * self._local().size, op)

    def Idup(self, info=None):
        """(intercommunicator, request): the new intercommunicator of a
        Dup, usable once the request is done (null until then)."""
        cdef Intercomm new = Intercomm()
        copied = self._attrs.copy(self) if self._attrs is not None else None
        cdef Context local = self._local()

        def adopt(uid):
            new._adopt(self._between(list(range(local.size)),
                                     list(range(len(self._rprocs))), uid),
                       copied)
        return new, _start_new_id(self._union(), adopt)

    def Idup_with_info(self, info):
        return self.Idup(info)

    cdef _adopt(self, Intercomm made, attrs):
        """Become the intercommunicator `made` (Idup's result)."""
        self._bind(made._ctx)
        self._procs, self._attrs = made._procs, attrs
        self._setup(made.local, made.union, made._rprocs, made._first)

    # -- MPI-4 -------------------------------------------------------------

    @classmethod
    def Create_from_groups(cls, local_group, local_leader, remote_group,
                           remote_leader, stringtag="org.mpi4py", info=None,
                           errhandler=None, *, timeout=None):
        """The intercommunicator between two disjoint groups of the world's
        processes (ours: local_group), with no parent communicator.
        Collective over both groups, which all pass the same `stringtag`."""
        wcomm, world = _world("Intercomm.Create_from_groups")
        for group, leader, name in ((local_group, local_leader, "local"),
                                    (remote_group, remote_leader, "remote")):
            if not isinstance(group, Group):
                raise TypeError(f"{name}_group: expected a Group, got "
                                f"{group!r}")
            if not 0 <= leader < group.Get_size():
                raise ArgumentError(f"{name}_leader: {leader} is not a rank of "
                                    f"{name}_group (size {group.Get_size()})",
                                    ERR_RANK)
        cdef Context wctx = world
        wprocs = wcomm._procs
        if wprocs[wctx.rank] not in local_group._procs:
            raise ArgumentError("local_group: this process is not in it",
                                ERR_GROUP)
        if set(local_group._procs) & set(remote_group._procs):
            raise ArgumentError("local_group and remote_group share "
                                "processes", ERR_GROUP)
        mine = _world_ranks(wctx, wprocs, local_group._procs)
        theirs = _world_ranks(wctx, wprocs, remote_group._procs)
        first = mine[0] < theirs[0]
        uid = _agreed_id(wctx, mine + theirs if first else theirs + mine,
                         stringtag, timeout)
        return _intercomm(wctx, mine, theirs, tuple(local_group._procs),
                          tuple(remote_group._procs), first, uid)


cdef object _waited(request, timeout):
    """A blocking call: the schedule of its nonblocking form, waited for
    within `timeout`."""
    (<NbcRequest>request)._wait(None, timeout)
