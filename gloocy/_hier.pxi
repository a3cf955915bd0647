# Two-level collectives, for a communicator whose ranks span hosts: a
# phase inside each host (its ranks share a node segment: memory speed),
# one between the hosts' leaders (each host's lowest rank: the only bytes
# that cross the network), and a fan-out inside each host. Each phase is
# an ordinary collective on one of two contexts derived over the same
# connections, so the algorithms, deadlines, fingerprints and failure
# naming are the ones every collective has.
#
# The host layout (gloocy.transport.shm.host_identity: host name, boot id
# and network namespace, or GLOOCY_HOST_ID) is told by the rendezvous
# (transport/lazy.py: rank 0 reads every rank's host once and puts the
# layout in its go) and mapped through each communicator's ranks at its
# first collective that may run two-level; where the links were made
# otherwise (eager connections), that collective learns it by an
# allgather of a digest of each rank's host identity (it needs no pair to
# be connected before). "auto" runs two-level where there are several
# hosts and some host has more than one rank, from a size per collective
# (_select.pxi), and, at scale (two_level's at_scale), the barrier and
# allreduce at any size; "two_level" forces it wherever there are several
# hosts; any other name forces the flat algorithm over the pairs.

import hashlib
import re


cdef enum:
    # From this many ranks (GLOOCY_TWO_LEVEL_MIN_RANKS), where the ranks
    # span hosts and some host has several, "auto" runs the barrier and
    # every allreduce two-level (bench/results/scale/two-level-at-scale-2026-12-05.md).
    TWO_LEVEL_MIN_RANKS = 64


cdef enum:
    # Ids of the derived contexts: their parent's | SHADOW (as _derive.pxi's:
    # every rank derives it alone) | one of these. Parents at or above
    # HIER_LEADERS_ID (shadows, transients) stay flat.
    HIER_SHADOW_ID = 0x40000000
    HIER_LOCAL_ID = 0x10000000
    HIER_LEADERS_ID = 0x08000000


cdef class Layout:
    """Which host each rank is on (fields: _hier.pxd); shared by the Hiers
    of a process's world contexts (_world_layout)."""

    def __dealloc__(self):
        free(self.host_of)
        free(self.local_rank)


cdef class Hier:
    """A context's host layout (fields: _hier.pxd)."""

    @property
    def spans(self):
        """Whether the ranks are on more than one host."""
        return self.hosts is not None and len(self.hosts) > 1

    cdef Context on(self, Context phase):
        """`phase`, noted as the one running (for _explain)."""
        self.phase = phase
        return phase

    cdef close(self):
        if self.local is not None:
            self.local.close()
        if self.leaders is not None:
            self.leaders.close()


# The learning allgather as error messages name it (describe_call).
LEARNING = re.compile(r"\ballgather #\d+")


cdef Layout _layout_of(keys):
    """The Layout of ranks with host digests (or indexes) `keys`."""
    cdef Layout t = Layout.__new__(Layout)
    cdef int n = len(keys), r
    t.host_of = <int *>_alloc(n * sizeof(int))
    t.local_rank = <int *>_alloc(n * sizeof(int))
    index = {}
    t.hosts = []
    for r in range(n):
        k = keys[r]
        if k not in index:
            index[k] = len(t.hosts)
            t.hosts.append([])
        t.host_of[r] = index[k]
        t.local_rank[r] = len(t.hosts[index[k]])
        t.hosts[index[k]].append(r)
    return t


cdef Hier _hier_of(Layout t, int rank, int size):
    """A Hier over layout t (borrowed: the Hier keeps t alive), for `rank`."""
    cdef Hier h = Hier.__new__(Hier)
    h.layout = t
    h.hosts = t.hosts
    h.host_of = t.host_of
    h.local_rank = t.local_rank
    h.host = h.host_of[rank]
    h.useful = len(h.hosts) > 1 and len(h.hosts) < size
    return h


# The world's layout in this process: {id(the connector's hosts array):
# (that array, its Layout)}. Every rank thread of a process reads the same
# array (transport/startup.py's hosts_of_ranks): one Layout for them all.
_WORLD_LAYOUTS = {}


