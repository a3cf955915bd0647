# Ops as the Communicator meets them: predefined ones are the core's kernels
# (their code); user ops (Python callables, C functions) run in the core too
# (OP_USER's kernel calls them, _user_ops.pxi), except where the core has
# no type for the elements (a derived datatype whose items are not one
# NumPy scalar type, e.g. a struct of mixed fields): those are folded here,
# in rank order, over every rank's input gathered by the core (by a
# schedule, for the nonblocking forms: the fold runs when it is done).

from gloocy.ops cimport Op
from gloocy._core cimport UserOp

cdef int OP_USER = _core.OP_CODES["user"]
cdef object AVG = _ops.AVG


cdef int _op_code(object op) except -1:
    """The core's code of a buffer op (OP_USER: folded here)."""
    if not isinstance(op, Op):
        raise TypeError(f"op: expected a gloocy op such as gloocy.SUM, got {op!r}")
    cdef int code = (<Op>op).code
    if code == 0:
        op.check_buffers()          # raises: this op reduces no buffers
    return code


cdef object _check_callable(op):
    if not callable(op):
        raise TypeError(f"op: expected a gloocy op or a callable, got {op!r}")
    return op


cdef object _check_scan_op(op):
    if op is AVG:
        raise TypeError("op: AVG is not defined for scans")
    return _check_callable(op)


cdef object _fold(op, blocks, datatype=None):
    """blocks[0] <op> blocks[1] <op> ... in rank order, for a user op."""
    acc = blocks[0].copy()
    for b in blocks[1:]:
        inout = b.copy()
        op.fold(acc, inout, datatype)   # MPI's rule: inoutvec = invec <op> inoutvec
        acc = inout
    return acc


cdef object _user_inputs(Context ctx, s, r, root, timeout):
    """Every rank's input as rows of an array (at root only when root is
    not None): s and r are bufspec Messages (s None: in place)."""
    flat = (r if s is None else s).data
    out = np.empty((ctx.size, flat.size), flat.dtype)
    if root is None:
        ctx.allgatherv(flat, out, [flat.nbytes] * ctx.size, None, timeout,
                       None)
    else:
        ctx.gatherv(flat, out if ctx.rank == root else None,
                    [flat.nbytes] * ctx.size, None, root, timeout, None)
    return out


cdef object _reduce_user(Context ctx, sendbuf, recvbuf, op, root, timeout):
    """Allreduce (root None) or Reduce with a user op."""
    at_root = root is None or ctx.rank == root
    r = bufspec.message(recvbuf, name="recvbuf") if at_root else None
    s = _parse_send(sendbuf)
    if r is None and s is None:
        raise ArgumentError("sendbuf: only the root may reduce in place",
                            ERR_BUFFER)
    blocks = _user_inputs(ctx, s, r, root, timeout)
    if at_root:
        r.data[...] = _fold(op, blocks, r.datatype)
        r.unpack()


cdef object _scan_user(Context ctx, sendbuf, recvbuf, op, bint exclusive,
                       timeout):
    r = bufspec.message(recvbuf, name="recvbuf")
    s = _parse_send(sendbuf)
    blocks = _user_inputs(ctx, s, r, None, timeout)
    upto = ctx.rank if exclusive else ctx.rank + 1
    if upto:
        r.data[...] = _fold(op, blocks[:upto], r.datatype)
        r.unpack()


cdef object _parse_send(spec):
    """A send buffer spec as bufspec parses it; None for IN_PLACE."""
    return bufspec.message(spec, name="sendbuf", readonly=True,
                           allow_in_place=True)


cdef object _kernel_op(op, Message m):
    """The core's UserOp running user op `op` on m's elements (acc = acc
    <op> src, MPI's inoutvec = invec <op> inoutvec), or None where the
    core has no type for them (the op is then folded after a gather)."""
    cdef Buf b = m.buf
    if b.dtype <= 0:
        return None
    data = m.data
    if data.dtype.itemsize != b.itemsize:
        return None
    return _core.UserOp(_user_folder(op, data.dtype, m.datatype), b.itemsize,
                        op.commute)


def _user_folder(op, dtype, datatype):
    def fold(acc, src):
        left = np.frombuffer(acc, dtype)
        inout = np.frombuffer(src, dtype).copy()
        op.fold(left, inout, datatype)
        left[...] = inout
    return fold


