# Allreduce (_allreduce.pxi): the body of Context.allreduce.

cdef object call_allreduce(Context ctx, object sendbuf, object recvbuf, int op,
                           object timeout, object algorithm)