cdef Layout _world_layout(hosts):
    got = _WORLD_LAYOUTS.get(id(hosts))
    if got is not None and got[0] is hosts:
        return got[1]
    cdef Layout t = _layout_of(hosts)
    if len(_WORLD_LAYOUTS) >= 8:          # (jobs of the past)
        _WORLD_LAYOUTS.clear()
    _WORLD_LAYOUTS[id(hosts)] = (hosts, t)
    return t


cdef Layout _known_layout(Context ctx):
    """ctx's layout as the job's rendezvous told it (transport/lazy.py:
    rank 0's go), mapped through ctx's ranks: no communication. None
    where the links were made otherwise."""
    hosts = getattr(ctx.links.connector, "hosts", None)
    if hosts is None:
        return None
    cdef int i, n = ctx.size
    cdef bint world = n == len(hosts)
    for i in range(n):
        if ctx._world[i] != i:
            world = False
            break
    if world:
        return _world_layout(hosts)
    return _layout_of([hosts[ctx._world[i]] for i in range(n)])


def host_layout(Context ctx):
    """The hosts of ctx's ranks as lists of its ranks (hosts ordered by
    their lowest rank), as the two-level collectives see them; None until
    a collective has learnt it (or where it is never needed: one rank,
    two, a node segment)."""
    h = ctx.hier
    return None if h is None or h.hosts is None else [list(x) for x in h.hosts]


cdef int _learn_hosts(Context ctx, object timeout) except -1:
    """Set ctx.hier: the layout, and the local and leaders contexts where
    they serve. Collective over ctx."""
    ctx.hier = Hier.__new__(Hier)     # meanwhile: flat (not useful)
    cdef Layout known = _known_layout(ctx)
    if ctx.node_wanted:               # a derived context: has it one host?
        ctx.node_wanted = False       # (not if the layout says otherwise)
        if known is None or len(known.hosts) == 1:
            share_node_segment(ctx, timeout)
    if ctx.size < 3 or ctx.node is not None or ctx.comm_id >= HIER_LEADERS_ID:
        return 0
    cdef Hier h = _hier_of(known if known is not None
                           else _layout_of(_asked_hosts(ctx, timeout)),
                           ctx.rank, ctx.size)
    if len(h.hosts) > 1:
        mine = h.hosts[h.host]
        h.local = ctx.derive_ranks(
            mine, ctx.comm_id | HIER_SHADOW_ID | HIER_LOCAL_ID)
        connector = ctx.links.connector
        if (known is not None and len(mine) > NODE_BCAST_TREE_MAX_RANKS
                and connector.mode != "tcp"):
            # Its members share a host (the layout says so): its node
            # segment through the store, as _share_by_store does on one
            # host, not over ~3 pairs a member.
            _share_by_store(h.local, connector, h.local.seconds(timeout))
        else:
            h.local.node_wanted = len(mine) > 1
        if ctx.rank == mine[0]:
            h.leaders = ctx.derive_ranks(
                [x[0] for x in h.hosts],
                ctx.comm_id | HIER_SHADOW_ID | HIER_LEADERS_ID)
    ctx.hier = h
    return 0


cdef list _asked_hosts(Context ctx, object timeout):
    """Each of ctx's ranks' host digest, by an allgather over ctx (a ring:
    it needs no pair connected before; size - 1 steps)."""
    from gloocy.transport.shm import host_identity
    digest = hashlib.blake2b(host_identity().encode(), digest_size=8).digest()
    keys = _array("q", [0]) * ctx.size
    try:
        ctx.allgatherv(_array("q", [int.from_bytes(digest, "little",
                                                   signed=True)]),
                       keys, [8] * ctx.size, None, timeout, "ring")
    except GloocyError as e:
        e.args = (LEARNING.sub(r"\g<0> (learning the host layout, before "
                               r"the first collective that may run "
                               r"two-level)", str(e), 1),) + e.args[1:]
        raise
    return list(keys)


cdef int _at_scale = 0                # (0: not read yet)


cdef int _min_ranks_at_scale() except -1:
    """GLOOCY_TWO_LEVEL_MIN_RANKS, read at the first call that asks (a bad
    value fails that call): see two_level."""
    global _at_scale
    if _at_scale:
        return _at_scale
    import os
    text = os.environ.get("GLOOCY_TWO_LEVEL_MIN_RANKS", "")
    try:
        n = int(text) if text else TWO_LEVEL_MIN_RANKS
    except ValueError:
        n = -1
    if n < 3:
        raise ValueError(f"GLOOCY_TWO_LEVEL_MIN_RANKS={text!r}: must be a "
                         "whole number of ranks, at least 3")
    _at_scale = min(n, 0x7fffffff)        # (more ranks than any job: never)
    return _at_scale


