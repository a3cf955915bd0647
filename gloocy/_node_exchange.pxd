# Node collectives that move blocks (_node_exchange.pxi), and when the
# automatic choice takes the node segment.

cdef enum:
    # When "auto" goes through the segment (node_choice's auto_min): each
    # algorithm forced through Context calls, node and pair interleaved,
    # medians of 9 runs per rank, slowest rank, on the project's 2-core
    # machine at n = 2-4 (figures below are node vs pair):
    # - allreduce, bcast, allgather(v), alltoall(v), reduce_scatter: at
    #   every size (alltoall and reduce_scatter tie with the pair
    #   algorithms up to 64 KiB and win from 1 MiB: 57 vs 120 us, 86 vs
    #   131 us at n = 2);
    NODE_ALWAYS = 0
    # - reduce: from this many bytes (below, the binomial tree wins: its
    #   leaves send and go on, where a node step waits for every rank,
    #   which costs most when ranks outnumber cores: 12 vs 9 us at 64 KiB,
    #   n = 2; 31 vs 37 us at 256 KiB, 497 vs 806 us at n = 4);
    NODE_REDUCE_MIN = 256 << 10
    # - gather(v), scatter(v): only when forced. Every rank would have to
    #   choose alike, and a rank knows only its own block's size; at small
    #   sizes the direct sends tie at n = 2 and win 2-13x when ranks
    #   outnumber cores, for the same reason as reduce's.
    NODE_FORCED_ONLY = -1

# ALGO_SHM if the call goes through the node segment (forced, or automatic
# from `auto_min` bytes), else `algo`.
cdef int node_choice(Context ctx, int algo, int64_t nbytes,
                     int64_t auto_min) noexcept
cdef extern from "_copy.h" nogil:
    void gloocy_copy_stream(void *dst, const void *src, size_t n)

# n bytes from src to dst: by streaming stores (past the caches) where
# `stream` asks and they do not overlap, else memmove'd. A call streams
# where its result on this rank reaches Node.stream_min.
cdef void copy_block(char *dst, const char *src, int64_t n,
                     bint stream) noexcept nogil
cdef int node_alltoallv(Context ctx, Coll *c, const char *send,
                        const int64_t *soffs, const int64_t *ssizes, char *recv,
                        const int64_t *roffs, const int64_t *rsizes) except -1 nogil
cdef int node_gatherv(Context ctx, Coll *c, const char *send, int64_t sendn,
                      char *recv, const int64_t *offs,
                      const int64_t *sizes) except -1 nogil
cdef int node_scatterv(Context ctx, Coll *c, const char *send,
                       const int64_t *offs, const int64_t *sizes, char *recv,
                       int64_t recvn) except -1 nogil
# Block `rank` of every rank's `send` reduced into `mine` (apart from
# `send`).
cdef int node_reduce_scatter(Context ctx, Coll *c, const char *send,
                             char *mine, const int64_t *offs,
                             const int64_t *lens) except -1 nogil
