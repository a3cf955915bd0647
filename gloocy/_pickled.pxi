# The pickle layer: what the lower-case methods move. Objects travel as
# pickles (protocol 5); a bcast moves the large buffers inside an object
# (NumPy arrays) out of band, straight from and into their own memory.
#
# A small object costs one bcast or allgather: every rank's contribution
# starts with a slot of SLOT bytes holding the pickle's length and, when it
# fits, the whole pickle; only a larger one needs a second collective for
# the rest, which every rank can tell. gather, scatter and alltoall exchange
# the lengths first (a rank cannot tell whether the others' objects fit).

from cpython.bytearray cimport (PyByteArray_AS_STRING,
                                PyByteArray_FromStringAndSize)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memset

# Object collectives: their byte collectives carry the call's name (an index
# of the core's OBJECT_CALLS) in their fingerprints, so that a mismatch names
# the user's call.
cdef int OBJ_BCAST = _core.OBJECT_CALLS.index("bcast")
cdef int OBJ_GATHER = _core.OBJECT_CALLS.index("gather")
cdef int OBJ_SCATTER = _core.OBJECT_CALLS.index("scatter")
cdef int OBJ_ALLGATHER = _core.OBJECT_CALLS.index("allgather")
cdef int OBJ_ALLTOALL = _core.OBJECT_CALLS.index("alltoall")
cdef int OBJ_REDUCE = _core.OBJECT_CALLS.index("reduce")
cdef int OBJ_ALLREDUCE = _core.OBJECT_CALLS.index("allreduce")
cdef int OBJ_SCAN = _core.OBJECT_CALLS.index("scan")
cdef int OBJ_EXSCAN = _core.OBJECT_CALLS.index("exscan")


cdef inline bint _enter_object_call(Context ctx, int which):
    """Mark ctx's calls as `which`'s (the object collectives below do, for
    the byte collectives they make), unless inside another object call;
    True if marked (then _leave_object_call)."""
    if ctx.obj_call:
        return False
    ctx.obj_call = which
    return True


cdef inline void _leave_object_call(Context ctx, bint marked):
    if marked:
        ctx.obj_call = 0


cdef enum:
    SLOT = 256          # bytes of a rank's slot
    HEAD = 16           # a bcast slot's length and buffer count
    INT64 = 8


cdef inline bytearray _new_bytes(int64_t n):
    """n bytes to receive into (what they hold is overwritten)."""
    return PyByteArray_FromStringAndSize(NULL, n)


cdef int _fill_slot(char *slot, bytes data, int64_t head) except -1:
    """The SLOT bytes at `slot`: `head` bytes left for the caller, then as
    much of data as fits (zeros after it: nothing else of our memory
    travels)."""
    cdef int64_t first = min(len(data), SLOT - head)
    memcpy(slot + head, <char *>data, first)
    memset(slot + head + first, 0, SLOT - head - first)
    return 0


# block bytes -> (sizes, offsets) of the last number of blocks asked for
cdef dict _UNIFORM = {}


cdef tuple _uniform(int size, int64_t nbytes):
    """(sizes, offsets) of `size` blocks of nbytes laid end to end, kept
    for the next call (the core only reads a layout)."""
    cdef tuple known = _UNIFORM.get(nbytes)
    cdef I64 sizes, offsets
    cdef int i
    if known is not None and (<I64>known[0]).n == size:
        return known
    sizes, offsets = I64.filled(size, nbytes), I64.zeros(size)
    for i in range(size):
        offsets.v[i] = i * nbytes
    known = _UNIFORM[nbytes] = (sizes, offsets)
    return known


cdef Buf _own(object data, str name):
    """A bytes or bytearray this layer made (nothing else holds it while
    the call runs) as a Buf: no buffer to acquire and release."""
    if type(data) is bytes:
        return memory_buf(PyBytes_AS_STRING(data), len(data), DT_BYTES, 1,
                          name)
    return memory_buf(PyByteArray_AS_STRING(data), len(data), DT_BYTES, 1,
                      name)


