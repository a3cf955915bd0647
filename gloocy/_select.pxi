# Which algorithm a collective runs. Each collective with a choice has a
# table of algorithm names (below), an environment override
# GLOOCY_ALGORITHM_<COLLECTIVE> and an automatic choice by world size and
# bytes (auto_*; bench/README.md "Algorithm selection"). Each call_* (the
# body of a Context entry point, in its family's file) resolves the name
# (_algorithm), picks (pick_*), records Context.last_algorithm and calls
# its run_*.


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
    # bcast: across hosts, the pipelined chain where its pipeline is long
    # (auto_bcast). Ranks on their own hosts (network namespaces, 1 rank
    # each, 1 Gbit/s links, back-to-back calls): 1.8-1.9x the binomial
    # tree's speed at n=4, 2.3-2.7x at n=8, 1-16 MiB, as the root's link
    # carries the buffer once instead of log2(n) times. Not on one host:
    # over loopback TCP, 3-8 ranks on 2 CPUs, it was within the noise at
    # n=4-8 (block medians 0.9-1.1x) and slower at n=3 (0.68x at 64 MiB);
    # bench/results/tcp-n4-2026-12-06/. Else scatter + ring allgather only
    # from this many ranks and bytes (n=8: tie at 16 MiB, 145 vs 160 ms at
    # 64 MiB, against the tree). Below, the pipelined binomial tree wins (it
    # moves fewer bytes in all, which is what counts when every rank shares
    # one host's memory bandwidth).
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
    # Ranks on several hosts (_hier.pxi), 2 x 2 ranks in network namespaces
    # (bench/hosts.py, bench/results/hosts/): two-level allreduce and reduce
    # from 64 KiB (1 Gbit/s link: 2.0x faster than flat at 64 KiB, 1.7x at
    # 1 MiB; 4 B: 0.5x), allgather from 1 MiB moved (1.7-2.3x at 1 MiB).
    # Bcast from 64 KiB: its flat tree crosses the link once from a root
    # that leads its host (two-level 1.0-1.2x at 64 KiB, 0.4-1.2x below),
    # three times from the other rank there (two-level 1.2x at 64 KiB,
    # 1.5x on the 1 Gbit/s link).
    # The barrier stays flat unless forced (small calls lose).
    # reduce_scatter from 1 MiB of input (1 Gbit/s: 1.5-2.0x faster than
    # flat at 1 MiB, 1.0-1.1x at 16 MiB, 0.7-1.0x at 64 KiB; unlimited
    # veth: 0.4-1.1x). Gather, Scatter and Alltoall cross the link with the
    # flat forms' bytes and fewer messages, but lost to them at every size
    # 64 B-16 MiB in two runs (0.04-1.5x): forced only
    # (bench/results/hosts/, 2026-12-04, load 6-190).


# One table per collective: name -> code. "auto" (or None) is the automatic
# choice; the keyword wins over the GLOOCY_ALGORITHM_<COLLECTIVE> variable.
# "shm" is the node segment's algorithm (_node.pxi, _node_exchange.pxi),
# which "auto" picks where it wins when every rank is on one host; forced
# where there is no segment, it falls back to the automatic pair choice.
# "two_level" (_hier.pxi) is for ranks on several hosts: "auto" picks it
# where some host has more than one rank and the call moves at least
# TWO_LEVEL_MIN bytes; forced where all are on one host, it falls back to
# the automatic choice.
ALLREDUCE_ALGORITHMS = {"auto": ALGO_AUTO, "ring": ALGO_RING,
                        "recursive_doubling": ALGO_RECURSIVE_DOUBLING,
                        "halving_doubling": ALGO_HALVING_DOUBLING,
                        "bcube": ALGO_BCUBE, "shm": ALGO_SHM,
                        "two_level": ALGO_TWO_LEVEL}
