# Exchange patterns several collectives share (_exchanges.pxi).

cdef enum:
    # Tags of the steps outside an algorithm's numbered ones (one list, so
    # that they stay distinct).
    TAG_FOLD_OUT = 0xffffffff     # recursive doubling: result back to a folded rank
    TAG_GATHER = 0xfffffffe      # reduce: reduced chunks sent to the root
    TAG_SCATTER = 0xfffffffd     # bcast scatter_allgather: the root's chunks
    TAG_FOLD_IN = 0xfffffffc     # halving: a folded rank's input to its partner
    MAX_RADICES = 64             # digits of a rank in a hypercube (log2 of 2^63)

# buf = tmp <op> buf when tmp came from a lower rank, else buf <op> tmp.
cdef void _reduce_ordered(Coll *c, char *buf, char *tmp, int64_t count,
                          int64_t nbytes, bint tmp_first) noexcept nogil
# Real rank of virtual rank v when the first 2*rem ranks fold in pairs.
cdef int _real_rank(int64_t v, int rem) noexcept nogil
# Elements of temporary space radix_exchange needs.
cdef int64_t _radix_scratch(int vn, int vr, const int *radix, int k,
                            const int64_t *bo) noexcept nogil
# Reduce-scatter and/or allgather over a mixed-radix hypercube.
cdef int radix_exchange(Context ctx, Coll *c, char *buf, int64_t isz, int vn,
                        int vr, int rem, const int *radix, int k,
                        const int64_t *bo, char *tmp, bint reduce_scatter,
                        bint allgather) except -1 nogil
# Bytes of temporary space ring_reduce_scatter needs.
cdef int64_t ring_scratch_bytes(Context ctx, Coll *c, const int64_t *lens) noexcept nogil
# Segmented ring reduce-scatter (then, with `allgather`, ring allgather).
cdef int ring_reduce_scatter(Context ctx, Coll *c, char *buf,
                             const int64_t *offs, const int64_t *lens,
                             bint allgather, char *tmp) except -1 nogil
# Ring allgather of blocks (offs[i], sizes[i]) in bytes of buf.
cdef int allgather_ring(Context ctx, Coll *c, char *buf, const int64_t *offs,
                        const int64_t *sizes) except -1 nogil