cdef object _loads_at(bytearray data, int64_t at, int64_t n):
    """The object pickled in data[at:at + n]: a small one from a copy
    (cheaper than a view), a large one in place."""
    if 0 <= n <= SLOT:
        return _pickle_loads(PyBytes_FromStringAndSize(
            PyByteArray_AS_STRING(data) + at, n))
    return _pickle_loads(memoryview(data)[at:at + n])


cdef object _pickle_dumps = pickle.dumps
cdef object _pickle_loads = pickle.loads
cdef int PROTOCOL = pickle.HIGHEST_PROTOCOL
cdef bint _OOB = True             # bcast may move large buffers out of band


def _set_pickle(dumps, loads, int protocol, bint oob):
    """gloocy.MPI.pickle's hook (gloocy.pickling.on_change): the lower-case
    methods make pickles with dumps(obj, protocol) and read them with
    loads(data); oob: the standard pickle (protocol 5), which may keep an
    object's large buffers out of band."""
    global _pickle_dumps, _pickle_loads, PROTOCOL, _OOB
    _pickle_dumps, _pickle_loads, PROTOCOL, _OOB = dumps, loads, protocol, oob


cdef bytes _dumps(obj, list buffers=None):
    if buffers is None or not _OOB:
        return _pickle_dumps(obj, PROTOCOL)
    return _pickle_dumps(obj, 5, buffer_callback=buffers.append)


# Point-to-point objects (send, recv, sendrecv): one pickle per message;
# the receiver learns its size from the frame.

cdef int send_object(Context ctx, obj, dest, tag, timeout) except -1:
    if dest != PROC_NULL:
        ctx.send(_dumps(obj), dest, tag, timeout)
    return 0


cdef object recv_object(Context ctx, source, tag, status, timeout):
    if source == PROC_NULL:
        if status is not None:
            status._set(PROC_NULL, ANY_TAG, 0)
        return None
    data, src, t = call_recv_new(ctx, _any(source), tag, True, timeout)
    if status is not None:
        status._set(src, t, len(data))
    return _pickle_loads(data) if len(data) else None     # an empty message: None


cdef inline int64_t _read64(const char *p, int64_t i) noexcept:
    return (<const int64_t *>p)[i]


cdef inline void _write64(char *p, int64_t i, int64_t value) noexcept:
    (<int64_t *>p)[i] = value


cdef object bcast_object(Context ctx, obj, int root, timeout):
    cdef bint marked = _enter_object_call(ctx, OBJ_BCAST)
    try:
        return _bcast_object(ctx, obj, root, timeout)
    finally:
        _leave_object_call(ctx, marked)


cdef object _bcast_object(Context ctx, obj, int root, timeout):
    """root's `obj` on every rank (a copy at root too, as mpi4py)."""
    cdef char slot[SLOT]
    cdef char *p = slot
    cdef int64_t n, nbufs, first, i
    cdef bytes payload = None
    cdef list raws = None, buffers
    if ctx.rank == root:
        buffers = []
        data = _dumps(obj, buffers)
        if buffers:
            raws = [b.raw() for b in buffers]
            # payload: the out-of-band buffers' sizes, then the pickle
            payload = b"".join(
                [(<object>len(r)).to_bytes(8, "little") for r in raws] + [data])
        else:
            raws, payload = [], data
        _fill_slot(p, payload, HEAD)
        _write64(p, 0, len(payload))
        _write64(p, 1, len(raws))
    ctx.bcast(memory_buf(p, SLOT, DT_BYTES, 1, "buf"), root, timeout, None)
    n, nbufs = _read64(p, 0), _read64(p, 1)
    first = min(n, SLOT - HEAD)
    if n == first and nbufs == 0:       # the whole object was in the slot
        return _pickle_loads(payload if ctx.rank == root
                             else PyBytes_FromStringAndSize(p + HEAD, n))
    if ctx.rank == root:
        whole = payload
        if n > first:
            ctx.bcast(memoryview(payload)[first:], root, timeout, None)
        for r in raws:
            ctx.bcast(r, root, timeout, None)
        buffers = [bytearray(r) for r in raws]      # the root's copy
    else:
        whole = PyBytes_FromStringAndSize(p + HEAD, first)
        if n > first:
            whole = bytearray(n)
            memcpy(PyByteArray_AS_STRING(whole), p + HEAD, first)
            ctx.bcast(memoryview(whole)[first:], root, timeout, None)
        buffers = []
        for i in range(nbufs):
            buffers.append(bytearray(int.from_bytes(
                whole[i * INT64:(i + 1) * INT64], "little")))
            ctx.bcast(buffers[i], root, timeout, None)
    if nbufs == 0:
        return _pickle_loads(whole)
    return pickle.loads(memoryview(whole)[nbufs * INT64:], buffers=buffers)


