# Failure (_failure.pxi): poisoning after an error and naming its root
# cause. Python name: TRACE_GRACE.

# Something raised mid-call: poison the context and its links, tell the
# peers why, forget the call's transfers. With the links' lock held.
cdef int fail(Context ctx, BaseException exc, Coll *c) except -1
# CollectiveTimeout naming the ranks we wait for.
cdef int _raise_timeout(Context ctx, Coll *c) except -1 with gil
# ContextPoisoned: a call over the same links failed.
cdef int _raise_links_failed(Context ctx) except -1 with gil
# The error a peer's abort (frame or store record) tells of.
cdef object told_error(int rank, int peer, bytes raw, int code, int culprit,
                       int origin, bytes waits)
