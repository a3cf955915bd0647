# Intercommunicators' nonblocking reductions as schedules (_schedule.pxi)
# over the union context (both groups: the first group's ranks, then the
# other's), which every rank of both groups calls, so its sequence numbers
# agree. Ours are the union ranks loff .. loff+lsize-1; the leader of a
# group is its rank 0. A group reduces to its leader (a binomial tree in
# rank order), the leaders trade results (or one sends to a root), and a
# local phase hands the other group's result out (a binomial bcast, or a
# scatter of blocks). The intercommunicators' other nonblocking
# collectives are alltoallv schedules over the union (_comm_inter.pxi).

# Step tags beside the trees' (0 up, segment numbers down).
cdef uint64_t TAG_LEADERS = 0xfffffff0    # the leaders' (or a root's) exchange
cdef uint64_t TAG_HAND_OUT = 1 << 32      # the local phase (bcast segments from here)


cdef tuple _inter_inputs(Context union, int lsize, int lrank, int loff,
                         object sendbuf, object recvbuf, bint need_recv):
    """(send Buf, receive Buf or None) of an intercommunicator reduction,
    checked: no in place; recvbuf of sendbuf's layout where both are
    given."""
    if lsize < 1 or not 0 <= lrank < lsize or union.rank != loff + lrank:
        raise ValueError(f"rank {lrank} of a group of {lsize} at union rank "
                         f"{loff}: not this rank ({union.rank})")
    if sendbuf is None:
        raise ArgumentError("sendbuf: an intercommunicator reduction cannot "
                            "be in place", ERR_BUFFER)
    cdef Buf sb = get_buffer(sendbuf, "sendbuf", False)
    sb.require_dtype()
    cdef Buf rb = get_buffer(recvbuf, "recvbuf", True) if need_recv else None
    if rb is not None:
        _same_dtype(sb, rb)
    return sb, rb


cdef char *_group_reduce(NbcHandle h, Buf sb, int lsize, int lrank,
                         int loff) except NULL:
    """Steps reducing our group's sendbufs, in rank order, into memory the
    schedule owns; complete at our leader (where it is returned)."""
    cdef char *acc = h.alloc(max(sb.nbytes, 1))
    h.copy(acc, sb.ptr, sb.nbytes)
    _reduce_tree(h, lsize, lrank, 0, loff, acc, sb.count, sb.nbytes)
    h.fence()
    return acc


cdef NbcHandle start_inter_allreduce(Context union, int lsize, int lrank,
                                     int loff, int rleader, object sendbuf,
                                     object recvbuf, int op):
    """recvbuf = op over the other group's sendbufs (rleader: the union
    rank of its leader)."""
    cdef Buf sb, rb
    sb, rb = _inter_inputs(union, lsize, lrank, loff, sendbuf, recvbuf, True)
    _same_layout(sb, rb)
    cdef NbcHandle h = _handle(union, [sb, rb])
    cdef char *acc = _group_reduce(h, sb, lsize, lrank, loff)
    if lrank == 0:
        h.send(rleader, TAG_LEADERS, acc, sb.nbytes)
        h.recv(rleader, TAG_LEADERS, rb.ptr, rb.nbytes)
        h.fence()
    _bcast_tree(h, lsize, lrank, 0, loff, rb.ptr, rb.nbytes, TAG_HAND_OUT)
    h.launch(KIND_ALLREDUCE, op, sb.dtype, -1, sb.count,
             kernel_of(op, sb.dtype))
    return h


cdef NbcHandle start_inter_reduce(Context union, int lsize, int lrank,
                                  int loff, int peer, int role,
                                  object sendbuf, object recvbuf, int op):
    """role 1 (the root): recvbuf = what the other group's leader (union
    rank `peer`) sends; role 2 (the other group): reduce our sendbufs and
    our leader sends the result to the root (union rank `peer`); role 0
    (the root's group, not the root): nothing, but the call is counted."""
    cdef Buf sb = None, rb = None
    cdef NbcHandle h
    if role == 1:
        rb = get_buffer(recvbuf, "recvbuf", True)
        rb.require_dtype()
        h = _handle(union, [rb])
        h.recv(peer, TAG_LEADERS, rb.ptr, rb.nbytes)
        h.launch(KIND_REDUCE, op, rb.dtype, -1, rb.count, NULL)
        return h
    if role == 0:
        h = _handle(union, None)
        h.launch(KIND_REDUCE, OP_NONE, DT_BYTES, -1, 0, NULL)
        return h
    sb, rb = _inter_inputs(union, lsize, lrank, loff, sendbuf, None, False)
    h = _handle(union, [sb])
    cdef char *acc = _group_reduce(h, sb, lsize, lrank, loff)
    if lrank == 0:
        h.send(peer, TAG_LEADERS, acc, sb.nbytes)
    h.launch(KIND_REDUCE, op, sb.dtype, -1, sb.count, kernel_of(op, sb.dtype))
    return h


cdef NbcHandle start_inter_reduce_scatter(Context union, int lsize,
                                          int lrank, int loff, int rleader,
                                          object sendbuf, object recvbuf,
                                          object counts, int op):
    """op over the other group's sendbufs, scattered over our group: rank
    i gets counts[i] elements (the counts add up to sendbuf's)."""
    cdef Buf sb, rb
    sb, rb = _inter_inputs(union, lsize, lrank, loff, sendbuf, recvbuf, True)
    cdef I64 lens = I64(_counts(counts, lsize, "recvcounts"))
    cdef I64 offs = lens.prefix()
    cdef int64_t total = lens.total(), isz = sb.itemsize
    if sb.count != total:
        raise ArgumentError(f"recvcounts: they add up to {total} elements, "
                            f"sendbuf has {sb.count}", ERR_COUNT)
    if rb.count < lens.v[lrank]:
        raise ArgumentError(f"recvbuf has {rb.count} elements but "
                            f"recvcounts[{lrank}] is {lens.v[lrank]}",
                            ERR_COUNT)
    cdef NbcHandle h = _handle(union, [sb, rb, lens, offs])
    cdef char *acc = _group_reduce(h, sb, lsize, lrank, loff)
    cdef char *theirs
    cdef int i
    if lrank != 0:
        h.recv(loff, TAG_HAND_OUT, rb.ptr, lens.v[lrank] * isz)
    else:
        theirs = h.alloc(max(sb.nbytes, 1))
        h.send(rleader, TAG_LEADERS, acc, sb.nbytes)
        h.recv(rleader, TAG_LEADERS, theirs, sb.nbytes)
        h.fence()
        for i in range(1, lsize):
            h.send(loff + i, TAG_HAND_OUT, theirs + offs.v[i] * isz,
                   lens.v[i] * isz)
        h.copy(rb.ptr, theirs, lens.v[0] * isz)
    h.launch(KIND_REDUCE_SCATTER, op, sb.dtype, -1, total,
             kernel_of(op, sb.dtype))
    return h
