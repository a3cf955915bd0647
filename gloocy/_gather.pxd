# Allgather(v), gather(v), scatter(v) and alltoall(v) (_gather.pxi): the
# bodies of their Context methods.

cdef object call_allgatherv(Context ctx, object sendbuf, object recvbuf,
                            object counts, object displs, object timeout,
                            object algorithm)
cdef object call_gatherv(Context ctx, object sendbuf, object recvbuf,
                         object counts, object displs, int root,
                         object timeout, object algorithm,
                         bint uniform=*)
cdef object call_scatterv(Context ctx, object sendbuf, object recvbuf,
                          object counts, object displs, int root,
                          object timeout, object algorithm,
                          bint uniform=*)
cdef object call_alltoallv(Context ctx, object sendbuf, object sendcounts,
                           object senddispls, object recvbuf,
                           object recvcounts, object recvdispls,
                           object timeout, object algorithm,
                           bint uniform=*)