BCAST_ALGORITHMS = {"auto": ALGO_AUTO, "binomial": ALGO_BINOMIAL,
                    "chain": ALGO_CHAIN,
                    "scatter_allgather": ALGO_SCATTER_ALLGATHER,
                    "shm": ALGO_SHM, "two_level": ALGO_TWO_LEVEL}
ALLGATHER_ALGORITHMS = {"auto": ALGO_AUTO, "ring": ALGO_RING,
                        "recursive_doubling": ALGO_RECURSIVE_DOUBLING,
                        "shm": ALGO_SHM, "two_level": ALGO_TWO_LEVEL}
REDUCE_SCATTER_ALGORITHMS = {"auto": ALGO_AUTO, "ring": ALGO_RING,
                             "halving": ALGO_HALVING, "shm": ALGO_SHM,
                             "two_level": ALGO_TWO_LEVEL}
# "recursive_doubling" is the old name of the binomial tree (kept working).
REDUCE_ALGORITHMS = {"auto": ALGO_AUTO, "binomial": ALGO_BINOMIAL,
                     "ring": ALGO_RING,
                     "recursive_doubling": ALGO_BINOMIAL, "shm": ALGO_SHM,
                     "two_level": ALGO_TWO_LEVEL}
GATHER_ALGORITHMS = {"auto": ALGO_AUTO, "direct": ALGO_DIRECT, "shm": ALGO_SHM,
                     "two_level": ALGO_TWO_LEVEL}
SCATTER_ALGORITHMS = {"auto": ALGO_AUTO, "direct": ALGO_DIRECT, "shm": ALGO_SHM,
                      "two_level": ALGO_TWO_LEVEL}
ALLTOALL_ALGORITHMS = {"auto": ALGO_AUTO, "direct": ALGO_DIRECT,
                       "shm": ALGO_SHM, "two_level": ALGO_TWO_LEVEL}
# scan and exscan: Hillis-Steele over the pairs, or the node segment.
SCAN_ALGORITHMS = {"auto": ALGO_AUTO, "recursive_doubling": ALGO_RECURSIVE_DOUBLING,
                   "shm": ALGO_SHM}
# barrier: "auto" runs in the node segment where there is one (a derived
# communicator's too), else "recursive_doubling" (the allreduce's partners);
# "recursive_doubling" and "dissemination" run over the pairs, even with a
# segment.
BARRIER_ALGORITHMS = {"auto": ALGO_AUTO, "recursive_doubling": ALGO_RECURSIVE_DOUBLING,
                      "dissemination": ALGO_DISSEMINATION,
                      "shm": ALGO_SHM, "two_level": ALGO_TWO_LEVEL}
ALGORITHMS = ALLREDUCE_ALGORITHMS      # the name before there were others
ALGORITHM_TABLES = {"allreduce": ALLREDUCE_ALGORITHMS,
                    "bcast": BCAST_ALGORITHMS,
                    "allgather": ALLGATHER_ALGORITHMS,
                    "reduce_scatter": REDUCE_SCATTER_ALGORITHMS,
                    "reduce": REDUCE_ALGORITHMS,
                    "gather": GATHER_ALGORITHMS,
                    "scatter": SCATTER_ALGORITHMS,
                    "alltoall": ALLTOALL_ALGORITHMS,
                    "scan": SCAN_ALGORITHMS,
                    "barrier": BARRIER_ALGORITHMS}
ALGORITHM_ENV = {name: f"GLOOCY_ALGORITHM_{name.upper()}"
                 for name in ALGORITHM_TABLES}
# code -> the name Context.last_algorithm reports
ALGORITHM_NAMES = {ALGO_AUTO: "auto", ALGO_RING: "ring",
                   ALGO_RECURSIVE_DOUBLING: "recursive_doubling",
                   ALGO_HALVING_DOUBLING: "halving_doubling",
                   ALGO_BCUBE: "bcube", ALGO_BINOMIAL: "binomial",
                   ALGO_SCATTER_ALLGATHER: "scatter_allgather",
                   ALGO_HALVING: "halving", ALGO_SHM: "shm",
                   ALGO_DIRECT: "direct", ALGO_TWO_LEVEL: "two_level",
                   ALGO_DISSEMINATION: "dissemination", ALGO_CHAIN: "chain"}


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


