# Schedules (_schedule.pxi): a nonblocking collective as a list of steps
# (sends, receives, waits, local reductions and copies) that the progress
# engine runs as far as it can on each call, without a thread. Python
# names: finish_schedules.

# What a step does.
cdef enum StepKind:
    STEP_SEND = 1                 # post a send of src[:nbytes] to peer
    STEP_RECV = 2                 # post a receive into dst[:nbytes] from peer
    STEP_FENCE = 3                # wait for every send and receive before it
    STEP_WAIT = 4                 # wait for the transfer of step `peer` (an index)
    STEP_REDUCE = 5               # dst = dst <op> src (count elements);
                                  # tag 1: src <op> dst, the result in dst
    STEP_COPY = 6                 # dst[:nbytes] = src[:nbytes]


ctypedef struct Step:
    int kind                # StepKind
    int peer                # our rank of the peer
    uint64_t tag            # the frame's step tag (STEP_REDUCE: 1 for src first)
    char *dst
    char *src
    int64_t nbytes          # bytes (STEP_REDUCE: elements; STEP_WAIT: the
                            # index of the step waited for)
    Xfer x                  # the posted transfer of a send or receive


# One nonblocking collective in flight: its call (header, deadline,
# kernel), its steps, and how far it got. Heap memory, freed with its
# handle; the Links keep the unfinished ones in a list (`link`) that every
# progress call advances.
ctypedef struct Sched:
    Coll c
    Step *steps
    int64_t nsteps
    int64_t cap
    int64_t next            # first step not run yet
    int64_t fence_from      # first step the next STEP_FENCE waits for
    void **mem              # memory the schedule owns (temporaries)
    int nmem
    int state               # SCHED_BUILDING, _RUNNING, _DONE, _FAILED
    void *ctx               # the Context (borrowed: its handle keeps it)
    void *user              # OP_USER: its UserOp (its handle keeps it)
    void *error             # what the user op raised (a reference), or NULL
    Sched *link             # next unfinished schedule of the same Links


cdef enum SchedState:
    SCHED_BUILDING = 0
    SCHED_RUNNING = 1
    SCHED_DONE = 2
    SCHED_FAILED = 3              # a call over the same links failed: forgotten


# Run what can run of every unfinished schedule of the links; 1 if any
# step ran. With the links' lock held (progress_all calls it).
cdef int advance_schedules(Links links) except -1 nogil
# Forget every unfinished schedule of the links (fail() calls it).
cdef void drop_schedules(Links links) noexcept nogil
# The lowest sequence number of an unfinished schedule of context `ctx`
# (UINT64_MAX: none): frames of those calls may wait in the stash.
cdef uint64_t schedules_low_seq(Context ctx) noexcept nogil


# A nonblocking collective's handle: the schedule, and what must live until
# it is done (its buffers). The requests layer drives it.
cdef class NbcHandle:
    cdef Context ctx
    cdef Sched *s
    cdef list keep          # Bufs and arrays the steps point into
    cdef bint finished
    # Build: a step; memory the schedule owns.
    cdef int send(self, int peer, uint64_t tag, const char *src, int64_t n) except -1
    cdef int recv(self, int peer, uint64_t tag, char *dst, int64_t n) except -1
    cdef int fence(self) except -1
    cdef int64_t wait_for(self, int64_t step) except -1
    cdef int reduce(self, char *dst, const char *src, int64_t count,
                    bint src_first) except -1
    cdef int copy(self, char *dst, const char *src, int64_t n) except -1
    cdef char *alloc(self, int64_t nbytes) except NULL
    # Post the first steps and join the links' unfinished schedules (or
    # finish at once). With the links' lock held.
    cdef int start(self) except -1
    # Take the call's sequence number (begin), then start().
    cdef int launch(self, int kind, int op, int dtype, int root,
                    uint64_t count, reduce_fn fn) except -1
    cdef void _free_steps(self) noexcept
    cdef void _finished(self) noexcept
    cdef int _raise_user_error(self) except -1
    cdef Step *_add(self, int kind) except NULL
    # One attempt to finish (block: until done or the deadline); 1 if done.
    cdef int _step(self, bint block, object timeout) except -1


# Start a nonblocking collective: the bodies of Context.i<name>
# (_schedule_algorithms.pxi).
cdef NbcHandle start_barrier(Context ctx)
cdef NbcHandle start_bcast(Context ctx, object buf, int root)
cdef NbcHandle start_allreduce(Context ctx, object sendbuf, object recvbuf,
                               int op)
cdef NbcHandle start_reduce(Context ctx, object sendbuf, object recvbuf,
                            int op, int root)
cdef NbcHandle start_allgatherv(Context ctx, object sendbuf, object recvbuf,
                                object counts, object displs)
cdef NbcHandle start_gatherv(Context ctx, object sendbuf, object recvbuf,
                             object counts, object displs, int root)
cdef NbcHandle start_scatterv(Context ctx, object sendbuf, object recvbuf,
                              object counts, object displs, int root)
cdef NbcHandle start_alltoallv(Context ctx, object sendbuf, object sendcounts,
                               object senddispls, object recvbuf,
                               object recvcounts, object recvdispls)
cdef NbcHandle start_reduce_scatter(Context ctx, object sendbuf,
                                    object recvbuf, object counts, int op)
cdef NbcHandle start_scan(Context ctx, object sendbuf, object recvbuf, int op,
                          bint exclusive)

# Intercommunicators' reductions over the union context (_schedule_inter.pxi):
# our group is union ranks loff.. loff+lsize-1 (we are lrank of it).
cdef NbcHandle start_inter_allreduce(Context union, int lsize, int lrank,
                                     int loff, int rleader, object sendbuf,
                                     object recvbuf, int op)
cdef NbcHandle start_inter_reduce(Context union, int lsize, int lrank,
                                  int loff, int peer, int role,
                                  object sendbuf, object recvbuf, int op)
cdef NbcHandle start_inter_reduce_scatter(Context union, int lsize,
                                          int lrank, int loff, int rleader,
                                          object sendbuf, object recvbuf,
                                          object counts, int op)
# The neighbourhood exchange (_schedule_neighbors.pxi).
cdef NbcHandle start_neighbors(Context ctx, list sends, list recvs,
                               list copies)
