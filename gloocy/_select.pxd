# Algorithm choice (_select.pxi): the algorithms of each collective by
# name, the GLOOCY_ALGORITHM_* overrides and the automatic choice. Python
# names: ALLREDUCE_ALGORITHMS, BCAST_ALGORITHMS, ALLGATHER_ALGORITHMS,
# REDUCE_SCATTER_ALGORITHMS, REDUCE_ALGORITHMS, GATHER_ALGORITHMS,
# SCATTER_ALGORITHMS, ALLTOALL_ALGORITHMS, BARRIER_ALGORITHMS, ALGORITHMS, ALGORITHM_TABLES,
# ALGORITHM_ENV, ALGORITHM_NAMES, ALGORITHM_THRESHOLDS, auto_algorithm.

cdef enum:
    # From how many bytes "auto" runs two-level (_select.pxi).
    AUTO_TWO_LEVEL_REDUCE_MIN = 64 << 10     # allreduce, reduce
    AUTO_TWO_LEVEL_BLOCKS_MIN = 1 << 20      # allgather (gathered),
                                             # reduce_scatter (input)
    AUTO_TWO_LEVEL_BCAST_MIN = 64 << 10      # bcast
    # Up to how many bytes per block "auto" runs Gather, Scatter and
    # Alltoall two-level (the v forms: only when forced); -1: never (at
    # 2 x 2 here they lost to the flat forms at every size: _select.pxi).
    AUTO_TWO_LEVEL_GATHER_MAX = -1
    AUTO_TWO_LEVEL_SCATTER_MAX = -1
    AUTO_TWO_LEVEL_ALLTOALL_MAX = -1

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
    ALGO_TWO_LEVEL = 10          # inside each host, across leaders, inside (_hier.pxi)
    ALGO_DISSEMINATION = 11      # barrier over the pairs
    ALGO_CHAIN = 12              # bcast: root -> root+1 -> ..., pipelined

# {collective: name} of the GLOOCY_ALGORITHM_* variables set now (None: none).
cdef dict env_algorithms()
# The code of `collective`'s algorithm `name` (None: env's, else automatic).
cdef int _algorithm(str collective, object name, dict env) except -1

# The algorithm a call runs: `algo` unless ALGO_AUTO (then the automatic
# choice for the world size and bytes); pick_allgather also falls back from
# recursive doubling to the ring where it cannot run.
cdef int pick_bcast(Context ctx, int64_t nbytes, int algo) except -1
cdef int pick_allreduce(Context ctx, int64_t count, int64_t itemsize,
                        int algo) noexcept nogil
cdef int pick_reduce(Context ctx, int64_t count, int64_t itemsize,
                     int algo) noexcept nogil
cdef int pick_reduce_scatter(Context ctx, int64_t total_bytes,
                             int algo) noexcept nogil
cdef int pick_allgather(Context ctx, const int64_t *offs, const int64_t *sizes,
                        int algo) noexcept nogil