cdef int auto_bcast(int n, int64_t nbytes, int64_t segment,
                    bint one_host) noexcept nogil:
    """Across hosts, the pipelined chain where its pipeline is long: it
    takes about nseg + n - 2 segment times (each rank's link carries the
    buffer once), the binomial tree's root about depth * nseg (its link
    carries it to each of its depth = ceil(log2 n) children). With every
    rank on one host (`one_host`) the links are memory and the host's CPUs
    do all the copies alike, and the chain's forwarders copy the next
    call's early frames through the stash: the tree. Else scatter +
    allgather or the tree, as measured (AUTO_BCAST_SCATTER_*)."""
    cdef int64_t nseg = (nbytes + segment - 1) // segment if segment > 0 else 1
    cdef int depth = 0
    while (1 << depth) < n:
        depth += 1
    if not one_host and n > 2 and nseg * (depth - 1) > n - 2:
        return ALGO_CHAIN
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


# The collectives "auto" runs two-level (_hier.pxi) from this many bytes.
TWO_LEVEL_MIN = {"allreduce": AUTO_TWO_LEVEL_REDUCE_MIN,
                 "reduce": AUTO_TWO_LEVEL_REDUCE_MIN,
                 "reduce_scatter": AUTO_TWO_LEVEL_BLOCKS_MIN,
                 "bcast": AUTO_TWO_LEVEL_BCAST_MIN,
                 "allgather": AUTO_TWO_LEVEL_BLOCKS_MIN}
# ... and up to this many bytes per block (uniform forms only; -1: never).
TWO_LEVEL_MAX = {"gather": AUTO_TWO_LEVEL_GATHER_MAX,
                 "scatter": AUTO_TWO_LEVEL_SCATTER_MAX,
                 "alltoall": AUTO_TWO_LEVEL_ALLTOALL_MAX}


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
    "node_bcast_min": NODE_BCAST_MIN,       # ... (_node.pxd)
    "node_bcast_tree_max_ranks": NODE_BCAST_TREE_MAX_RANKS,  # ... (_node.pxd)
    "two_level_reduce_min": AUTO_TWO_LEVEL_REDUCE_MIN,  # several hosts
    "two_level_blocks_min": AUTO_TWO_LEVEL_BLOCKS_MIN,
    "two_level_bcast_min": AUTO_TWO_LEVEL_BCAST_MIN,
    "two_level_gather_max": AUTO_TWO_LEVEL_GATHER_MAX,  # per block, -1: never
    "two_level_scatter_max": AUTO_TWO_LEVEL_SCATTER_MAX,
    "two_level_alltoall_max": AUTO_TWO_LEVEL_ALLTOALL_MAX,
}


cdef inline int64_t node_bcast_min(int64_t cma_min, int size) noexcept nogil:
    """A bcast goes through the node segment from this many bytes ("auto"):
    NODE_BCAST_MIN, or the segment's single-copy threshold for bcasts
    (`cma_min`) if lower; always past NODE_BCAST_TREE_MAX_RANKS ranks."""
    if size > NODE_BCAST_TREE_MAX_RANKS:
        return 0
    return min(<int64_t>NODE_BCAST_MIN, cma_min)


