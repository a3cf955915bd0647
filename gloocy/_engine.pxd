# The progress engine (_engine.pxi): a call's transfers are posted to the
# pairs, then driven without the GIL until done or the deadline.

# One collective call in flight: the header template its frames carry, its
# deadline, and its reduction kernel.
ctypedef struct Coll:
    Header proto            # kind, op, dtype, root, count, comm_id, seq
    int64_t deadline        # CLOCK_MONOTONIC nanoseconds
    reduce_fn fn            # kernel for (op, dtype), NULL when none
    int64_t itemsize        # bytes per element
    bint watch              # a call over the pairs beside a node segment:
                            # its waits watch the segment (node_watch)

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
cdef enum:
    LOOK_FLOOR_NS = 2000          # the least an adapted wait looks
    LOOK_PROBE_MIN = 8            # sleeps in a row before a full look is tried,
    LOOK_PROBE_MAX = 1024         # doubled (up to this) each time it sleeps too

# A wait that found nothing to move since `since`: 1 after a spin or a yield
# of the CPU (look again), 0 once `budget` ns are spent (sleep).
cdef int keep_looking(Context ctx, int64_t since, int64_t budget) except -1 nogil
# How long the next wait on the pairs looks, and what it learnt (learn_looks).
cdef int64_t look_budget(Context ctx) noexcept nogil
cdef void look_learn(Context ctx, int64_t budget, bint slept) noexcept nogil
# The adapting rule, for any wait: `most` is the longest a wait may look.
cdef int64_t looks_budget(Looks *k, int64_t most) noexcept nogil
cdef void learn_looks(Looks *k, int64_t most, int64_t budget, bint slept) noexcept nogil
# Between two spins of a wait: let other threads at the links.
cdef int pause(Context ctx) except -1 nogil
# Sleep in poll(2) for one slice (the links' lock dropped meanwhile).
cdef int block_poll(Context ctx, Coll *c) except -1 nogil
# Pending signals (Ctrl-C) raise, from code without the GIL.
cdef int _check_signals() except -1 nogil
