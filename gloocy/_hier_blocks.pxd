# Two-level gather(v), scatter(v), alltoall(v) and reduce_scatter
# (_hier_blocks.pxi): the bodies of Context's entry points when the ranks
# span hosts (arguments checked; buffers and layouts as call_* has them).

# uniform: the API's Gather, Scatter or Alltoall (every block one size, so
# no rank's sizes need gathering).
cdef object hier_gatherv(Context ctx, Buf sb, Buf rb, I64 sizes, I64 offs,
                         int root, bint uniform, object timeout)
cdef object hier_scatterv(Context ctx, Buf sb, Buf rb, I64 sizes, I64 offs,
                          int root, bint uniform, object timeout)
cdef object hier_reduce_scatter(Context ctx, Buf sb, Buf rb, I64 lens, int op,
                                object timeout)
cdef object hier_alltoallv(Context ctx, Buf sb, I64 soffs, I64 ssizes, Buf rb,
                           I64 roffs, I64 rsizes, bint uniform,
                           object timeout)
