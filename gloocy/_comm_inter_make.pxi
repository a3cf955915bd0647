# Making intercommunicators (included before _comm_inter.pxi): the
# contexts over a subset of the shared connections, the leaders' handshake
# of Create_intercomm, the checks that name remote ranks, and the MPI-4
# constructors' ids agreed over a transient context.


from gloocy.errors import ERR_RANK, ERR_ROOT


cdef Context _context_over(Context base, list ranks, uint32_t comm_id):
    """A context of the processes `ranks` (ranks of base's connections, ours
    among them) over base's connections, tagged `comm_id`: an id every
    member agreed on and none of them has used."""
    cdef Links links = base.links
    if base.closed:
        raise ArgumentError("communicator: it is closed", ERR_COMM)
    if links.next_id <= comm_id < SHADOW:
        links.next_id = comm_id + 1
    return Context(ranks.index(links.rank), len(ranks), links=links,
                   world=ranks, comm_id=comm_id, timeout=base.timeout,
                   segment=base.segment, spin_us=base.spin_ns // 1000,
                   small_allreduce=base.small_allreduce)


cdef object _intercomm(Context base, list mine, list theirs, tuple procs,
                       tuple rprocs, bint first, uint32_t uid):
    """The Intercomm between our group (connection ranks `mine`, processes
    `procs`) and the remote one, with ids uid .. uid + 3 (agreed by both
    groups); `first`: our group comes first in the union."""
    union = _context_over(base, mine + theirs if first else theirs + mine,
                          uid)
    p2p = _context_over(base, theirs + [base.links.rank], uid + 1)
    local = _context_over(base, mine, uid + (2 if first else 3))
    return Intercomm(_parts=(p2p, local, union, procs, rprocs, first))


cdef Context _peer_context(peer_comm, remote_leader, Context ctx):
    """peer_comm's context at a local leader, checked."""
    if not isinstance(peer_comm, _CommBase) or not peer_comm:
        raise ArgumentError(f"peer_comm: expected a communicator holding both "
                            f"leaders, got {peer_comm!r}", ERR_COMM)
    if isinstance(peer_comm, Intercomm):
        raise ArgumentError("peer_comm: must be an intracommunicator",
                            ERR_COMM)
    cdef Context peer = (<_CommBase>peer_comm).live()
    if not 0 <= remote_leader < peer.size or remote_leader == peer.rank:
        raise ArgumentError(f"remote_leader: {remote_leader} is not another "
                            f"rank of peer_comm (size {peer.size}, this "
                            f"leader is rank {peer.rank})", ERR_RANK)
    if ctx.size > 1 and peer.links is not ctx.links:
        raise NotImplementedError("Create_intercomm: peer_comm and this "
                                  "communicator run over different "
                                  "connections (e.g. COMM_SELF with others)")
    return peer


def _create_intercomm(Intracomm comm, local_leader, peer_comm, remote_leader,
                      tag, timeout):
    cdef Context ctx = comm.live()
    cdef Context base = ctx, peer = None
    if not 0 <= local_leader < ctx.size:
        raise ArgumentError(f"local_leader: {local_leader} is not a rank of "
                            f"this communicator (size {ctx.size})", ERR_RANK)
    if tag < 0:
        raise ArgumentError(f"tag: {tag} is negative", ERR_ARG)
    cdef bint leader = ctx.rank == local_leader
    error = None
    if leader:
        try:
            peer = _peer_context(peer_comm, remote_leader, ctx)
            if ctx.size == 1:
                base = peer
        except Exception as e:
            error = e
    # Our group: (connection rank, process, lowest unused id) of each member.
    table = allgather_objects(ctx, (base.links.rank, comm._procs[ctx.rank],
                                    base.links.next_id), timeout, OBJ_ALLGATHER)
    mine = [t[0] for t in table]
    found = None
    if leader and error is None:
        try:
            sent = peer.isend(pickle.dumps((mine, [t[1] for t in table],
                                      max(t[2] for t in table))),
                              remote_leader, tag)
            n = peer.probe(remote_leader, tag, True, timeout)[2]
            data = bytearray(n)
            peer.recv(data, remote_leader, tag, timeout)
            sent.wait(timeout)
            theirs, rprocs, rnext = pickle.loads(data)
            if set(theirs) & set(mine):
                raise ArgumentError("Create_intercomm: the local and remote "
                                    "groups share processes", ERR_GROUP)
            found = (theirs, tuple(rprocs),
                     max(rnext, max(t[2] for t in table)))
        except Exception as e:
            error = e
    if leader and error is not None:
        found = error
    found = bcast_object(ctx, found, local_leader, timeout)
    if isinstance(found, BaseException):
        if leader:
            raise error
        raise found
    theirs, rprocs, uid = found
    return _intercomm(base, mine, list(theirs), tuple(t[1] for t in table),
                      rprocs, mine[0] < theirs[0], uid)


def _remote_ranks(method, dest_at, source_at):
    """`method` (of Comm), with its argument dest (position dest_at) and
    source (source_at) checked to be ranks of the remote group."""
    def checked(self, *args, **kwargs):
        n = len(self._rprocs)
        for at, name, special in ((dest_at, "dest", (PROC_NULL,)),
                                  (source_at, "source",
                                   (PROC_NULL, ANY_SOURCE))):
            if at is None:
                continue
            value = args[at] if len(args) > at else kwargs.get(name)
            if value is not None and value not in special and not (
                    0 <= value < n):
                raise ArgumentError(f"{name}: {value} is not a rank of the "
                                    f"remote group (size {n})", ERR_RANK)
        return method(self, *args, **kwargs)
    checked.__name__ = method.__name__
    checked.__doc__ = method.__doc__
    return checked


def _not_on_intercomm(name):
    def refuse(self):
        raise AttributeError(f"{name} is not defined on an "
                             "intercommunicator (MPI): Merge() it into an "
                             "intracommunicator first")
    return property(refuse)


cdef tuple _world(str name):
    """(gloocy.MPI's COMM_WORLD, its context): what the MPI-4 constructors
    from groups run over (Groups name its processes)."""
    world = PREDEFINED.get("COMM_WORLD")
    if world is None or not world:
        raise NotImplementedError(f"{name} needs gloocy.MPI's COMM_WORLD "
                                  "(import gloocy.MPI)")
    return world, (<_CommBase>world).live()


cdef list _world_ranks(Context world, tuple wprocs, procs):
    """Connection ranks of the world's processes `procs` (the world
    communicator's processes: wprocs)."""
    where = {p: r for r, p in enumerate(wprocs)}
    try:
        return [world.world_rank(where[p]) for p in procs]
    except KeyError:
        raise ArgumentError("group: has processes outside the world",
                            ERR_GROUP) from None


cdef uint32_t _agreed_id(Context world, list ranks, stringtag,
                         timeout) except? 0:
    """An id agreed by the processes `ranks` alone, over a transient context
    (as Create_group's), keyed by `stringtag`."""
    transient = TRANSIENT | (zlib.crc32(repr(
        ("from_group", str(stringtag), ranks)).encode()) & 0x7FFFFFFF)
    scratch = _context_over(world, ranks, transient)
    try:
        return _new_id(scratch, timeout)
    finally:
        scratch.close()


cdef list _starts(list sizes):
    """Offsets of blocks of these sizes laid end to end."""
    cdef list out = []
    cdef int64_t at = 0
    for n in sizes:
        out.append(at)
        at += n
    return out