def auto_algorithm(str collective, int size, int64_t nbytes, *,
                   int64_t itemsize=4, int64_t small_allreduce=1 << 16,
                   bint node=False, int hosts=1, int64_t cma_min=NODE_CMA_MIN,
                   int64_t segment=1 << 20):
    """The name of the algorithm "auto" picks for `collective` at world size
    `size` and `nbytes` (allreduce, reduce, bcast: the buffer; allgather:
    the gathered total in equal blocks laid end to end; reduce_scatter:
    each rank's input; gather, scatter, alltoall: a block, as their
    uniform forms Gather, Scatter and Alltoall choose). `node`: every rank
    is on one host (a world of 2 or more with a node segment); `hosts`:
    how many hosts the ranks are on (two-level where 1 < hosts < size;
    an allreduce of any size from GLOOCY_TWO_LEVEL_MIN_RANKS ranks, where
    the rendezvous told the layout, as gloocy.connect's does);
    `cma_min`: the node segment's single-copy threshold for bcasts (they
    go through the segment from there, if that is below node_bcast_min);
    `segment`: the pipeline segment (GLOOCY_SEGMENT_BYTES) of bcasts."""
    cdef int code
    if size < 1 or nbytes < 0 or itemsize < 1 or hosts < 1:
        raise ValueError("size, nbytes, itemsize and hosts must be positive")
    if 1 < hosts < size and (
            nbytes >= TWO_LEVEL_MIN.get(collective, -1) >= 0
            or 0 <= nbytes <= TWO_LEVEL_MAX.get(collective, -1)
            or (collective == "allreduce"        # at scale (_hier.pxi)
                and size >= _min_ranks_at_scale())):
        return "two_level"
    if node and size > 1:
        if collective in ("allreduce", "allgather", "alltoall",
                          "reduce_scatter") or (
                collective == "reduce" and nbytes >= NODE_REDUCE_MIN) or (
                collective == "bcast" and nbytes >= node_bcast_min(cma_min, size)):
            return "shm"
    if collective in ("gather", "scatter", "alltoall"):
        return "direct"
    if collective == "allreduce":
        code = auto_allreduce(size, small_allreduce, nbytes // itemsize, itemsize)
    elif collective == "reduce":
        code = auto_reduce(size, nbytes // itemsize, itemsize)
    elif collective == "bcast":
        code = auto_bcast(size, nbytes, segment, node or hosts == 1)
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


# -- the choice a call makes (`algo` unless automatic) -----------------------

cdef int pick_bcast(Context ctx, int64_t nbytes, int algo) except -1:
    """The algorithm a bcast of `nbytes` runs (`algo` unless automatic)."""
    if algo != ALGO_AUTO:
        return algo
    return auto_bcast(ctx.size, nbytes, ctx.segment, _one_host(ctx))


cdef bint _one_host(Context ctx):
    """Every rank of ctx is on this host, as far as ctx knows: it has a node
    segment, is a host's phase of a two-level call (h.local, which learns
    no layout), or the layout its two-level check learnt has one host (not
    learnt, as for the leaders of a two-level call: no)."""
    cdef uint32_t local = HIER_SHADOW_ID | HIER_LOCAL_ID
    # (a transient id, which may have these bits, only agrees on an id)
    if ctx.node is not None or (ctx.comm_id & local) == local:
        return True
    hosts = None if ctx.hier is None else (<Hier>ctx.hier).hosts
    return hosts is not None and len(hosts) == 1


cdef int pick_allreduce(Context ctx, int64_t count, int64_t itemsize,
                        int algo) noexcept nogil:
    """The algorithm an allreduce of `count` elements runs."""
    if algo != ALGO_AUTO:
        return algo
    return auto_allreduce(ctx.size, ctx.small_allreduce, count, itemsize)


cdef int pick_reduce(Context ctx, int64_t count, int64_t itemsize,
                     int algo) noexcept nogil:
    """The algorithm a reduce of `count` elements runs."""
    if algo != ALGO_AUTO:
        return algo
    return auto_reduce(ctx.size, count, itemsize)


cdef int pick_reduce_scatter(Context ctx, int64_t total_bytes,
                             int algo) noexcept nogil:
    """The algorithm a reduce_scatter of `total_bytes` per rank runs."""
    return algo if algo != ALGO_AUTO else auto_reduce_scatter(ctx.size, total_bytes)


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
