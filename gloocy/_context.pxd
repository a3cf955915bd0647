# The Context (_context.pxi): its fields, its lifecycle and the bookkeeping
# of one call. Its entry points are thin: each calls call_<name> in its
# family's file.

cdef class Context:
    cdef object __weakref__           # the links keep weak references (install_pair)
    cdef readonly Node node           # the node segment, or None
    cdef public bint node_wanted      # derived: share a node segment at the
                                      # first collective (share_node_segment)
    cdef readonly Links links         # the connections, shared with Dups
    cdef public object hier           # host layout and the two-level
                                      # collectives' contexts (Hier,
                                      # _hier.pxi); None: not learnt yet
    cdef int *_world                  # links rank of each of our ranks
    cdef int *_local                  # our rank of each links rank (-1: none)
    cdef int _efd                     # eventfd others wake us by (-1: none yet)
    cdef bint has_efd(self) noexcept nogil
    cdef readonly int rank            # this process's rank
    cdef readonly int size            # number of ranks
    cdef readonly uint32_t comm_id    # tags every frame of this context
    cdef readonly uint64_t seq        # collectives issued so far
    cdef public double timeout        # default deadline of a call, seconds
    cdef readonly object error        # first fatal error; set => poisoned
    cdef readonly bint closed         # close() was called
    cdef list _pairs                  # Pair per rank (None at our own rank)
    cdef void **_pair_ptrs            # borrowed _pairs items, for nogil use (post
                                      # through pair_of(): some are UNCONNECTED)
    cdef void **_conn                 # the connected ones (not UNCONNECTED): what
    cdef int _nconn                   # progress and blocking look at
    cdef public int64_t segment       # pipeline segment size in bytes
    cdef public int64_t spin_ns       # how long to spin before blocking
    cdef public int64_t small_allreduce  # bytes up to which recursive doubling wins
    cdef int obj_call                 # object collective running (OBJECT_CALLS index)
    cdef dict env_algorithms          # GLOOCY_ALGORITHM_* at creation
    cdef readonly str last_algorithm  # algorithm the last bcast/allreduce/allgatherv/reduce/reduce_scatter ran
    cdef Header _recent[16]           # recent collective calls by seq % 16, for messages
    cdef list _to_self                # (tag, bytes) messages sent to our own rank
    cdef uint64_t self_sent           # messages put in _to_self so far
    cdef public list obj_receives     # object irecvs from ourselves (or anyone)
                                      # not done: a synchronous send to ourselves
                                      # lets them take their messages
    cdef set _requests                # unfinished Isend/Irecv handles: their
                                      # Xfers are posted, so they must live
    cdef char *_space[2]              # temporary space kept between calls:
    cdef int64_t _space_size[2]       # [0] scratch(), [1] work()

    # derive() of a list of ints (our ranks of the new context's members).
    cdef Context derive_ranks(self, list members, uint32_t comm_id)
    # The body of __init__ (derive() calls it without parsing arguments).
    cdef int _setup(self, int rank, int size, Links links, object world,
                    uint32_t comm_id, double timeout, int64_t segment,
                    int64_t spin_ns, int64_t small_allreduce) except -1
    cdef char *space(self, int slot, int64_t nbytes) except NULL nogil
    # For an algorithm's own temporaries.
    cdef char *scratch(self, int64_t nbytes) except NULL nogil
    # For a copy of the caller's input that the algorithm may clobber.
    cdef char *work(self, int64_t nbytes) except NULL nogil

    # Check we may run, stamp the call and take the links' lock (held until
    # end(); only block_poll() drops it meanwhile).
    cdef int begin(self, Coll *c, int kind, int op, int dtype, int root,
                   uint64_t count, object timeout) except -1
    cdef void end(self) noexcept
    cdef int check_usable(self) except -1
    cdef double seconds(self, object timeout) except -1
    cdef int check_stale(self, Coll *c, uint64_t seq) except -1
    cdef int sweep(self, Coll *c) except -1
    cdef int stamp(self, Coll *c, int kind, int op, int dtype, int root,
                   uint64_t count, double t) except -1
    cdef int begin_p2p(self, Coll *c, object timeout) except -1
    cdef int _check_root(self, int root) except -1
    cdef int _check_peer(self, int rank, str name, bint any_ok) except -1
    cdef void _linger(self, int64_t deadline) noexcept nogil

    # Entry points (cpdef: the API calls them in C; Python may pass keywords).
    # Buffers are objects with the buffer protocol or Bufs (see get_buffer).
    cpdef barrier(self, timeout=*, algorithm=*)
    cpdef bcast(self, buf, int root, timeout=*, algorithm=*)
    cpdef allreduce(self, sendbuf, recvbuf, int op, timeout=*, algorithm=*)
    cpdef allgatherv(self, sendbuf, recvbuf, counts, displs=*, timeout=*,
                     algorithm=*)
    cpdef reduce(self, sendbuf, recvbuf, int op, int root, timeout=*,
                 algorithm=*)
    cpdef reduce_scatter(self, sendbuf, recvbuf, counts, int op, timeout=*,
                         algorithm=*)
    cpdef scan(self, sendbuf, recvbuf, int op, bint exclusive=*, timeout=*,
               algorithm=*)
    # uniform: the call is the API's Gather, Scatter or Alltoall (every
    # block one size on every rank, so "auto" may choose by it alike).
    cpdef gatherv(self, sendbuf, recvbuf, counts, displs, int root, timeout=*,
                  algorithm=*, bint uniform=*)
    cpdef scatterv(self, sendbuf, recvbuf, counts, displs, int root, timeout=*,
                   algorithm=*, bint uniform=*)
    cpdef alltoallv(self, sendbuf, sendcounts, senddispls, recvbuf,
                    recvcounts, recvdispls, timeout=*, algorithm=*,
                    bint uniform=*)
    # Nonblocking collectives: each starts a schedule (_schedule.pxi) and
    # returns its NbcHandle; arguments as the blocking ones'.
    cpdef ibarrier(self)
    cpdef ibcast(self, buf, int root)
    cpdef iallreduce(self, sendbuf, recvbuf, int op)
    cpdef ireduce(self, sendbuf, recvbuf, int op, int root)
    cpdef iallgatherv(self, sendbuf, recvbuf, counts, displs=*)
    cpdef igatherv(self, sendbuf, recvbuf, counts, displs, int root)
    cpdef iscatterv(self, sendbuf, recvbuf, counts, displs, int root)
    cpdef ialltoallv(self, sendbuf, sendcounts, senddispls, recvbuf,
                     recvcounts, recvdispls)
    cpdef ireduce_scatter(self, sendbuf, recvbuf, counts, int op)
    cpdef iscan(self, sendbuf, recvbuf, int op, bint exclusive=*)
    cpdef send(self, buf, int dest, int tag=*, timeout=*, bint sync=*)
    cpdef recv(self, buf, int source=*, int tag=*, timeout=*)
    cpdef isend(self, buf, int dest, int tag=*, bint sync=*)
    cpdef irecv(self, buf, int source=*, int tag=*)
    cpdef probe(self, int source=*, int tag=*, bint block=*, timeout=*)


# Lazy connections: `pair` (just connected to links rank `peer`) replaces
# UNCONNECTED there, in the links and every context over them.
cdef int install_pair(Links links, int peer, Pair pair) except -1
# The pair to our rank i, to post on: connected now and installed if it
# was not (a borrowed reference: the links hold it). Every post goes
# through it: UNCONNECTED, the stand-in, cannot post.
cdef void *pair_of(Context ctx, int i) except NULL nogil
# Install the pairs peers dialed (Links.arrivals); 1 if any.
cdef int install_arrivals(Links links) except -1 with gil
# Whether the process of our unconnected rank `i` has died (node waits);
# raises what a signal handler raised meanwhile (Ctrl-C).
cdef int lazy_peer_gone(Context ctx, int i, int pid) except -1 with gil
# Connect every member of ctx not connected yet (best effort, briefly): a
# rank that fails in a node collective tells them all why (see fail()).
cdef int connect_members(Context ctx) except -1
