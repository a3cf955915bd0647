# Collective algorithms, written once against Pair through the Context.
# All run without the GIL; each Xfer they post stays alive (stack or heap)
# until waited for, and heap memory is freed on every path. Where a step both
# sends and receives, the send is posted first: it leaves at once, and a peer
# that finds a mismatch in what we sent still gets our frame to find it too.
#
# Each collective with a choice has a table of algorithm names (below), an
# environment override GLOOCY_ALGORITHM_<COLLECTIVE> and an automatic choice
# by world size and bytes (auto_*; bench/README.md "Algorithm selection").
# The def methods in _context.pxi resolve the name (_algorithm), pick
# (pick_*), record Context.last_algorithm and call run_*.


cdef enum:
    # Algorithm codes (one namespace for every collective; see the tables).
    ALGO_AUTO = 0
    ALGO_RING = 1
    ALGO_RECURSIVE_DOUBLING = 2
    ALGO_HALVING_DOUBLING = 3
    ALGO_BCUBE = 4
    ALGO_BINOMIAL = 5
    ALGO_SCATTER_ALLGATHER = 6
    ALGO_HALVING = 7
    ALGO_SHM = 8                 # through the node segment (_node.pxi): one host
    ALGO_DIRECT = 9              # gather, scatter, alltoall: straight to each peer
    TAG_FOLD_OUT = 0xffffffff     # recursive doubling: result back to a folded rank
    TAG_GATHER = 0xfffffffe      # reduce: reduced chunks sent to the root
    TAG_SCATTER = 0xfffffffd     # bcast scatter_allgather: the root's chunks
    TAG_FOLD_IN = 0xfffffffc     # halving: a folded rank's input to its partner
    MAX_CHILDREN = 64
    MAX_RADICES = 64             # digits of a rank in a hypercube (log2 of 2^63)
    # bcube: largest group of one hypercube dimension (Gloo's users pick
    # bases up to 4); a world size with a prime factor above 4 still gets a
    # group of that size (5, 7: one group, a direct exchange).
    BCUBE_BASE = 4

# Automatic choice (algorithm=None or "auto"): thresholds measured with
# gloocy-bench (and a reduce micro-benchmark) on the project's 2-core
# machine, world sizes 2-8, each algorithm forced by its GLOOCY_ALGORITHM_*
# variable in interleaved runs; figures and method in bench/README.md,
# "Algorithm selection". Sizes are bytes per rank unless said otherwise.
# Allreduce's small-message bound is Context.small_allreduce
# (GLOOCY_SMALL_ALLREDUCE_BYTES, 64 KiB): recursive doubling was fastest up
# to 64 KiB at every size 2-8.
cdef enum:
    # allreduce, n <= 3: recursive doubling stays fastest up to this many
    # times small_allreduce (256 KiB: 292 vs 397-413 us at n=2, 477 vs
    # 632-809 us at n=3); from n=4 halving-doubling takes over above 64 KiB.
    AUTO_ALLREDUCE_DOUBLING_SMALL_WORLD = 4
    # allreduce, n >= 4: halving-doubling up to here (4 MiB: 11.1 vs 13.9 ms
    # for the ring at n=4, 15.2 vs 20.1 ms at n=7), the pipelined ring
    # above (16 MiB+: the ring ties or wins at n=4, 5, 7, 8).
    AUTO_ALLREDUCE_HALVING_MAX = 4 << 20
    # bcast: scatter + ring allgather only from this many ranks and bytes
    # (n=8: tie at 16 MiB, 145 vs 160 ms at 64 MiB). Below, the pipelined
    # binomial tree wins (it moves fewer bytes in all, which is what counts
    # when every rank shares one host's memory bandwidth).
    AUTO_BCAST_SCATTER_MIN_RANKS = 8
    AUTO_BCAST_SCATTER_MIN = 16 << 20
    # allgather: recursive doubling (power-of-two n, blocks end to end) up
    # to this many gathered bytes (n=4: 1.16 vs 1.45 ms at 1 MiB, 6.2 vs
    # 6.4 ms at 4 MiB; the ring wins from 16 MiB: 19.8 vs 37.2 ms).
    AUTO_ALLGATHER_DOUBLING_MAX = 4 << 20
    # reduce_scatter: recursive halving up to this many input bytes (it won
    # or tied up to 4 MiB at every n in 2-7; the ring won at 16 MiB for
    # n=3, 5, 6, 7).
    AUTO_REDUCE_SCATTER_HALVING_MAX = 4 << 20
    # reduce: the ring (reduce-scatter + gather) only from this many ranks
    # and bytes (n=8: 57 vs 66 ms at 16 MiB, 398 vs 435 ms at 64 MiB); the
    # binomial tree won everywhere at n=2-6 up to 64 MiB.
    AUTO_REDUCE_RING_MIN_RANKS = 8
    AUTO_REDUCE_RING_MIN = 16 << 20


# One table per collective: name -> code. "auto" (or None) is the automatic
# choice; the keyword wins over the GLOOCY_ALGORITHM_<COLLECTIVE> variable.
# "shm" is the node segment's algorithm (_node.pxi, _node_exchange.pxi),
# which "auto" picks where it wins when every rank is on one host; forced
# where there is no segment, it falls back to the automatic pair choice.
ALLREDUCE_ALGORITHMS = {"auto": ALGO_AUTO, "ring": ALGO_RING,
                        "recursive_doubling": ALGO_RECURSIVE_DOUBLING,
                        "halving_doubling": ALGO_HALVING_DOUBLING,
                        "bcube": ALGO_BCUBE, "shm": ALGO_SHM}
BCAST_ALGORITHMS = {"auto": ALGO_AUTO, "binomial": ALGO_BINOMIAL,
                    "scatter_allgather": ALGO_SCATTER_ALLGATHER,
                    "shm": ALGO_SHM}
ALLGATHER_ALGORITHMS = {"auto": ALGO_AUTO, "ring": ALGO_RING,
                        "recursive_doubling": ALGO_RECURSIVE_DOUBLING,
                        "shm": ALGO_SHM}
REDUCE_SCATTER_ALGORITHMS = {"auto": ALGO_AUTO, "ring": ALGO_RING,
                             "halving": ALGO_HALVING, "shm": ALGO_SHM}
# "recursive_doubling" is the old name of the binomial tree (kept working).
REDUCE_ALGORITHMS = {"auto": ALGO_AUTO, "binomial": ALGO_BINOMIAL,
                     "ring": ALGO_RING,
                     "recursive_doubling": ALGO_BINOMIAL, "shm": ALGO_SHM}