cdef object _reduce_in_core(Context ctx, Message s, Message r, UserOp u,
                            bint scan, bint exclusive, timeout):
    """Allreduce (scan: Scan) of s into r (s None: in place) with user op
    u, in the core; r None: a reduce's non-root, into scratch."""
    cdef Buf rb
    room = None
    if r is None:
        room, rb = _scratch_like(s.buf)
    else:
        rb = r.buf
    _core.set_user_op(u)
    try:
        if scan:
            ctx.scan(None if s is None else s.buf, rb, OP_USER, exclusive,
                     timeout)
        else:
            ctx.allreduce(None if s is None else s.buf, rb, OP_USER, timeout,
                          None)
    finally:
        _core.set_user_op(None)       # raises what the op raised
    if r is not None:
        r.unpack()


cdef tuple _scratch_like(Buf b):
    """(fresh memory for b's elements, a Buf over it typed as b's): keep
    the first while the second is used."""
    room = np.empty(b.nbytes, np.uint8)
    return room, memory_buf(<void *><size_t>room.ctypes.data, b.nbytes,
                            b.dtype, b.itemsize, "recvbuf")


cdef object _start_in_core(Context ctx, Message s, Message r, op, bint scan,
                           bint exclusive, int upto, sendbuf, recvbuf, root):
    """Iallreduce (root None), Ireduce (as an allreduce, into scratch off
    the root) or Iscan with user op `op`, as a schedule in the core; where
    the core has no type for the elements, gathered and folded (upto: the
    ranks a scan folds)."""
    cdef Buf rb
    u = _kernel_op(op, r if r is not None else s)
    if u is None:
        return _start_user(ctx, sendbuf, recvbuf, op,
                           None if scan else root, upto, None)
    room = None
    if r is None:
        room, rb = _scratch_like(s.buf)
    else:
        rb = r.buf
    _core.set_user_op(u)             # the schedule keeps it
    try:
        if scan:
            h = ctx.iscan(None if s is None else s.buf, rb, OP_USER, exclusive)
        else:
            h = ctx.iallreduce(None if s is None else s.buf, rb, OP_USER)
    finally:
        _core.set_user_op(None)
    return nbc_request(h, (s, r, room, rb), _finish(r))


cdef object _start_user(Context ctx, sendbuf, recvbuf, op, root, int upto,
                        counts):
    """A nonblocking reduction with a user op: every rank's input is
    gathered (to root, or to all when root is None) by a schedule, then
    folded in rank order over ranks [0, upto) when it is done; `counts`:
    reduce_scatter's blocks (we keep ours)."""
    at_root = root is None or ctx.rank == root
    r = bufspec.message(recvbuf, name="recvbuf") if at_root else None
    s = _parse_send(sendbuf)
    if r is None and s is None:
        raise ArgumentError("sendbuf: only the root may reduce in place",
                            ERR_BUFFER)
    flat = (r if s is None else s).data
    blocks = np.empty((ctx.size, flat.size), flat.dtype)
    sizes = [flat.nbytes] * ctx.size
    if root is None:
        h = ctx.iallgatherv(flat, blocks, sizes, None)
    else:
        h = ctx.igatherv(flat, blocks if at_root else None, sizes, None, root)
    return nbc_request(h, (flat, blocks), _folder(ctx.rank, op, blocks, r,
                                                  upto, counts))


def _folder(rank, op, blocks, r, upto, counts):
    """() -> r = the fold of blocks[:upto] (counts: only our block of it)."""
    def fold():
        if r is None or upto == 0:
            return
        out = _fold(op, blocks[:upto], r.datatype)
        if counts is None:
            r.data[...] = out
        else:
            items = r.data.size // r.count if r.count else 1
            start = sum(counts[:rank]) * items
            mine = out[start:start + counts[rank] * items]
            r.data[:mine.size] = mine
        r.unpack()
    return fold


cdef object _start_reduce_scatter_user(Context ctx, Message s, Message r, op,
                                       list elements, list counts):
    """Ireduce_scatter with user op `op` (`elements`: each rank's block in
    elements, `counts` in items) as a schedule in the core; where the core
    has no type for the elements, gathered and folded."""
    u = _kernel_op(op, r)
    if u is None:
        return _start_user(ctx, IN_PLACE if s is None else s.spec, r.spec, op,
                           None, ctx.size, counts)
    _core.set_user_op(u)             # the schedule keeps it
    try:
        h = ctx.ireduce_scatter(None if s is None else s.buf, r.buf, elements,
                                OP_USER)
    finally:
        _core.set_user_op(None)
    return nbc_request(h, (s, r), _finish(r))
