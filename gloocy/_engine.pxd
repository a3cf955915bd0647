# The progress engine (_engine.pxi): a call's transfers are posted to the
# pairs, then driven without the GIL until done or the deadline.

# One collective call in flight: the header template its frames carry, its
# deadline, and its reduction kernel.
ctypedef struct Coll:
    Header proto            # kind, op, dtype, root, count, comm_id, seq
    int64_t deadline        # CLOCK_MONOTONIC nanoseconds
    reduce_fn fn            # kernel for (op, dtype), NULL when none
    int64_t itemsize        # bytes per element

# Fill x to move n bytes at buf as step `tag` of call c (not posted yet).
cdef void prepare_xfer(Coll *c, Xfer *x, uint64_t tag, char *buf,
                       int64_t n) noexcept nogil
# Post a send / receive of n bytes to / from our rank `peer`, step `tag`.
cdef int post_send(Context ctx, Coll *c, Xfer *x, int peer, uint64_t tag,
                   const char *buf, int64_t n) except -1 nogil
cdef int post_recv(Context ctx, Coll *c, Xfer *x, int peer, uint64_t tag,
                   char *buf, int64_t n) except -1 nogil
# Drive every pair until `x` (or all `n` of `xs`) is done or the deadline.
cdef int wait_xfer(Context ctx, Coll *c, Xfer *x) except -1 nogil
cdef int waitall(Context ctx, Coll *c, Xfer *xs, int64_t n) except -1 nogil
# Move what the busy pairs can without blocking, and run the links'
# unfinished schedules on; 1 if anything moved.
cdef int progress_all(Context ctx) except -1 nogil
# A wait that found nothing to move since `since`: 1 after a spin or a yield
# of the CPU (look again), 0 once its spin and yield time are spent (sleep).
cdef int keep_looking(Context ctx, int64_t since) except -1 nogil
# Between two spins of a wait: let other threads at the links.
cdef int pause(Context ctx) except -1 nogil
# Sleep in poll(2) for one slice (the links' lock dropped meanwhile).
cdef int block_poll(Context ctx, Coll *c) except -1 nogil
# Pending signals (Ctrl-C) raise, from code without the GIL.
cdef int _check_signals() except -1 with gil