GATHER_ALGORITHMS = {"auto": ALGO_AUTO, "direct": ALGO_DIRECT, "shm": ALGO_SHM}
SCATTER_ALGORITHMS = {"auto": ALGO_AUTO, "direct": ALGO_DIRECT, "shm": ALGO_SHM}
ALLTOALL_ALGORITHMS = {"auto": ALGO_AUTO, "direct": ALGO_DIRECT, "shm": ALGO_SHM}
ALGORITHMS = ALLREDUCE_ALGORITHMS      # the name before there were others
ALGORITHM_TABLES = {"allreduce": ALLREDUCE_ALGORITHMS,
                    "bcast": BCAST_ALGORITHMS,
                    "allgather": ALLGATHER_ALGORITHMS,
                    "reduce_scatter": REDUCE_SCATTER_ALGORITHMS,
                    "reduce": REDUCE_ALGORITHMS,
                    "gather": GATHER_ALGORITHMS,
                    "scatter": SCATTER_ALGORITHMS,
                    "alltoall": ALLTOALL_ALGORITHMS}
ALGORITHM_ENV = {name: f"GLOOCY_ALGORITHM_{name.upper()}"
                 for name in ALGORITHM_TABLES}
# code -> the name Context.last_algorithm reports
ALGORITHM_NAMES = {ALGO_AUTO: "auto", ALGO_RING: "ring",
                   ALGO_RECURSIVE_DOUBLING: "recursive_doubling",
                   ALGO_HALVING_DOUBLING: "halving_doubling",
                   ALGO_BCUBE: "bcube", ALGO_BINOMIAL: "binomial",
                   ALGO_SCATTER_ALLGATHER: "scatter_allgather",
                   ALGO_HALVING: "halving", ALGO_SHM: "shm",
                   ALGO_DIRECT: "direct"}


from libc.stdlib cimport getenv


cdef dict _ENV_NAMES = {c: v.encode() for c, v in ALGORITHM_ENV.items()}


cdef dict env_algorithms():
    """{collective: name} of the GLOOCY_ALGORITHM_* variables set now (read
    when a context is made, not on every call). C getenv: os.environ.get
    costs a microsecond; os.environ's writes reach the C environment
    (putenv), so both agree."""
    cdef dict found = None
    cdef const char *value
    for collective, name in _ENV_NAMES.items():
        value = getenv(<bytes>name)
        if value is not NULL and value[0] != 0:
            if found is None:
                found = {}
            found[collective] = value.decode("utf-8", "replace")
    return found


cdef int _algorithm(str collective, object name, dict env) except -1:
    """The code of `collective`'s algorithm `name`; None: the one `env`
    names (see env_algorithms), else automatic."""
    what = "algorithm"
    if name is None:
        if not env or collective not in env:
            return ALGO_AUTO
        what = ALGORITHM_ENV[collective]
        name = env[collective]
    cdef dict table = ALGORITHM_TABLES[collective]
    try:
        return table[name]
    except (KeyError, TypeError):
        raise ValueError(f"{what}: {name!r} is not a {collective} algorithm "
                         f"(one of {', '.join(table)})") from None


# -- automatic choice (the table in bench/README.md) -----------------------------

cdef int auto_allreduce(int n, int64_t small, int64_t count,
                        int64_t itemsize) noexcept nogil:
    cdef int64_t nbytes = count * itemsize
    if nbytes <= small or count < n:
        return ALGO_RECURSIVE_DOUBLING
    if n <= 3:
        if nbytes <= small * AUTO_ALLREDUCE_DOUBLING_SMALL_WORLD:
            return ALGO_RECURSIVE_DOUBLING
        return ALGO_RING
    if nbytes <= AUTO_ALLREDUCE_HALVING_MAX:
        return ALGO_HALVING_DOUBLING
    return ALGO_RING


cdef int auto_bcast(int n, int64_t nbytes) noexcept nogil:
    if n >= AUTO_BCAST_SCATTER_MIN_RANKS and nbytes >= AUTO_BCAST_SCATTER_MIN:
        return ALGO_SCATTER_ALLGATHER
    return ALGO_BINOMIAL


cdef int auto_allgather(int n, int64_t total) noexcept nogil:
    """`total`: bytes gathered. Recursive doubling where it may run (see
    pick_allgather) and the buffer is small."""
    if total <= AUTO_ALLGATHER_DOUBLING_MAX:
        return ALGO_RECURSIVE_DOUBLING
    return ALGO_RING


cdef int auto_reduce_scatter(int n, int64_t total_bytes) noexcept nogil:
    if total_bytes <= AUTO_REDUCE_SCATTER_HALVING_MAX:
        return ALGO_HALVING
    return ALGO_RING


cdef int auto_reduce(int n, int64_t count, int64_t itemsize) noexcept nogil:
    if (n >= AUTO_REDUCE_RING_MIN_RANKS and count >= n
            and count * itemsize >= AUTO_REDUCE_RING_MIN):
        return ALGO_RING
    return ALGO_BINOMIAL


# The thresholds above, for documentation and tests.
ALGORITHM_THRESHOLDS = {
    "allreduce_small": 1 << 16,        # Context.small_allreduce's default
    "allreduce_doubling_small_world": AUTO_ALLREDUCE_DOUBLING_SMALL_WORLD,
    "allreduce_halving_max": AUTO_ALLREDUCE_HALVING_MAX,
    "bcast_scatter_min_ranks": AUTO_BCAST_SCATTER_MIN_RANKS,
    "bcast_scatter_min": AUTO_BCAST_SCATTER_MIN,
    "allgather_doubling_max": AUTO_ALLGATHER_DOUBLING_MAX,
    "reduce_scatter_halving_max": AUTO_REDUCE_SCATTER_HALVING_MAX,
    "reduce_ring_min_ranks": AUTO_REDUCE_RING_MIN_RANKS,
    "reduce_ring_min": AUTO_REDUCE_RING_MIN,
    "node_reduce_min": NODE_REDUCE_MIN,     # with a node segment (_node_exchange.pxi)
}