cdef int two_level(Context ctx, int algo, int64_t nbytes, int64_t auto_min,
                   object timeout, bint at_scale=False) except -1:
    """ALGO_TWO_LEVEL if the call runs two-level, else the algorithm it
    runs over the pairs (a forced "two_level" that cannot: automatic).
    `at_scale` (barrier, allreduce): "auto" also runs it below auto_min
    where ctx has GLOOCY_TWO_LEVEL_MIN_RANKS ranks or more (default
    TWO_LEVEL_MIN_RANKS) and the rendezvous told the
    layout (no call learns it then)."""
    cdef Hier h
    if algo == ALGO_AUTO and at_scale and (auto_min < 0 or nbytes < auto_min):
        if (ctx.size < _min_ranks_at_scale()
                or ctx.comm_id >= HIER_LEADERS_ID):
            return algo
        if getattr(ctx.links.connector, "hosts", None) is None:
            return algo       # (untold: no call learns it, nor uses one learnt)
        if ctx.hier is None:
            _learn_hosts(ctx, timeout)
        return ALGO_TWO_LEVEL if (<Hier>ctx.hier).useful else algo
    if algo != ALGO_TWO_LEVEL and (algo != ALGO_AUTO or auto_min < 0
                                   or nbytes < auto_min):
        return algo
    if ctx.hier is None:
        if ctx.size < 3:
            return ALGO_AUTO
        _learn_hosts(ctx, timeout)
    h = <Hier>ctx.hier
    if h.useful or (algo == ALGO_TWO_LEVEL and h.local is not None):
        return ALGO_TWO_LEVEL
    return ALGO_AUTO


# The phases inside a host run the node segment's algorithms (the pairs'
# where there is no segment): every rank of a host then compares its call's
# fingerprint with the others' in the segment, so ranks calling different
# collectives are told so rather than left waiting. The fan-out of a bcast
# is the exception: it chooses as a bcast on one host does (LOCAL_BCAST):
# below the segment's threshold a tree over the host's pairs, which lets a
# leader hand the message on and return without waiting for its host's
# ranks to wake (through the segment each call waited for every one: 2 x 2
# ranks, 8 B, 130-240 us a call against 15-30 us; bench/results/hosts/).
# A rank that calls something else meanwhile is still told: a wait in the
# segment sees the pair calls of the ranks not there yet.
SHM = "shm"
LOCAL_BCAST = None


cdef double _end(Context ctx, object timeout) except -1:
    """The call's deadline (time.monotonic()); checks ctx is usable."""
    ctx.last_algorithm = "two_level"
    (<Hier>ctx.hier).phase = None
    return time.monotonic() + ctx.seconds(timeout)


cdef double _left(double end):
    """What is left of the deadline for the next phase (at least 1 ms: a
    phase that finds it passed then times out naming its call)."""
    return max(end - time.monotonic(), 1e-3)


cdef int _explain(Context ctx, Hier h, BaseException e, str call) except -1:
    """A phase's error, told as the user's call (`call`, e.g. "allreduce")
    in ctx's ranks: the message starts with them and says which ranks the
    phase ran over (it numbers them from 0: its own text uses those
    numbers, world ranks where it says "lost peer"); a timeout's `ranks`
    become ctx's, and the rank that never came is named in ctx's."""
    cdef Context sub = h.phase
    if sub is None or not isinstance(e, GloocyError):
        return 0
    members = [ctx._local[sub._world[i]] for i in range(sub.size)]
    if getattr(e, "ranks", None):
        e.ranks = [members[i] if 0 <= i < sub.size else i for i in e.ranks]
    # (fail() ends a passed-on error with the phase's rank and call)
    said = str(e).replace(f"; rank {sub.rank} was in ",
                          f"; rank {ctx.rank} was in its phase's ")
    text = (f"rank {ctx.rank}: {call} across hosts stopped in its phase over "
            f"ranks {members} of this communicator (which the phase's own "
            f"calls number 0-{sub.size - 1}): {said}")
    culprit = getattr(e, "culprit", None)
    if (isinstance(e, CollectiveTimeout) and culprit is not None
            and 0 <= culprit < len(ctx.links.pairs)
            and "never came" not in text):
        text += f"; {rank_name(ctx, culprit)} never came"
    e.args = (text,) + e.args[1:]
    return 0


