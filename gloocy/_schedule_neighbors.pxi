# The neighbourhood collectives' nonblocking exchange as a schedule
# (_schedule.pxi): one round of sends and receives to the topology's
# neighbours, each block with its slot's tag (gloocy.topology's exchange
# plan), over the topology's neighbour context, which every rank of the
# communicator calls (so its sequence numbers agree). A block a rank sends
# itself is a local copy.


cdef NbcHandle start_neighbors(Context ctx, list sends, list recvs,
                               list copies):
    """sends, recvs: (our rank of the peer, tag, buffer) of each block
    (PROC_NULL and self slots left out); copies: (destination, source)
    buffers of the blocks a rank sends itself."""
    cdef list keep = []
    cdef NbcHandle h = _handle(ctx, keep)
    cdef Buf b, src
    cdef int peer
    for dst_obj, src_obj in copies:
        b = get_buffer(dst_obj, "recvbuf", True)
        src = get_buffer(src_obj, "sendbuf", False)
        if b.nbytes != src.nbytes:
            raise ArgumentError(f"a block this rank sends itself has "
                                f"{src.nbytes} bytes, its receive block "
                                f"{b.nbytes}", ERR_COUNT)
        keep += [b, src]
        h.copy(b.ptr, src.ptr, b.nbytes)
    for peer, tag, obj in recvs:
        ctx._check_peer(peer, "source", False)
        b = get_buffer(obj, "recvbuf", True)
        keep.append(b)
        h.recv(peer, tag, b.ptr, b.nbytes)
    for peer, tag, obj in sends:
        ctx._check_peer(peer, "dest", False)
        b = get_buffer(obj, "sendbuf", False)
        keep.append(b)
        h.send(peer, tag, b.ptr, b.nbytes)
    h.launch(KIND_ALLTOALLV, OP_NONE, DT_BYTES, -1, 0, NULL)
    return h