cdef list allgather_objects(Context ctx, obj, timeout, int which):
    cdef bint marked = _enter_object_call(ctx, which)
    try:
        return _allgather_objects(ctx, obj, timeout)
    finally:
        _leave_object_call(ctx, marked)


cdef list _allgather_objects(Context ctx, obj, timeout):
    """Every rank's `obj`, in rank order."""
    cdef int size = ctx.size, i
    cdef bytes data = _dumps(obj)
    cdef int64_t n = len(data), first = min(n, SLOT - INT64), more = 0, k
    cdef char slot[SLOT]
    cdef bytearray slots = _new_bytes(<int64_t>SLOT * size)
    _write64(slot, 0, n)
    _fill_slot(slot, data, INT64)
    sizes, offsets = _uniform(size, SLOT)
    ctx.allgatherv(memory_buf(slot, SLOT, DT_BYTES, 1, "sendbuf"),
                   _own(slots, "recvbuf"), sizes, offsets, timeout, None)
    cdef char *p = slots
    for i in range(size):
        more += max(0, _read64(p + i * SLOT, 0) - (SLOT - INT64))
    if more == 0:                       # every object was in its slot
        return [_loads_at(slots, i * SLOT + INT64, _read64(p + i * SLOT, 0))
                for i in range(size)]
    cdef list lengths = [_read64(p + i * SLOT, 0) for i in range(size)]
    view = memoryview(slots)
    rests = [max(0, k - (SLOT - INT64)) for k in lengths]
    tails = bytearray(more)
    ctx.allgatherv(memoryview(data)[first:], tails, rests, None, timeout, None)
    out, at = [], 0
    for i in range(size):
        head = view[i * SLOT + INT64:i * SLOT + INT64 + min(lengths[i], SLOT - INT64)]
        if rests[i]:
            out.append(_pickle_loads(bytes(head) + tails[at:at + rests[i]]))
            at += rests[i]
        else:
            out.append(_pickle_loads(head))
    return out


cdef object gather_objects(Context ctx, obj, int root, timeout, int which):
    cdef bint marked = _enter_object_call(ctx, which)
    try:
        return _gather_objects(ctx, obj, root, timeout)
    finally:
        _leave_object_call(ctx, marked)


cdef object _gather_objects(Context ctx, obj, int root, timeout):
    """Every rank's `obj` in rank order at root; None elsewhere."""
    cdef int size = ctx.size
    cdef bytes data = _dumps(obj)
    cdef int64_t n = len(data)
    if ctx.rank != root:
        ctx.gatherv(memory_buf(&n, INT64, DT_BYTES, 1, "sendbuf"), None, None,
                    None, root, timeout, None)
        ctx.gatherv(_own(data, "sendbuf"), None, None, None, root, timeout,
                    None)
        return None
    cdef I64 counts = I64.zeros(size)
    sizes, offsets = _uniform(size, INT64)
    ctx.gatherv(memory_buf(&n, INT64, DT_BYTES, 1, "sendbuf"),
                memory_buf(counts.v, INT64 * size, DT_BYTES, 1, "recvbuf"),
                sizes, offsets, root, timeout, None)
    cdef bytearray out = _new_bytes(counts.total())
    ctx.gatherv(_own(data, "sendbuf"), _own(out, "recvbuf"), counts, None,
                root, timeout, None)
    return _loads_all(out, counts)


