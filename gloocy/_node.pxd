# The node segment (_node.pxi, _node_segment.pxi): one shared mapping for
# a world whose ranks are all on one host, the steps ranks take through it,
# and the node collectives built on whole-buffer steps. Python names:
# node_segment_bytes, new_node_segment. (The atomics of _atomics.h are
# declared in _node.pxi: the transports, which include this file, do not
# see that header.)

ctypedef struct NodeHead:
    uint64_t chunk                    # bytes of one rank's slot
    uint64_t cma_min                  # bytes from which calls copy once (_cma.pxi)
    uint64_t bcast_cma_min            # ... bcasts (see NODE_BCAST_CMA_MIN)
    uint64_t reduce_scatter_cma_min   # ... reduce_scatters
    int64_t allgather_cma_min         # ... allgathers (gathered bytes)
    uint64_t alltoall_cma_min         # ... alltoalls (bytes a rank sends the others)
    uint32_t nranks
    char _pad[12]

ctypedef struct NodeCtl:              # one rank's
    uint64_t phase                    # last phase it arrived at
    uint32_t sleeping                 # it sleeps: poke it through its pair
    int32_t cma_err[2]                # errno of its failed single copy, and
    int32_t cma_peer[2]               # from whom, at steps of each parity
    int32_t cpu                       # the CPU it arrived from (node_spread)
    int32_t pid                       # its process (node_check_peers)
    char _pad0[28]
    Header fp[2]                      # its call at steps of each parity
    char _pad1[32]
    Header pair_calls[4]              # its latest calls over the pairs beside
                                      # the segment (a small bcast's tree), by
                                      # seq % NODE_PAIR_CALLS (node_pair_call)


