# The node segment (_node.pxi): one shared mapping for a world whose ranks
# are all on one host, the steps ranks take through it, and the node
# collectives built on whole-buffer steps. Python names:
# node_segment_bytes, new_node_segment. (The atomics of _atomics.h are
# declared in _node.pxi: the transports, which include this file, do not
# see that header.)

ctypedef struct NodeHead:
    uint64_t chunk                    # bytes of one rank's slot
    uint64_t cma_min                  # bytes from which calls copy once (_cma.pxi)
    uint32_t nranks
    char _pad[44]

ctypedef struct NodeCtl:              # one rank's
    uint64_t phase                    # last phase it arrived at
    uint32_t sleeping                 # it sleeps: poke it through its pair
    int32_t cma_err[2]                # errno of its failed single copy, and
    int32_t cma_peer[2]               # from whom, at steps of each parity
    char _pad0[36]
    Header fp[2]                      # its call at steps of each parity
    char _pad1[32]


cdef enum:
    # A bcast goes through the segment from this many bytes when "auto"
    # (node_choice's auto_min); below, the binomial tree over the pairs.
    # The tree is faster for small bcasts on a loaded host (its root writes
    # into its children's rings and goes on; a node step lets the root run
    # at most one call ahead of the slowest reader), but its readers wait
    # on their pairs only: a root that called another collective through
    # the segment is not seen, and they would wait to the deadline instead
    # of raising MismatchError at once. So every bcast with a segment goes
    # through it until pair waits also watch the segment's fingerprints;
    # algorithm="binomial" still forces the tree.
    NODE_BCAST_MIN = 0


cdef class Node:
    cdef char *base
    cdef size_t nbytes
    cdef int rank
    cdef int size
    cdef int64_t chunk
    cdef uint64_t step                # steps so far; slots alternate by parity
    cdef uint64_t owed                # phase A we left without waiting for all (0: none)
    cdef readonly int cma             # single-copy transfers (_cma.pxi): 1 in
                                      # use, -1 refused (agreed by all ranks)
    cdef readonly bint cma_willing    # ours are allowed (GLOOCY_CMA is not 0)
    cdef readonly int64_t cma_min     # bytes from which calls use them (the
                                      # segment's: alike on every rank)
    cdef readonly uint64_t cma_calls  # calls done by single copy so far
    cdef Looks looks                  # how long the next wait looks before it
                                      # sleeps (adapts: see node_spin_budget)
    cdef NodeHead *head
    cdef NodeCtl *ctl
    cdef char *data
    cdef char *slot(self, int r) noexcept nogil


# Move what the pairs can (frames that came or wait to leave), and run the
# unfinished schedules on.
cdef int node_progress(Context ctx) except -1 nogil
# A step: wait what our last step left owed (node_ready), then, our slot
# written, arrive and wait for all (node_step_in) or arrive and go on, the
# wait owed to the next step (node_step_out).
cdef int node_ready(Context ctx, Coll *c) except -1 nogil
cdef int node_step_in(Context ctx, Coll *c) except -1 nogil
cdef int node_step_out(Context ctx, Coll *c) except -1 nogil

cdef int node_barrier(Context ctx, Coll *c) except -1 nogil
cdef int node_bcast(Context ctx, Coll *c, char *buf, int64_t nbytes,
                    int root) except -1 nogil
cdef int node_allreduce(Context ctx, Coll *c, char *buf, int64_t count) except -1 nogil
# Reduce to `root`'s buf (root -1: to every rank's, an allreduce).
cdef int node_reduce_to(Context ctx, Coll *c, char *buf, int64_t count,
                        int root) except -1 nogil
cdef int node_allgatherv(Context ctx, Coll *c, const char *mine, char *buf,
                         const int64_t *offs, const int64_t *sizes) except -1 nogil
# FNV-1a of the block sizes, for the fingerprint of a node allgather.
cdef uint64_t sizes_digest(I64 sizes)
