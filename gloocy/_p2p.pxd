# Point-to-point (_p2p.pxi): the bodies of Context.send, recv, isend,
# irecv and probe. Python name: P2PHandle (what isend and irecv return).

cdef object call_send(Context ctx, object buf, int dest, int tag,
                      object timeout)
cdef object call_recv(Context ctx, object buf, int source, int tag,
                      object timeout)
cdef object call_isend(Context ctx, object buf, int dest, int tag)
cdef object call_irecv(Context ctx, object buf, int source, int tag)
cdef object call_probe(Context ctx, int source, int tag, bint block,
                       object timeout)
