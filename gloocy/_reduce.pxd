# Reduce, reduce_scatter and scan (_reduce.pxi): the bodies of their
# Context methods.

cdef object call_reduce(Context ctx, object sendbuf, object recvbuf, int op,
                        int root, object timeout, object algorithm)
cdef object call_reduce_scatter(Context ctx, object sendbuf, object recvbuf,
                                object counts, int op, object timeout,
                                object algorithm)
cdef object call_scan(Context ctx, object sendbuf, object recvbuf, int op,
                      bint exclusive, object timeout, object algorithm=*)