cdef Buf _raw(char *p, int64_t nbytes, int dtype, int64_t itemsize):
    """A Buf over memory the call owns (a block of the user's, a work area)."""
    cdef Buf b = Buf.__new__(Buf)
    b.ptr = p
    b.nbytes = nbytes
    b.itemsize = itemsize
    b.count = nbytes // itemsize
    b.dtype = dtype
    b.name = "buffer"
    return b


cdef object hier_barrier(Context ctx, object timeout):
    cdef Hier h = <Hier>ctx.hier
    cdef double end = _end(ctx, timeout)
    try:
        h.on(h.local).barrier(_left(end))
        if h.leaders is not None:
            h.on(h.leaders).barrier(_left(end))
        h.on(h.local).barrier(_left(end))
    except BaseException as e:
        _explain(ctx, h, e, "barrier")
        raise


cdef enum:
    # At most this many pieces: a bcast's (over unlimited veth at 2 x 2
    # ranks, 16 MiB in 16 pieces took 1.05-1.23x the time of the whole
    # message in three interleaved pairs of runs: the pieces' node-segment
    # steps cost more than the overlap saves on 2 cores; link-bound at
    # 1 Gbit/s both took the same), and the others' (allreduce, 16 MiB on
    # the 1 Gbit/s link: 142 ms in 16 pieces against 173-189 whole).
    BCAST_PIECES = 4
    PIECES = 16