cdef enum:
    # A bcast goes through the segment from this many bytes when "auto"
    # (node_choice's auto_min; or from the segment's bcast_cma_min, if
    # lower: single copies are for large bcasts); below, the binomial tree over
    # the pairs. Its root writes into its children's rings and goes on, and
    # a reader waits for its parent alone, where a node step lets the root
    # run at most one call ahead of the slowest reader. Its calls are
    # published in the segment (node_pair_call), so that a mismatch with a
    # call through the segment is seen at once by both sides. Back-to-back
    # bcasts from root 0 at N = 4 on the project's 2-core machine loaded by
    # other jobs (forced, interleaved; slowest rank's mean per call over 3
    # runs of 4 rounds, tree vs segment): 8 B 3-10 vs 74-120 us, 1 KiB 4-8
    # vs 21-145, 16 KiB 27-43 vs 53-174, 32 KiB 32-64 vs 57-170, 64 KiB
    # 52-111 vs 60-122 (a tie from 48 to 96 KiB), 128 KiB 88-279 vs 43-273,
    # 256 KiB 176-607 vs 139-177. At N = 2 the tree ties from 64 KiB.
    # gloocy-bench's medians (the root's run-ahead shows there) favour the
    # tree up to 64 KiB, where the segment lost to loopback TCP in 1 of 2
    # runs (101 vs 31 us).
    NODE_BCAST_MIN = 128 << 10
    # ... but only up to this many ranks in the segment: past it every
    # bcast goes through the segment. The tree's pairs are N - 1 on the
    # host, each two rings and two sockets set up through a listener; in
    # one process of 4,096 rank threads (gloocy.testing) that was 56 s for
    # a first bcast of 512 B, against one step of the segment. Once made,
    # at 32-128 thread ranks of one process (512 B, load ~20) the tree and
    # the segment took 0.1-1.1 ms a call each, neither ahead throughout.
    NODE_BCAST_TREE_MAX_RANKS = 32
    # bcast, allgather, alltoall from this many bytes: single copy
    # (_cma.pxi) where the kernel allows it. At N = 2 on the project's
    # machine (busy: minimum of 15 runs, slots vs single copy): 256 KiB 15
    # vs 66 us (the slots stay in cache), 1 MiB 122-225 vs 192 us, 4 MiB
    # 760-900 vs 640-830 us, 16 MiB 5.2-8.7 vs 1.8-2.7 ms.
    NODE_CMA_MIN = 2 << 20
    # A bcast copies once from this many bytes where every rank of the host
    # has a CPU (the root writes a piece while each reader reads the rest,
    # all at once); where ranks outnumber CPUs, from NODE_CMA_MIN. At N = 2
    # on the project's quiet 2-core machine (slowest rank's median, slots
    # vs single copy): 64 KiB 10 vs 12 us (the tree: 10), 128 KiB 19 vs
    # 15, 256 KiB 36 vs 20, 1 MiB 108 vs 50; at N = 4, 256 KiB 41 vs 63,
    # 1 MiB 195 vs 214.
    NODE_BCAST_CMA_MIN = 128 << 10
    # A reduce_scatter copies once from this many bytes of input where
    # every rank of the host has a CPU (cma_min_where_cpus; where
    # they outnumber the CPUs, from NODE_CMA_MIN). At N = 2 on the
    # project's machine (python bench/cma_threshold.py --compare cma, slots
    # / single copies, median): at load 17-20 the slots won (1 MiB 47 vs 74
    # us, 4 MiB 250-265 vs 344-387, 16-64 MiB 0.83-1.07x), at load 7-640
    # they lost in six jobs (1 MiB 246-258 vs 76-87, 4 MiB 1002-1054 vs
    # 264-418 but once 608 vs 644, 16-64 MiB 2.0-2.6x): a slot step waits for the peer each time, and under
    # other jobs' load each wait may cost a turn of the run queue. MPICH
    # took 102-105 us at 1 MiB in the same hour.
    NODE_RS_CMA_MIN = 1 << 20
    # An allgather copies once from blocks of this many bytes (a segment of
    # N ranks: from N of them gathered; allgather_cma_min_bytes) where every
    # rank of the host has a CPU; where they outnumber the CPUs, from
    # NODE_ALLGATHER_CROWDED_BLOCK. This VM runs in
    # modes, job by job: in the slow one a line written by one CPU is read
    # by the other 2-5x slower (the CPUs sharing no cache, it seems), and
    # the slots with it; in another every copy (MPICH's too) takes twice
    # its time. At N = 2 against MPICH in the same job (bench/cma_vs_mpich.py,
    # MPICH's median / ours, 2026-12-05, bench/results/n2-n4-2026-12-05-h16e/):
    # fast mode, slots 1 MiB 1.13-1.40x, 2 MiB 1.03-1.35x, single copies
    # 1 MiB 0.98-1.42x, 2 MiB 0.96-1.11x; slow mode, slots 1 MiB 0.32-0.48x,
    # 2 MiB 0.28-0.31x; the slower mode, slots 1 MiB 1.25-2.0x, single
    # copies 1.11-1.57x. Reading each block from its owner's send buffer
    # instead of its result (and copying our own after the reads) lost
    # there at 4-16 MiB (e.g. 510-689 against 336-430 us at 4 MiB).
    NODE_ALLGATHER_CMA_BLOCK = 512 << 10
    # At N = 4 on 2 CPUs against heavy-yield MPICH in the same job (four
    # jobs, 16:47 UTC, load 4.5, cma_vs_mpich-n4-allgather-cma.txt; a Dup
    # with the default code as control), slots / single copies: 16 MiB
    # gathered 4089-6977 / 3839-4308 us, 64 MiB 20516-33907 / 15440-18446
    # (MPICH's / ours: slots 0.46-1.62x, single copies 1.02-1.70x); 4 MiB
    # mixed (1105-1456 / 1373-1411). Earlier runs (2026-12-04) had the slots
    # ahead at 4-64 MiB by 1.1-1.5x; none since.
    NODE_ALLGATHER_CROWDED_BLOCK = 4 << 20
    # An alltoall copies once from this many bytes sent to the others (a
    # rank's stream) where every rank of the host has a CPU; where they
    # outnumber the CPUs, from NODE_CMA_MIN (cma_min_where_cpus; at N = 4
    # on 2 CPUs the slots won at 4 MiB, 0.85x, lost at 16-64, 1.12x). The
    # modes as for allgathers: at N = 2 against MPICH in the same job (as
    # above), a 1 MiB alltoall (512 KiB streams): fast mode, slots
    # 1.29-1.47x, single copies 1.02-1.08x; slow mode, slots 0.23-0.27x,
    # single copies 1.06-1.07x (jobs interleaved with those). With the own
    # block copied after the reads (2026-12-06, an Intel host, one gloocy
    # communicator per job: bench/results/n2-2026-12-06-a2a/), MPICH's
    # median / ours at 128 KiB-512 KiB alltoalls: single copies 0.85-1.23x
    # (1.07-1.23x in 5 of 6 jobs), the slots 0.71-0.97x; 64 KiB: the
    # slots and single copies from 32 KiB alike (1.8-2.2x). MPICH (5.0.2,
    # ch4) reads every message from 8 KiB by process_vm_readv too.
    NODE_ALLTOALL_CMA_MIN = 64 << 10
    NODE_PAIR_CALLS = 4               # calls over the pairs kept per rank
    NODE_AWAKE = 0                    # values of a rank's `sleeping` word: awake,
    NODE_ON_FUTEX = 1                 # asleep on the word itself (futex_wake it),
    NODE_IN_POLL = 2                  # asleep in poll(2) on its pairs (poke it),
    NODE_FOR_RANK = 4                 # + r: on the word, for rank r's arrival alone