cdef object scatter_objects(Context ctx, objs, int root, timeout):
    cdef bint marked = _enter_object_call(ctx, OBJ_SCATTER)
    try:
        return _scatter_objects(ctx, objs, root, timeout)
    finally:
        _leave_object_call(ctx, marked)


cdef object _scatter_objects(Context ctx, objs, int root, timeout):
    """objs[i] of root's sequence (one per rank) to rank i."""
    cdef int size = ctx.size, i
    cdef bytearray lengths = None
    cdef I64 counts = None
    data = None
    if ctx.rank == root:
        objs = [None] * size if objs is None else list(objs)    # None: as mpi4py
        if len(objs) != size:
            raise ValueError(f"objs: expected {size} items at the root, "
                             f"got {len(objs)}")
        parts = [_dumps(o) for o in objs]
        counts = I64.zeros(size)
        for i in range(size):
            counts.v[i] = len(parts[i])
        lengths = _raw(counts)
        data = b"".join(parts)
    cdef bytearray mine = bytearray(INT64)
    ctx.scatterv(lengths, mine, I64.filled(size, INT64), None, root, timeout,
                 None)
    out = bytearray(_read64(mine, 0))
    ctx.scatterv(data, out, counts, None, root, timeout, None)
    return _pickle_loads(out)


cdef list alltoall_objects(Context ctx, objs, timeout):
    cdef bint marked = _enter_object_call(ctx, OBJ_ALLTOALL)
    try:
        return _alltoall_objects(ctx, objs, timeout)
    finally:
        _leave_object_call(ctx, marked)


cdef list _alltoall_objects(Context ctx, objs, timeout):
    """objs[i] to rank i; what each rank sent us, in rank order."""
    cdef int size = ctx.size, i
    objs = [None] * size if objs is None else list(objs)        # None: as mpi4py
    if len(objs) != size:
        raise ValueError(f"objs: expected {size} items, got {len(objs)}")
    parts = [_dumps(o) for o in objs]
    cdef I64 sent = I64.zeros(size), eight = I64.filled(size, INT64)
    for i in range(size):
        sent.v[i] = len(parts[i])
    cdef bytearray lengths = bytearray(INT64 * size)
    ctx.alltoallv(_raw(sent), eight, None, lengths, eight, None, timeout, None)
    cdef I64 counts = _lengths(lengths, size)
    cdef bytearray out = bytearray(counts.total())
    ctx.alltoallv(b"".join(parts), sent, None, out, counts, None, timeout, None)
    return _loads_all(out, counts)


cdef bytearray _raw(I64 values):
    """The bytes of `values` (to send them)."""
    cdef bytearray out = bytearray(values.n * INT64)
    memcpy(<char *>out, values.v, values.n * INT64)
    return out


cdef I64 _lengths(bytearray data, int size):
    """The `size` lengths an exchange of lengths brought."""
    cdef I64 out = I64.zeros(size)
    memcpy(out.v, <char *>data, size * INT64)
    return out


cdef list _loads_all(bytearray data, I64 counts):
    cdef list objs = []
    cdef int64_t at = 0, i
    for i in range(counts.n):
        objs.append(_loads_at(data, at, counts.v[i]))
        at += counts.v[i]
    return objs


cdef object fold_objects(objs, op):
    """objs[0] op objs[1] op ... in rank order (AVG: the sum / len)."""
    total = objs[0]
    for x in objs[1:]:
        total = op(total, x)
    return total / len(objs) if op is AVG else total