cdef int64_t pipeline_piece(Context ctx, int64_t nbytes, int64_t most=PIECES):
    """The piece a pipelined two-level call moves at a time: the whole
    message up to the context's pipeline segment, else at least a segment
    and at most `most` pieces (each piece costs a node-segment step in
    every host: about 0.1 ms at 2 x 2 ranks on 2 loaded cores)."""
    if nbytes <= ctx.segment:
        return max(nbytes, 1)
    return max(ctx.segment, (nbytes + most - 1) // most)


cdef object hier_bcast(Context ctx, Buf b, int root, object timeout):
    """Piece by piece (pipeline_piece): inside the root's host first when the
    root does not lead it, across the leaders, then inside each other host.
    The pieces pipeline: while a host fans piece k out, the link carries
    piece k + 1 (its leader's send returns once the kernel has the bytes,
    and the receiving kernel buffers it until that host's leader asks), so
    a large bcast costs about one link transfer and one piece's fan-out."""
    cdef Hier h = <Hier>ctx.hier
    cdef double end = _end(ctx, timeout)
    cdef int rh = h.host_of[root], lr = h.local_rank[root]
    cdef int64_t piece = pipeline_piece(ctx, b.nbytes, BCAST_PIECES), off = 0
    cdef Buf part = b
    try:
        while True:
            if piece < b.nbytes:
                part = _raw(b.ptr + off, min(piece, b.nbytes - off),
                            DT_BYTES, 1)
            if h.host == rh and lr != 0:
                h.on(h.local).bcast(part, lr, _left(end), LOCAL_BCAST)
                if h.leaders is not None:
                    h.on(h.leaders).bcast(part, rh, _left(end))
            else:
                if h.leaders is not None:
                    h.on(h.leaders).bcast(part, rh, _left(end))
                h.on(h.local).bcast(part, 0, _left(end), LOCAL_BCAST)
            off += piece
            if off >= b.nbytes:
                break
    except BaseException as e:
        _explain(ctx, h, e, "bcast")
        raise


cdef object hier_allreduce(Context ctx, Buf sb, Buf rb, int op, object timeout):
    """Reduce to the leader, allreduce across the leaders, bcast back
    (between two hosts, piece by piece: _allreduce_two_hosts)."""
    cdef Hier h = <Hier>ctx.hier
    cdef double end = _end(ctx, timeout)
    cdef bint lead = h.leaders is not None
    try:
        if sb is not None and sb.ptr != rb.ptr:
            with nogil:
                memmove(rb.ptr, sb.ptr, rb.nbytes)
        if len(h.hosts) == 2 and rb.nbytes > ctx.segment:
            return _allreduce_two_hosts(ctx, h, rb, op, end)
        h.on(h.local).reduce(None if lead else rb, rb if lead else None, op, 0,
                             _left(end), SHM)
        if lead:
            h.on(h.leaders).allreduce(None, rb, op, _left(end))
        h.on(h.local).bcast(rb, 0, _left(end), SHM)
    except BaseException as e:
        _explain(ctx, h, e, "allreduce")
        raise


cdef object _allreduce_two_hosts(Context ctx, Hier h, Buf rb, int op,
                                 double end):
    """Two hosts, in pieces (pipeline_piece's): each host reduces piece k to
    its leader, which sends it whole to the other leader and, while the
    link carries it, goes on with piece k + 1; then it takes the other
    host's piece k, combines the two in host order (every rank gets the
    same bits) and bcasts the result inside its host. Across the link each
    way: the buffer once, as halving-doubling between two leaders sends it
    (half, then half), but in one message per piece and overlapped with
    the work inside the hosts."""
    cdef bint lead = h.leaders is not None
    cdef int64_t isz = rb.itemsize, nbytes = rb.nbytes, off, length
    cdef int64_t piece = max(pipeline_piece(ctx, nbytes) // isz, 1) * isz
    cdef int64_t pieces = (nbytes + piece - 1) // piece, k
    cdef reduce_fn fn = kernel_of(op, rb.dtype)
    cdef char *theirs = ctx.work(piece) if lead else NULL
    cdef char *mine
    cdef int other = 1 - h.host          # the other leader's rank there
    cdef bint first = h.host == 0
    for k in range(pieces + 1):
        if k < pieces:
            off = k * piece
            part = _raw(rb.ptr + off, min(piece, nbytes - off), rb.dtype, isz)
            h.on(h.local).reduce(None if lead else part, part if lead else None,
                                 op, 0, _left(end), SHM)
            if lead:
                h.on(h.leaders).send(part, other, 0, _left(end))
        if k == 0:
            continue
        off = (k - 1) * piece
        length = min(piece, nbytes - off)
        part = _raw(rb.ptr + off, length, rb.dtype, isz)
        if lead:
            h.on(h.leaders).recv(_raw(theirs, length, rb.dtype, isz), other,
                                 0, _left(end))
            mine = rb.ptr + off
            with nogil:                   # host 0's piece <op> host 1's
                if first:
                    fn(mine, theirs, length // isz)
                else:
                    fn(theirs, mine, length // isz)
                    memcpy(mine, theirs, length)
        h.on(h.local).bcast(part, 0, _left(end), SHM)


cdef object hier_reduce(Context ctx, Buf sb, Buf rb, int op, int root,
                        object timeout):
    """Reduce to each leader, then across the leaders to the root's; that
    leader hands the result to the root if it is not the root itself. sb
    None: the root's data is in rb (in place); rb None: not the root."""
    cdef Hier h = <Hier>ctx.hier
    cdef double end = _end(ctx, timeout)
    cdef bint lead = h.leaders is not None, at_root = ctx.rank == root
    cdef int rh = h.host_of[root], lr = h.local_rank[root]
    cdef Buf ref = rb if rb is not None else sb
    cdef Buf acc = None                   # a leader's: its host's result
    try:
        if lead:
            acc = rb if at_root else _raw(ctx.work(ref.nbytes), ref.nbytes,
                                          ref.dtype, ref.itemsize)
            h.on(h.local).reduce(sb, acc, op, 0, _left(end), SHM)
            if h.host == rh:
                h.on(h.leaders).reduce(None, acc, op, rh, _left(end))
                if not at_root:
                    h.on(h.local).send(acc, lr, 0, _left(end))
            else:
                h.on(h.leaders).reduce(acc, None, op, rh, _left(end))
        else:
            h.on(h.local).reduce(sb if sb is not None else rb, None, op, 0,
                                 _left(end), SHM)
            if at_root:
                h.on(h.local).recv(rb, 0, 0, _left(end))
    except BaseException as e:
        _explain(ctx, h, e, "reduce")
        raise


cdef object hier_allgatherv(Context ctx, Buf sb, Buf rb, I64 sizes, I64 offs,
                            object timeout):
    """Gather each host's blocks at its leader, allgather the hosts' parts
    across the leaders, bcast the whole inside each host. The parts travel
    as one packed buffer: the receive buffer itself where each host's
    ranks are consecutive and the blocks lie end to end in rank order
    (Allgather's usual case), else a work area unpacked at the end."""
    cdef Hier h = <Hier>ctx.hier
    cdef double end = _end(ctx, timeout)
    cdef int n = ctx.size, r, k
    cdef int64_t total = 0, at = 0, host_at
    cdef bint direct = True
    for r in range(n):
        total += sizes.v[r]
        if r and (h.host_of[r] < h.host_of[r - 1]
                  or offs.v[r] != offs.v[r - 1] + sizes.v[r - 1]):
            direct = False
    cdef char *packed = rb.ptr + offs.v[0] if direct else ctx.work(total)
    cdef I64 poffs = I64.zeros(n)          # each block's place in `packed`
    host_sizes, host_offs = [], []
    for ranks in h.hosts:
        host_offs.append(at)
        for r in ranks:
            poffs.v[r] = at
            at += sizes.v[r]
        host_sizes.append(at - host_offs[-1])
    cdef list mine = h.hosts[h.host]
    host_at = host_offs[h.host]
    cdef Buf whole = _raw(packed, total, DT_BYTES, 1)
    cdef Buf part = _raw(packed + host_at, host_sizes[h.host], DT_BYTES, 1)
    send = sb
    if sb is None and not (direct and h.leaders is not None):
        send = _raw(rb.ptr + offs.v[ctx.rank], sizes.v[ctx.rank], DT_BYTES, 1)
    try:
        if len(h.hosts) == 2:
            _allgather_two_hosts(ctx, h, None if sb is None and direct
                                 else send, packed, part, host_sizes,
                                 host_offs, [sizes.v[r] for r in mine],
                                 [poffs.v[r] - host_at for r in mine], end)
        else:
            h.on(h.local).gatherv(send, part if h.leaders is not None
                                  else None, [sizes.v[r] for r in mine],
                                  [poffs.v[r] - host_at for r in mine], 0,
                                  _left(end), SHM)
            if h.leaders is not None:
                h.on(h.leaders).allgatherv(None, whole, host_sizes, host_offs,
                                           _left(end))
            h.on(h.local).bcast(whole, 0, _left(end), SHM)
    except BaseException as e:
        _explain(ctx, h, e, "allgather")
        raise
    if not direct:
        with nogil:
            for k in range(n):
                memcpy(rb.ptr + offs.v[k], packed + poffs.v[k], sizes.v[k])


cdef int _allgather_two_hosts(Context ctx, Hier h, Buf send,
                              char *packed, Buf part, list host_sizes,
                              list host_offs, list sizes, list offs,
                              double end) except -1:
    """Two hosts: every rank of a host gets its host's part by an allgather
    inside the host; the leaders then swap parts in pieces (pipeline_piece's
    of each part), each leader's sends one piece ahead of its receives,
    and each piece received is bcast inside its host while the link
    carries the next. Across the link each way: the host's part once.
    `packed`: the hosts' parts end to end (part: ours)."""
    cdef bint lead = h.leaders is not None
    cdef int g = h.host, other = 1 - h.host
    cdef int64_t out_len = host_sizes[g], in_len = host_sizes[other]
    cdef int64_t out_piece = pipeline_piece(ctx, out_len)
    cdef int64_t in_piece = pipeline_piece(ctx, in_len)
    cdef int64_t nout = (out_len + out_piece - 1) // out_piece
    cdef int64_t nin = (in_len + in_piece - 1) // in_piece, k, off
    cdef char *mine = packed + <int64_t>host_offs[g]
    cdef char *theirs = packed + <int64_t>host_offs[other]
    # send None: our block is in place in `part` (the receive buffer)
    h.on(h.local).allgatherv(send, part, sizes, offs, _left(end), SHM)
    for k in range(max(nout, nin) + 1):
        if lead and k < nout:
            off = k * out_piece
            h.on(h.leaders).send(_raw(mine + off, min(out_piece,
                                                      out_len - off),
                                      DT_BYTES, 1), other, 0, _left(end))
        if k == 0 and nout > 0:
            continue                  # one piece ahead
        kk = k - 1 if nout > 0 else k
        if kk >= nin:
            continue
        off = kk * in_piece
        piece = _raw(theirs + off, min(in_piece, in_len - off), DT_BYTES, 1)
        if lead:
            h.on(h.leaders).recv(piece, other, 0, _left(end))
        h.on(h.local).bcast(piece, 0, _left(end), SHM)
    return 0