def auto_algorithm(str collective, int size, int64_t nbytes, *,
                   int64_t itemsize=4, int64_t small_allreduce=1 << 16,
                   bint node=False):
    """The name of the algorithm "auto" picks for `collective` at world size
    `size` and `nbytes` (allreduce, reduce, bcast: the buffer; allgather:
    the gathered total in equal blocks laid end to end; reduce_scatter:
    each rank's input; gather, scatter, alltoall: any). `node`: every rank
    is on one host (a world of 2 or more with a node segment)."""
    cdef int code
    if size < 1 or nbytes < 0 or itemsize < 1:
        raise ValueError("size, nbytes and itemsize must be positive")
    if node and size > 1:
        if collective in ("allreduce", "bcast", "allgather", "alltoall",
                          "reduce_scatter") or (
                collective == "reduce" and nbytes >= NODE_REDUCE_MIN):
            return "shm"
    if collective in ("gather", "scatter", "alltoall"):
        return "direct"
    if collective == "allreduce":
        code = auto_allreduce(size, small_allreduce, nbytes // itemsize, itemsize)
    elif collective == "reduce":
        code = auto_reduce(size, nbytes // itemsize, itemsize)
    elif collective == "bcast":
        code = auto_bcast(size, nbytes)
    elif collective == "allgather":
        code = auto_allgather(size, nbytes)
        if size & (size - 1):
            code = ALGO_RING
    elif collective == "reduce_scatter":
        code = auto_reduce_scatter(size, nbytes)
    else:
        raise ValueError(f"collective: {collective!r} is not one of "
                         f"{', '.join(ALGORITHM_TABLES)}")
    return ALGORITHM_NAMES[code]


cdef int _raise_nomem() except -1 with gil:
    raise MemoryError()


cdef void *_alloc(int64_t nbytes) except? NULL nogil:
    cdef void *p = malloc(<size_t>(nbytes if nbytes > 0 else 1))
    if p is NULL:
        _raise_nomem()
    return p


cdef int run_barrier(Context ctx, Coll *c) except -1 nogil:
    """Dissemination: in round k every rank signals rank+2^k and hears from
    rank-2^k; after ceil(log2 n) rounds everyone has heard from everyone."""
    cdef Xfer xs[2]
    cdef int n = ctx.size, r = ctx.rank, k = 1
    cdef uint64_t tag = 0
    while k < n:
        ctx.post_send(c, &xs[1], (r + k) % n, tag, NULL, 0)
        ctx.post_recv(c, &xs[0], (r - k + n) % n, tag, NULL, 0)
        ctx.waitall(c, xs, 2)
        k <<= 1
        tag += 1
    return 0


cdef int pick_bcast(Context ctx, int64_t nbytes, int algo) noexcept nogil:
    """The algorithm a bcast of `nbytes` runs (`algo` unless automatic)."""
    return algo if algo != ALGO_AUTO else auto_bcast(ctx.size, nbytes)


cdef int run_bcast(Context ctx, Coll *c, char *buf, int64_t nbytes,
                   int algo=ALGO_AUTO) except -1 nogil:
    if ctx.size == 1:
        return 0
    if pick_bcast(ctx, nbytes, algo) == ALGO_SCATTER_ALLGATHER:
        return bcast_scatter_allgather(ctx, c, buf, nbytes)
    return bcast_binomial(ctx, c, buf, nbytes)


cdef int bcast_scatter_allgather(Context ctx, Coll *c, char *buf,
                                 int64_t nbytes) except -1 nogil:
    """The root sends rank q its n-th of the buffer (chunk (q - root) mod
    n, chunks in buffer order), then a ring allgather gives every rank every
    chunk (van de Geijn's long-message broadcast). The root sends about 2B
    in all instead of B per child (B log2 n), and every link carries a
    share; but every rank sends, so more bytes move in all."""
    cdef int n = ctx.size, r = ctx.rank, root = c.proto.root, q, v
    cdef int64_t per = nbytes // n, extra = nbytes % n
    cdef int64_t *offs = <int64_t *>_alloc(2 * n * sizeof(int64_t))
    cdef int64_t *sizes = offs + n
    cdef Xfer *xs = NULL
    try:
        for q in range(n):
            v = (q - root + n) % n             # chunk v, in buffer order
            sizes[q] = per + (1 if v < extra else 0)
            offs[q] = per * v + min(<int64_t>v, extra)
        xs = <Xfer *>_alloc(n * sizeof(Xfer))
        if r == root:
            for v in range(1, n):
                q = (root + v) % n
                ctx.post_send(c, &xs[q], q, TAG_SCATTER, buf + offs[q],
                              sizes[q])
        else:
            ctx.post_recv(c, &xs[r], root, TAG_SCATTER, buf + offs[r],
                          sizes[r])
            ctx.wait(c, &xs[r])
        allgather_ring(ctx, c, buf, offs, sizes)
        if r == root:
            for q in range(n):
                if q != root:
                    ctx.wait(c, &xs[q])
    finally:
        free(offs)
        free(xs)
    return 0


cdef int bcast_binomial(Context ctx, Coll *c, char *buf,
                        int64_t nbytes) except -1 nogil:
    """Binomial tree rooted at c.proto.root, pipelined in segments: a rank
    forwards each segment to its children as soon as it has it."""
    cdef int n = ctx.size, root = c.proto.root
    cdef int vr = (ctx.rank - root + n) % n          # rank relative to root
    cdef int children[MAX_CHILDREN]
    cdef int nchild = 0, mask, k, parent
    cdef int64_t seg = ctx.segment, s, off, length
    cdef int64_t nseg = (nbytes + seg - 1) // seg if nbytes > 0 else 1
    cdef Xfer *recvs
    cdef Xfer *sends
    if n == 1:
        return 0
    # Children are vr + 2^k for 2^k below vr's lowest set bit (any for the
    # root), largest subtree first.
    mask = 1
    while mask < n and not (vr & mask):
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if vr + mask < n:
            children[nchild] = (vr + mask + root) % n
            nchild += 1
        mask >>= 1
    parent = ((vr & (vr - 1)) + root) % n
    recvs = <Xfer *>_alloc(nseg * (nchild + 1) * sizeof(Xfer))
    sends = recvs + nseg
    try:
        if vr != 0:
            for s in range(nseg):
                off = s * seg
                length = min(seg, nbytes - off)
                ctx.post_recv(c, &recvs[s], parent, s, buf + off, length)
        for s in range(nseg):
            off = s * seg
            length = min(seg, nbytes - off)
            if vr != 0:
                ctx.wait(c, &recvs[s])
            for k in range(nchild):
                ctx.post_send(c, &sends[s * nchild + k], children[k], s,
                              buf + off, length)
        ctx.waitall(c, sends, nseg * nchild)
    finally:
        free(recvs)
    return 0


cdef int pick_allreduce(Context ctx, int64_t count, int64_t itemsize,
                        int algo) noexcept nogil:
    """The algorithm an allreduce of `count` elements runs."""
    if algo != ALGO_AUTO:
        return algo
    return auto_allreduce(ctx.size, ctx.small_allreduce, count, itemsize)


cdef int run_allreduce(Context ctx, Coll *c, char *buf, int64_t count,
                       int algo) except -1 nogil:
    if ctx.size == 1:
        return 0
    algo = pick_allreduce(ctx, count, c.itemsize, algo)
    if algo == ALGO_RING:
        return allreduce_ring(ctx, c, buf, count)
    if algo == ALGO_HALVING_DOUBLING:
        return allreduce_halving_doubling(ctx, c, buf, count)
    if algo == ALGO_BCUBE:
        return allreduce_bcube(ctx, c, buf, count)
    return allreduce_recursive_doubling(ctx, c, buf, count)


cdef int allreduce_recursive_doubling(Context ctx, Coll *c, char *buf,
                                      int64_t count) except -1 nogil:
    """log2(n) exchanges of the whole buffer. For n not a power of two, the
    first 2*rem ranks fold pairwise into one (even into odd) before and get
    the result back after."""
    cdef int n = ctx.size, r = ctx.rank
    cdef int p = 1, rem, newrank, mask, peer, pn
    cdef uint64_t level = 1
    cdef int64_t nbytes = count * c.itemsize
    cdef Xfer xs[2]
    cdef char *tmp = ctx.scratch(nbytes)
    while p * 2 <= n:
        p *= 2
    rem = n - p
    if r < 2 * rem:
        if r % 2 == 0:
            ctx.post_send(c, &xs[0], r + 1, 0, buf, nbytes)
            ctx.wait(c, &xs[0])
            ctx.post_recv(c, &xs[1], r + 1, TAG_FOLD_OUT, buf, nbytes)
            ctx.wait(c, &xs[1])
            return 0
        ctx.post_recv(c, &xs[0], r - 1, 0, tmp, nbytes)
        ctx.wait(c, &xs[0])
        _reduce_ordered(c, buf, tmp, count, nbytes, True)
        newrank = r // 2
    else:
        newrank = r - rem
    mask = 1
    while mask < p:
        pn = newrank ^ mask
        peer = pn * 2 + 1 if pn < rem else pn + rem
        ctx.post_send(c, &xs[1], peer, level, buf, nbytes)
        ctx.post_recv(c, &xs[0], peer, level, tmp, nbytes)
        ctx.waitall(c, xs, 2)
        _reduce_ordered(c, buf, tmp, count, nbytes, peer < r)
        mask <<= 1
        level += 1
    if r < 2 * rem:
        ctx.post_send(c, &xs[0], r - 1, TAG_FOLD_OUT, buf, nbytes)
        ctx.wait(c, &xs[0])
    return 0


cdef inline void _reduce_ordered(Coll *c, char *buf, char *tmp, int64_t count,
                                 int64_t nbytes, bint tmp_first) noexcept nogil:
    """buf = tmp <op> buf when tmp came from a lower rank, else buf <op> tmp:
    both partners then combine the same operands in the same order, so every
    rank ends with the same bits (MIN of 0.0 and -0.0, NaN payloads...)."""
    if tmp_first:
        c.fn(tmp, buf, count)
        memcpy(buf, tmp, nbytes)
    else:
        c.fn(buf, tmp, count)


cdef int allreduce_ring(Context ctx, Coll *c, char *buf,
                        int64_t count) except -1 nogil:
    """Ring reduce-scatter then ring allgather over n nearly equal chunks."""
    cdef int n = ctx.size, i
    cdef int64_t *offs = <int64_t *>_alloc(2 * n * sizeof(int64_t))
    cdef int64_t *lens = offs + n
    try:
        for i in range(n):
            lens[i] = count // n + (1 if i < count % n else 0)
            offs[i] = 0 if i == 0 else offs[i - 1] + lens[i - 1]
        ring_reduce_scatter(ctx, c, buf, offs, lens, True,
                            ctx.scratch(ring_scratch_bytes(ctx, c, lens)))
    finally:
        free(offs)
    return 0


cdef int allreduce_halving_doubling(Context ctx, Coll *c, char *buf,
                                    int64_t count) except -1 nogil:
    """Rabenseifner: reduce-scatter by recursive halving, then allgather by
    recursive doubling, over p = 2^k ranks: each rank sends ~2x the buffer
    in 2k steps. For n not a power of two the first 2*(n-p) ranks fold
    pairwise (even into odd) before, and the even ones get the result after.
    Each element is reduced at exactly one rank and then copied, so every
    rank ends with the same bits."""
    cdef int n = ctx.size, r = ctx.rank, p = 1, k = 0, rem, vr, i
    cdef int radix[MAX_RADICES]
    cdef int64_t isz = c.itemsize, nbytes = count * isz, need
    cdef Xfer x
    cdef char *tmp
    while p * 2 <= n:
        radix[k] = 2
        k += 1
        p *= 2
    rem = n - p
    vr = r // 2 if r < 2 * rem else r - rem
    cdef int64_t *bo = <int64_t *>_alloc((p + 1) * sizeof(int64_t))
    try:
        for i in range(p + 1):
            bo[i] = (count // p) * i + min(<int64_t>i, count % p)
        if r < 2 * rem and r % 2 == 0:
            ctx.post_send(c, &x, r + 1, TAG_FOLD_IN, buf, nbytes)
            ctx.wait(c, &x)
            ctx.post_recv(c, &x, r + 1, TAG_FOLD_OUT, buf, nbytes)
            ctx.wait(c, &x)
            return 0
        need = _radix_scratch(p, vr, radix, k, bo)
        tmp = ctx.scratch(max(need, count if rem else 0) * isz)
        if r < 2 * rem:
            ctx.post_recv(c, &x, r - 1, TAG_FOLD_IN, tmp, nbytes)
            ctx.wait(c, &x)
            c.fn(buf, tmp, count)
        radix_exchange(ctx, c, buf, isz, p, vr, rem, radix, k, bo, tmp,
                       True, True)
        if r < 2 * rem:
            ctx.post_send(c, &x, r - 1, TAG_FOLD_OUT, buf, nbytes)
            ctx.wait(c, &x)
    finally:
        free(bo)
    return 0


cdef int bcube_radices(int n, int *radix) noexcept nogil:
    """Group sizes of bcube's dimensions, product n: n's prime factors,
    smallest first, merged while the product stays <= BCUBE_BASE (8 ->
    4 x 2, 6 -> 2 x 3, 7 -> 7). Returns how many."""
    cdef int k = 0, cur = 1, f = 2
    while n > 1:
        while n % f == 0:
            if cur > 1 and cur * f > BCUBE_BASE:
                radix[k] = cur
                k += 1
                cur = 1
            cur *= f
            n //= f
        f += 1
    if cur > 1:
        radix[k] = cur
        k += 1
    return k


cdef int allreduce_bcube(Context ctx, Coll *c, char *buf,
                         int64_t count) except -1 nogil:
    """BCube (as in Gloo): the ranks form a mixed-radix hypercube whose
    dimensions are groups of up to BCUBE_BASE ranks (bcube_radices); a
    reduce-scatter inside the group of each dimension in turn, then an
    allgather back. Fewer, wider steps than halving-doubling, and any world
    size works without folding (a prime size is one group: a direct
    reduce-scatter and allgather)."""
    cdef int n = ctx.size, r = ctx.rank, i, k
    cdef int radix[MAX_RADICES]
    cdef int64_t isz = c.itemsize
    cdef int64_t *bo = <int64_t *>_alloc((n + 1) * sizeof(int64_t))
    try:
        k = bcube_radices(n, radix)
        for i in range(n + 1):
            bo[i] = (count // n) * i + min(<int64_t>i, count % n)
        radix_exchange(ctx, c, buf, isz, n, r, 0, radix, k, bo,
                       ctx.scratch(_radix_scratch(n, r, radix, k, bo) * isz),
                       True, True)
    finally:
        free(bo)
    return 0


cdef inline int _real_rank(int64_t v, int rem) noexcept nogil:
    """Real rank of virtual rank v when the first 2*rem ranks fold in pairs
    (virtual rank v < rem is the odd one of the pair)."""
    return <int>(2 * v + 1 if v < rem else v + rem)


cdef int64_t _radix_scratch(int vn, int vr, const int *radix, int k,
                            const int64_t *bo) noexcept nogil:
    """Elements of incoming partial results radix_exchange's reduce-scatter
    holds at once (the most over its steps)."""
    cdef int64_t w = vn, base = 0, most = 0, d, ln
    cdef int i
    for i in range(k):
        w //= radix[i]
        d = (vr // w) % radix[i]
        ln = bo[base + (d + 1) * w] - bo[base + d * w]
        most = max(most, (radix[i] - 1) * ln)
        base += d * w
    return most


cdef int radix_exchange(Context ctx, Coll *c, char *buf, int64_t isz, int vn,
                        int vr, int rem, const int *radix, int k,
                        const int64_t *bo, char *tmp, bint reduce_scatter,
                        bint allgather) except -1 nogil:
    """Reduce-scatter and/or allgather over vn virtual ranks arranged as a
    mixed-radix hypercube, vn = radix[0] x ... x radix[k-1] (all 2:
    recursive halving / doubling; wider: bcube). Virtual rank v owns block v,
    elements [bo[v], bo[v+1]) of buf (items of isz bytes); it is real rank
    _real_rank(v, rem).

    v's digits, most significant first, are d_0..d_{k-1}. At reduce-scatter
    step i the group of ranks that differ from v only in digit i share a
    range of blocks; it is cut in radix[i] parts, part j to the member with
    digit j: v sends every other member its part and reduces into its own
    the partial results they send (in a fixed order). After the last step
    v holds block v reduced over every rank, computed nowhere else. The
    allgather runs the steps backwards, each member sending its part to
    the others. `tmp` holds _radix_scratch() elements."""
    cdef int64_t bases[MAX_RADICES]
    cdef int64_t ws[MAX_RADICES]
    cdef int64_t w = vn, base = 0, lo, ln, mlo, mln
    cdef int digits[MAX_RADICES]
    cdef int i, j, jj, b, d, nx, maxb = 1
    cdef uint64_t tag
    for i in range(k):
        w //= radix[i]
        ws[i] = w
        digits[i] = <int>((vr // w) % radix[i])
        bases[i] = base
        base += digits[i] * w
        maxb = max(maxb, radix[i])
    cdef Xfer *xs = <Xfer *>_alloc(2 * maxb * sizeof(Xfer))
    try:
        if reduce_scatter:
            for i in range(k):
                b, d, w, base = radix[i], digits[i], ws[i], bases[i]
                tag = i + 1
                mlo = bo[base + d * w]
                mln = bo[base + (d + 1) * w] - mlo
                # Sends first, each member starting at a different peer.
                for j in range(1, b):
                    jj = (d + j) % b
                    lo = bo[base + jj * w]
                    ln = bo[base + (jj + 1) * w] - lo
                    ctx.post_send(c, &xs[j - 1], _real_rank(vr + (jj - d) * w, rem),
                                  tag, buf + lo * isz, ln * isz)
                for j in range(1, b):
                    jj = (d + j) % b
                    ctx.post_recv(c, &xs[b - 2 + j],
                                  _real_rank(vr + (jj - d) * w, rem), tag,
                                  tmp + (j - 1) * mln * isz, mln * isz)
                for j in range(1, b):
                    ctx.wait(c, &xs[b - 2 + j])
                    c.fn(buf + mlo * isz, tmp + (j - 1) * mln * isz, mln)
                ctx.waitall(c, xs, b - 1)
        if allgather:
            for i in range(k - 1, -1, -1):
                b, d, w, base = radix[i], digits[i], ws[i], bases[i]
                tag = k + i + 1
                mlo = bo[base + d * w]
                mln = bo[base + (d + 1) * w] - mlo
                for j in range(1, b):
                    jj = (d + j) % b
                    ctx.post_send(c, &xs[j - 1], _real_rank(vr + (jj - d) * w, rem),
                                  tag, buf + mlo * isz, mln * isz)
                for j in range(1, b):
                    jj = (d + j) % b
                    lo = bo[base + jj * w]
                    ln = bo[base + (jj + 1) * w] - lo
                    ctx.post_recv(c, &xs[b - 2 + j],
                                  _real_rank(vr + (jj - d) * w, rem), tag,
                                  buf + lo * isz, ln * isz)
                ctx.waitall(c, xs, 2 * (b - 1))
    finally:
        free(xs)
    return 0


cdef int64_t ring_scratch_bytes(Context ctx, Coll *c, const int64_t *lens) noexcept nogil:
    """Bytes of temporary space ring_reduce_scatter needs."""
    cdef int64_t i, longest = 0
    for i in range(ctx.size):
        longest = max(longest, lens[i])
    return (2 if ctx.size > 2 else 1) * longest * c.itemsize


cdef inline void _chunk_segment(const int64_t *offs, const int64_t *lens,
                                int64_t chunk, int64_t j, int64_t seg_el,
                                int64_t *lo, int64_t *ln) noexcept nogil:
    """Element offset and length of segment j of a chunk (may be empty)."""
    cdef int64_t a = min(j * seg_el, lens[chunk])
    lo[0] = offs[chunk] + a
    ln[0] = min(seg_el, lens[chunk] - a)


cdef int ring_reduce_scatter(Context ctx, Coll *c, char *buf,
                             const int64_t *offs, const int64_t *lens,
                             bint allgather, char *tmp) except -1 nogil:
    """Ring reduce-scatter over chunks (offs[i], lens[i]) in elements of buf:
    rank r ends with chunk r reduced over every rank; with `allgather`, a
    ring allgather then gives every rank every chunk.

    Each chunk is cut in segments that flow independently: a segment reduced
    at step s is sent on at step s+1 at once (and into the allgather after
    the last step), so reduction overlaps the transfers. At reduce-scatter
    step s a rank sends chunk r-s-1 and receives chunk r-s-2; at allgather
    step t it sends chunk r-t and receives chunk r-t-1. `tmp` holds
    ring_scratch_bytes() of incoming segments."""
    cdef int n = ctx.size, r = ctx.rank
    cdef int left = (r - 1 + n) % n, right = (r + 1) % n
    cdef int64_t isz = c.itemsize, longest = 0, i
    for i in range(n):
        longest = max(longest, lens[i])
    cdef int64_t seg_el = max(1, ctx.segment // isz)
    cdef int64_t nseg = max(1, (longest + seg_el - 1) // seg_el)
    cdef int64_t steps = n - 1, per = steps * nseg
    cdef int64_t s, j, t, lo, ln, lo2, ln2
    cdef int ntmp = 2 if steps > 1 else 1
    cdef Xfer *xs = <Xfer *>_alloc((4 if allgather else 2) * per * sizeof(Xfer))
    cdef Xfer *rs_recv = xs
    cdef Xfer *rs_send = xs + per
    cdef Xfer *ag_recv = xs + 2 * per
    cdef Xfer *ag_send = xs + 3 * per
    cdef char *cur
    if n == 1:
        free(xs)
        return 0
    try:
        for j in range(nseg):
            _chunk_segment(offs, lens, _mod(r - 1, n), j, seg_el, &lo, &ln)
            ctx.post_send(c, &rs_send[j], right, j, buf + lo * isz, ln * isz)
            _chunk_segment(offs, lens, _mod(r - 2, n), j, seg_el, &lo, &ln)
            ctx.post_recv(c, &rs_recv[j], left, j, tmp + j * seg_el * isz,
                          ln * isz)
        for s in range(steps):
            cur = tmp + (s % ntmp) * longest * isz
            for j in range(nseg):
                _chunk_segment(offs, lens, _mod(r - s - 2, n), j, seg_el, &lo, &ln)
                ctx.wait(c, &rs_recv[s * nseg + j])
                c.fn(buf + lo * isz, cur + j * seg_el * isz, ln)
                if s + 1 < steps:
                    ctx.post_send(c, &rs_send[(s + 1) * nseg + j], right,
                                  (s + 1) * nseg + j, buf + lo * isz, ln * isz)
                    _chunk_segment(offs, lens, _mod(r - s - 3, n), j, seg_el,
                                   &lo2, &ln2)
                    ctx.post_recv(c, &rs_recv[(s + 1) * nseg + j], left,
                                  (s + 1) * nseg + j,
                                  tmp + ((s + 1) % ntmp) * longest * isz
                                  + j * seg_el * isz, ln2 * isz)
                elif allgather:
                    # Segment j of our chunk r is complete: start passing it
                    # round, and expect chunk r-1 from the left.
                    ctx.post_send(c, &ag_send[j], right, per + j,
                                  buf + lo * isz, ln * isz)
                    _chunk_segment(offs, lens, _mod(r - 1, n), j, seg_el,
                                   &lo2, &ln2)
                    ctx.post_recv(c, &ag_recv[j], left, per + j,
                                  buf + lo2 * isz, ln2 * isz)
        if allgather:
            for t in range(steps):
                for j in range(nseg):
                    ctx.wait(c, &ag_recv[t * nseg + j])
                    if t + 1 < steps:
                        _chunk_segment(offs, lens, _mod(r - t - 1, n), j,
                                       seg_el, &lo, &ln)
                        ctx.post_send(c, &ag_send[(t + 1) * nseg + j], right,
                                      per + (t + 1) * nseg + j,
                                      buf + lo * isz, ln * isz)
                        _chunk_segment(offs, lens, _mod(r - t - 2, n), j,
                                       seg_el, &lo2, &ln2)
                        ctx.post_recv(c, &ag_recv[(t + 1) * nseg + j], left,
                                      per + (t + 1) * nseg + j,
                                      buf + lo2 * isz, ln2 * isz)
            ctx.waitall(c, ag_send, per)
        ctx.waitall(c, rs_send, per)
    finally:
        free(xs)
    return 0


cdef inline int64_t _mod(int64_t a, int64_t n) noexcept nogil:
    return ((a % n) + n) % n


cdef bint _end_to_end(int n, const int64_t *offs,
                      const int64_t *sizes) noexcept nogil:
    cdef int i
    for i in range(n - 1):
        if offs[i] + sizes[i] != offs[i + 1]:
            return False
    return True


cdef int pick_allgather(Context ctx, const int64_t *offs, const int64_t *sizes,
                        int algo) noexcept nogil:
    """The algorithm an allgatherv of blocks (offs, sizes) runs: recursive
    doubling needs a power-of-two size and blocks laid end to end in rank
    order (each step moves one contiguous range); otherwise the ring."""
    cdef int n = ctx.size, i
    cdef int64_t total = 0
    cdef bint doubling_ok = (n & (n - 1)) == 0 and _end_to_end(n, offs, sizes)
    for i in range(n):
        total += sizes[i]
    if algo == ALGO_AUTO:
        algo = auto_allgather(n, total)
    if algo == ALGO_RECURSIVE_DOUBLING and not doubling_ok:
        algo = ALGO_RING
    return algo


cdef int run_allgatherv(Context ctx, Coll *c, char *buf, const int64_t *offs,
                        const int64_t *sizes, int algo=ALGO_AUTO) except -1 nogil:
    """Block r (sizes[r] bytes at offs[r]) of rank r's buf into every buf."""
    cdef int n = ctx.size, i, k = 0
    cdef int radix[MAX_RADICES]
    cdef int64_t *bo
    if n == 1:
        return 0
    if pick_allgather(ctx, offs, sizes, algo) != ALGO_RECURSIVE_DOUBLING:
        return allgather_ring(ctx, c, buf, offs, sizes)
    # Recursive doubling: the allgather half of the radix-2 hypercube.
    while (1 << k) < n:
        radix[k] = 2
        k += 1
    bo = <int64_t *>_alloc((n + 1) * sizeof(int64_t))
    try:
        for i in range(n):
            bo[i] = offs[i]
        bo[n] = offs[n - 1] + sizes[n - 1]
        radix_exchange(ctx, c, buf, 1, n, ctx.rank, 0, radix, k, bo, NULL,
                       False, True)
    finally:
        free(bo)
    return 0


cdef int allgather_ring(Context ctx, Coll *c, char *buf, const int64_t *offs,
                        const int64_t *sizes) except -1 nogil:
    """Ring: at step t pass block r-t to the right, take block r-t-1 from
    the left."""
    cdef int n = ctx.size, r = ctx.rank, t, sb, rb
    cdef Xfer xs[2]
    for t in range(n - 1):
        sb = (r - t + n) % n
        rb = (r - t - 1 + n) % n
        ctx.post_send(c, &xs[1], (r + 1) % n, t, buf + offs[sb], sizes[sb])
        ctx.post_recv(c, &xs[0], (r - 1 + n) % n, t, buf + offs[rb], sizes[rb])
        ctx.waitall(c, xs, 2)
    return 0


cdef int pick_reduce_scatter(Context ctx, int64_t total_bytes,
                             int algo) noexcept nogil:
    """The algorithm a reduce_scatter of `total_bytes` per rank runs."""
    return algo if algo != ALGO_AUTO else auto_reduce_scatter(ctx.size, total_bytes)


cdef int run_reduce_scatter(Context ctx, Coll *c, char *acc,
                            const int64_t *offs, const int64_t *lens,
                            int algo) except -1 nogil:
    """Reduce every rank's `acc` (clobbered): rank r ends with block r
    (lens[r] elements at offs[r]; blocks laid end to end in rank order)
    reduced over every rank, in its `acc`."""
    cdef int n = ctx.size, i
    cdef int64_t total = 0
    if n == 1:
        return 0
    for i in range(n):
        total += lens[i]
    if pick_reduce_scatter(ctx, total * c.itemsize, algo) == ALGO_HALVING:
        return reduce_scatter_halving(ctx, c, acc, offs, lens, total)
    return ring_reduce_scatter(ctx, c, acc, offs, lens, False,
                               ctx.scratch(ring_scratch_bytes(ctx, c, lens)))


cdef int reduce_scatter_halving(Context ctx, Coll *c, char *acc,
                                const int64_t *offs, const int64_t *lens,
                                int64_t total) except -1 nogil:
    """Recursive halving over p = 2^k ranks (log2 p steps, each rank sends
    ~the buffer once). For n not a power of two the first 2*(n-p) ranks fold
    pairwise (even into odd) first; the odd rank then stands for both
    blocks, and sends the even one its block at the end."""
    cdef int n = ctx.size, r = ctx.rank, p = 1, k = 0, rem, vr, v
    cdef int radix[MAX_RADICES]
    cdef int64_t isz = c.itemsize, need
    cdef Xfer x
    cdef char *tmp
    while p * 2 <= n:
        radix[k] = 2
        k += 1
        p *= 2
    rem = n - p
    vr = r // 2 if r < 2 * rem else r - rem
    cdef int64_t *bo = <int64_t *>_alloc((p + 1) * sizeof(int64_t))
    try:
        for v in range(p):                    # virtual v's blocks: rank order
            bo[v] = offs[_real_rank(v, rem) - (1 if v < rem else 0)]
        bo[p] = offs[0] + total
        if r < 2 * rem and r % 2 == 0:
            ctx.post_send(c, &x, r + 1, TAG_FOLD_IN, acc + offs[0] * isz,
                          total * isz)
            ctx.wait(c, &x)
            ctx.post_recv(c, &x, r + 1, TAG_FOLD_OUT, acc + offs[r] * isz,
                          lens[r] * isz)
            ctx.wait(c, &x)
            return 0
        need = _radix_scratch(p, vr, radix, k, bo)
        tmp = ctx.scratch(max(need, total if rem else 0) * isz)
        if r < 2 * rem:
            ctx.post_recv(c, &x, r - 1, TAG_FOLD_IN, tmp, total * isz)
            ctx.wait(c, &x)
            c.fn(acc + offs[0] * isz, tmp, total)
        radix_exchange(ctx, c, acc, isz, p, vr, rem, radix, k, bo, tmp,
                       True, False)
        if r < 2 * rem:
            ctx.post_send(c, &x, r - 1, TAG_FOLD_OUT, acc + offs[r - 1] * isz,
                          lens[r - 1] * isz)
            ctx.wait(c, &x)
    finally:
        free(bo)
    return 0


cdef int pick_reduce(Context ctx, int64_t count, int64_t itemsize,
                     int algo) noexcept nogil:
    """The algorithm a reduce of `count` elements runs."""
    if algo != ALGO_AUTO:
        return algo
    return auto_reduce(ctx.size, count, itemsize)


cdef int run_reduce(Context ctx, Coll *c, char *acc, int64_t count, char *out,
                    int algo) except -1 nogil:
    """Reduce every rank's `acc` (its contribution, clobbered) to the root,
    which gets the result in `out` (its own `acc` may be `out`)."""
    cdef int n = ctx.size, r = ctx.rank, root = c.proto.root, i
    cdef int64_t isz = c.itemsize, nbytes = count * isz
    cdef int64_t *offs
    cdef int64_t *lens
    cdef Xfer *xs
    if n == 1:
        if out != acc:
            memmove(out, acc, nbytes)
        return 0
    if pick_reduce(ctx, count, isz, algo) != ALGO_RING:
        reduce_binomial(ctx, c, acc, count, ctx.scratch(nbytes))
        if r == root and out != acc:
            memmove(out, acc, nbytes)
        return 0
    # Large: ring reduce-scatter, then every rank sends its chunk to the root.
    offs = <int64_t *>_alloc(2 * n * sizeof(int64_t))
    lens = offs + n
    xs = NULL
    try:
        for i in range(n):
            lens[i] = count // n + (1 if i < count % n else 0)
            offs[i] = 0 if i == 0 else offs[i - 1] + lens[i - 1]
        ring_reduce_scatter(ctx, c, acc, offs, lens, False,
                            ctx.scratch(ring_scratch_bytes(ctx, c, lens)))
        if r != root:
            xs = <Xfer *>_alloc(sizeof(Xfer))
            ctx.post_send(c, xs, root, TAG_GATHER, acc + offs[r] * isz,
                          lens[r] * isz)
            ctx.wait(c, xs)
        else:
            xs = <Xfer *>_alloc(n * sizeof(Xfer))
            for i in range(n):
                if i != r:
                    ctx.post_recv(c, &xs[i], i, TAG_GATHER,
                                  out + offs[i] * isz, lens[i] * isz)
            if out != acc:
                memmove(out + offs[r] * isz, acc + offs[r] * isz, lens[r] * isz)
            for i in range(n):
                if i != r:
                    ctx.wait(c, &xs[i])
    finally:
        free(offs)
        free(xs)
    return 0


cdef int reduce_binomial(Context ctx, Coll *c, char *acc, int64_t count,
                         char *tmp) except -1 nogil:
    """Binomial tree towards the root: a rank folds in its children's partial
    results (lower relative rank first), then sends to its parent."""
    cdef int n = ctx.size, root = c.proto.root
    cdef int vr = (ctx.rank - root + n) % n, mask = 1
    cdef int64_t nbytes = count * c.itemsize
    cdef Xfer x
    while mask < n:
        if vr & mask:
            ctx.post_send(c, &x, (vr - mask + root) % n, mask, acc, nbytes)
            ctx.wait(c, &x)
            return 0
        if vr + mask < n:
            ctx.post_recv(c, &x, (vr + mask + root) % n, mask, tmp, nbytes)
            ctx.wait(c, &x)
            c.fn(acc, tmp, count)
        mask <<= 1
    return 0


cdef int run_scan(Context ctx, Coll *c, char *x, int64_t count, char *out,
                  bint exclusive) except -1 nogil:
    """Inclusive prefix reduction in log2(n) steps (Hillis-Steele): at step k
    a rank passes its partial result to rank+2^k and folds in rank-2^k's.
    `x` holds this rank's input and is clobbered; the result goes to `out`
    (exclusive: rank r gets rank r-1's inclusive result; rank 0's `out` is
    left alone)."""
    cdef int n = ctx.size, r = ctx.rank, k = 1
    cdef int64_t nbytes = count * c.itemsize
    cdef uint64_t step = 0
    cdef Xfer xs[2]
    cdef char *tmp = ctx.scratch(nbytes)
    while k < n:
        if r + k < n:
            ctx.post_send(c, &xs[0], r + k, step, x, nbytes)
        if r - k >= 0:
            ctx.post_recv(c, &xs[1], r - k, step, tmp, nbytes)
            ctx.wait(c, &xs[1])
        if r + k < n:
            ctx.wait(c, &xs[0])
        if r - k >= 0:
            _reduce_ordered(c, x, tmp, count, nbytes, True)
        k <<= 1
        step += 1
    if not exclusive:
        if out != x:
            memmove(out, x, nbytes)
        return 0
    if r + 1 < n:
        ctx.post_send(c, &xs[0], r + 1, step, x, nbytes)
    if r > 0:
        ctx.post_recv(c, &xs[1], r - 1, step, out, nbytes)
        ctx.wait(c, &xs[1])
    if r + 1 < n:
        ctx.wait(c, &xs[0])
    return 0


cdef int run_gatherv(Context ctx, Coll *c, const char *send, int64_t sendn,
                     char *recv, const int64_t *offs,
                     const int64_t *sizes) except -1 nogil:
    """Every rank sends its block straight to the root, which receives them
    all at once (one socket per peer)."""
    cdef int n = ctx.size, r = ctx.rank, root = c.proto.root, i
    cdef Xfer *xs
    if r != root:
        xs = <Xfer *>_alloc(sizeof(Xfer))
        try:
            ctx.post_send(c, xs, root, 0, send, sendn)
            ctx.wait(c, xs)
        finally:
            free(xs)
        return 0
    xs = <Xfer *>_alloc(n * sizeof(Xfer))
    try:
        for i in range(n):
            if i != r:
                ctx.post_recv(c, &xs[i], i, 0, recv + offs[i], sizes[i])
        if send is not NULL:
            memmove(recv + offs[r], send, sizes[r])
        for i in range(n):
            if i != r:
                ctx.wait(c, &xs[i])
    finally:
        free(xs)
    return 0


cdef int run_scatterv(Context ctx, Coll *c, const char *send,
                      const int64_t *offs, const int64_t *sizes, char *recv,
                      int64_t recvn) except -1 nogil:
    """The root sends every rank its block directly, all at once."""
    cdef int n = ctx.size, r = ctx.rank, root = c.proto.root, i
    cdef Xfer *xs
    if r != root:
        xs = <Xfer *>_alloc(sizeof(Xfer))
        try:
            ctx.post_recv(c, xs, root, 0, recv, recvn)
            ctx.wait(c, xs)
        finally:
            free(xs)
        return 0
    xs = <Xfer *>_alloc(n * sizeof(Xfer))
    try:
        for i in range(n):
            if i != r:
                ctx.post_send(c, &xs[i], i, 0, send + offs[i], sizes[i])
        if recv is not NULL:
            memmove(recv, send + offs[r], sizes[r])
        for i in range(n):
            if i != r:
                ctx.wait(c, &xs[i])
    finally:
        free(xs)
    return 0


cdef int run_alltoallv(Context ctx, Coll *c, const char *send,
                       const int64_t *soffs, const int64_t *ssizes, char *recv,
                       const int64_t *roffs, const int64_t *rsizes) except -1 nogil:
    """Every rank sends block i to rank i and receives rank i's block for it,
    all pairs at once; sends start at rank+1 so that no peer is everyone's
    first target."""
    cdef int n = ctx.size, r = ctx.rank, k, p
    cdef Xfer *xs = <Xfer *>_alloc(2 * n * sizeof(Xfer))
    try:
        for k in range(1, n):
            p = (r + k) % n
            ctx.post_send(c, &xs[p], p, 0, send + soffs[p], ssizes[p])
            p = (r - k + n) % n
            ctx.post_recv(c, &xs[n + p], p, 0, recv + roffs[p], rsizes[p])
        memmove(recv + roffs[r], send + soffs[r], rsizes[r])
        for k in range(n):
            if k != r:
                ctx.wait(c, &xs[n + k])
                ctx.wait(c, &xs[k])
    finally:
        free(xs)
    return 0
