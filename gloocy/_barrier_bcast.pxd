# Barrier and broadcast (_barrier_bcast.pxi): the bodies of Context.barrier
# and Context.bcast.

cdef object call_barrier(Context ctx, object timeout, object algorithm=*)
cdef object call_bcast(Context ctx, object buf, int root, object timeout,
                       object algorithm)