cdef class Node:
    cdef char *base
    cdef size_t nbytes
    cdef object map_key               # (st_dev, st_ino): the mapping this
                                      # process's Nodes of the segment share
    cdef int rank
    cdef int size
    cdef int64_t chunk                # bytes a step of bcast, allgather, reduce moves
    cdef int64_t stride               # a slot's bytes: chunk + node_headroom (the
                                      # exchanges' heads, _node_exchange.pxi)
    cdef readonly uint64_t step       # steps so far; slots alternate by parity
    cdef uint64_t owed                # phase A we left without waiting for all (0: none)
    cdef readonly int cma             # single-copy transfers (_cma.pxi): 1 in
                                      # use, -1 refused (agreed by all ranks)
    cdef readonly bint cma_willing    # ours are allowed (GLOOCY_CMA is not 0)
    cdef readonly int64_t cma_min     # bytes from which calls use them (the
                                      # segment's: alike on every rank)
    cdef readonly int64_t bcast_cma_min  # ... bcasts do
    cdef readonly int64_t reduce_scatter_cma_min  # ... reduce_scatters do
    cdef readonly int64_t allgather_cma_min  # ... allgathers do (gathered)
    cdef readonly int64_t alltoall_cma_min  # ... alltoalls do (bytes a rank
                                      # sends the others)
    cdef readonly uint64_t cma_calls  # calls done by single copy so far
    cdef readonly int64_t stream_min  # results from this many bytes are written
                                      # past the caches (GLOOCY_STREAM_MIN_BYTES)
    cdef readonly bint spread         # keep local ranks on CPUs of their own
                                      # (node_spread; GLOOCY_SPREAD=1)
    cdef readonly uint64_t moves      # times node_spread moved us
    cdef int64_t moved_ns             # when it last did
    cdef Looks looks                  # how long the next wait looks before it
                                      # sleeps (adapts: see node_spin_budget)
    cdef readonly int64_t look_floor_ns  # the least a wait looks before it
                                      # sleeps (GLOOCY_NODE_LOOK_US; 0)
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
# After a wait at phase A, before a long copy of our own: move off a CPU a
# lower-ranked rank is on (1 if we moved).
cdef int node_spread(Node nd) noexcept nogil

# Wake every other rank asleep in the segment (or watching it).
cdef void node_wake_all(Context ctx, bint everyone) noexcept nogil
# Our call c goes over the pairs while the context has a segment (a small
# bcast's tree): publish it in our control line, for the ranks waiting in
# the segment (node_check_pair_calls), then node_watch.
cdef int node_pair_call(Context ctx, Coll *c) except -1 nogil
# During such a call: MismatchError if a rank made a call through the
# segment at c's sequence number or before, where we made none.
cdef int node_watch(Context ctx, Coll *c) except -1 nogil
# ... and about to sleep, our `sleeping` word as one of the words to sleep
# on, so that an arrival in the segment wakes us (node_unwatch_word after).
# 0: nothing to watch; -1: a call of the segment is there already (look).
cdef int node_watch_word(Context ctx, Coll *c, WordWait *w) noexcept nogil
cdef void node_unwatch_word(Context ctx) noexcept nogil

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
