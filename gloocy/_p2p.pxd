# Point-to-point (_p2p.pxi): the bodies of Context.send, recv, isend,
# irecv and probe, and the P2PHandle isend and irecv return (the requests
# layer drives it through its cdef methods).

cdef object call_send(Context ctx, object buf, int dest, int tag,
                      object timeout)
cdef object call_recv(Context ctx, object buf, int source, int tag,
                      object timeout)
cdef object call_isend(Context ctx, object buf, int dest, int tag)
cdef object call_irecv(Context ctx, object buf, int source, int tag)
cdef object call_probe(Context ctx, int source, int tag, bint block,
                       object timeout)
cdef object call_recv_new(Context ctx, int source, int tag, bint block,
                          object timeout)


cdef class P2PHandle:
    cdef Context ctx
    cdef Buf buf
    cdef Coll c
    cdef Xfer x
    cdef int peer           # dest, or source (-1: any)
    cdef int tag            # receives: the wanted tag (-1: any)
    cdef bint is_send
    cdef bint posted        # x sits in a pair's queue
    cdef bint _cancelled
    cdef bint finished      # done: the three below hold the result
    cdef int got_source     # dest of a send, source of a receive
    cdef int got_tag
    cdef int64_t got_nbytes
    # One attempt to finish (block: until done or the deadline); 1 if done.
    cdef int _step(self, bint block, object timeout) except -1
    cdef bint _take_from_self(self) except -1
    cdef void _finish(self, int source, int tag, int64_t nbytes) noexcept
    # Withdraw a receive nothing has arrived for; 1 if it was.
    cdef int withdraw(self) except -1
