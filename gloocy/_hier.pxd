# Two-level collectives (_hier.pxi) for a communicator whose ranks span
# hosts: a phase inside each host (through its node segment), one between
# the hosts' leaders, a fan-out inside each host. Python names: Hier,
# host_layout.

cdef class Layout:
    cdef list hosts                  # the ranks on each host; hosts ordered
                                     # by their lowest rank, ranks ascending
    cdef int *host_of                # host index of each rank
    cdef int *local_rank             # each rank's index in its host's list

cdef class Hier:
    cdef Layout layout               # where its fields below come from
    cdef readonly list hosts         # our ranks on each host; hosts ordered
                                     # by their lowest rank, ranks ascending
                                     # (shared: never change it)
    cdef int *host_of                # host index of each of our ranks
    cdef int *local_rank             # each rank's index in its host's list
    cdef readonly int host           # our host's index
    cdef readonly bint useful        # > 1 host and some host has > 1 rank
    cdef readonly Context local      # our host's ranks (None: not useful)
    cdef readonly Context leaders    # each host's lowest rank (None unless
                                     # we are our host's)
    cdef Context phase               # the one of them running (for errors)
    cdef Context on(self, Context phase)
    cdef close(self)

# ALGO_TWO_LEVEL if a call of algorithm `algo` moving `nbytes` runs
# two-level on ctx (forced, or automatic, useful and at least `auto_min`
# bytes, which every rank knows alike; -1: never automatic), else the
# algorithm it runs over the pairs; learns the host layout at the first
# call that asks (a collective over ctx: every rank asks at the same call).
# `at_scale` (barrier, allreduce): "auto" runs two-level at any size in a
# communicator of GLOOCY_TWO_LEVEL_MIN_RANKS ranks or more (64) whose layout
# the rendezvous told.
cdef int two_level(Context ctx, int algo, int64_t nbytes, int64_t auto_min,
                   object timeout, bint at_scale=*) except -1
# GLOOCY_TWO_LEVEL_MIN_RANKS (default 64; read once; ValueError if bad).
cdef int _min_ranks_at_scale() except -1

# The two-level bodies of Context's entry points (arguments checked).
cdef object hier_barrier(Context ctx, object timeout)
# The bytes a pipelined two-level call of nbytes moves at a time (at most
# `most` pieces).
cdef int64_t pipeline_piece(Context ctx, int64_t nbytes, int64_t most=*)
cdef object hier_bcast(Context ctx, Buf b, int root, object timeout)
cdef object hier_allreduce(Context ctx, Buf sb, Buf rb, int op, object timeout)
cdef object hier_reduce(Context ctx, Buf sb, Buf rb, int op, int root,
                        object timeout)
cdef object hier_allgatherv(Context ctx, Buf sb, Buf rb, I64 sizes, I64 offs,
                            object timeout)

# Shared by the two-level files: the call's deadline (and the context
# checked), what is left of it for the next phase, a phase's error told in
# ctx's ranks, and a Buf over memory the call owns.
cdef double _end(Context ctx, object timeout) except -1
cdef double _left(double end)
cdef int _explain(Context ctx, Hier h, BaseException e, str call) except -1
cdef Buf _raw(char *p, int64_t nbytes, int dtype, int64_t itemsize)
