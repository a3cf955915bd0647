# The neighbour exchange under Topocomm's neighbour collectives
# (_comm_topology.pxi): blocks cut from the messages of the message layer,
# one point-to-point message per block over a private context.
#
# That context is derived locally (every rank computes its id: the
# communicator's with the SHADOW and NEIGHBORS bits), so its blocks never
# meet the user's point-to-point messages (an ANY_SOURCE/ANY_TAG receive
# cannot take one). Each block is tagged by its slot (gloocy.topology says
# which tag), so a rank that is a neighbour twice gets two distinct blocks;
# PROC_NULL neighbours move nothing.

from cpython.buffer cimport PyBUF_WRITE
from cpython.memoryview cimport PyMemoryView_FromMemory

from gloocy._core cimport Buf

import time as _time

from gloocy.constants import BOTTOM

# With SHADOW: the neighbour exchanges' context (the blocking ones' are
# point-to-point messages, the nonblocking ones' a schedule's frames).
cdef uint32_t NEIGHBORS = 0x20000000


cdef object _view(Buf b):
    """The bytes of b, writable, as a memoryview (to slice into blocks)."""
    return PyMemoryView_FromMemory(b.ptr, b.nbytes, PyBUF_WRITE)


cdef list _equal_blocks(Message m, int n, str name):
    """n equal slices of m's bytes."""
    if n == 0:
        return []
    if m.count % n:
        raise ArgumentError(f"{name}: {m.count} items do not split into {n} "
                            "equal neighbour blocks", ERR_COUNT)
    view = _view(m.buf)
    cdef int64_t size = m.buf.nbytes // n
    return [view[i * size:(i + 1) * size] for i in range(n)]


cdef list _vector_blocks(Message m):
    view = _view(m.buf)
    return [view[o:o + s] for s, o in zip(m.sizes, m.offsets)]


cdef int _keep_untouched(Message m, list plan_in) except -1:
    """A non-contiguous receive datatype travels through a scratch copy
    that is scattered back whole: start it from the user's data, so that
    the blocks of PROC_NULL neighbours come back as they were."""
    if m.slow is None or not any(src == PROC_NULL for src, _ in plan_in):
        return 0
    slow = m.slow
    if slow._mem is None:
        return 0
    if m.sizes is None:
        slow.data[:] = slow.datatype.pack(slow._mem, slow.count, slow._start)
        return 0
    k = slow.data.itemsize
    for count, start, offset, size in zip(slow.counts, slow._starts,
                                          slow.offsets, slow.sizes):
        slow.data[offset // k:(offset + size) // k] = slow.datatype.pack(
            slow._mem, count, start)
    return 0


cdef object _exchange(Context nctx, list sends, list recvs, tuple plan,
                      timeout):
    """Send block i to the i-th destination of `plan`, receive block j
    from its j-th source, each with its slot's tag; PROC_NULL slots are
    skipped (their receive block stays as it was)."""
    ins, outs = plan
    cdef double t = nctx.timeout if timeout is None else timeout
    deadline = _time.monotonic() + t
    handles = []
    me = nctx.rank
    try:
        later = []
        for (src, tag), block in zip(ins, recvs):
            if src == PROC_NULL:
                continue
            if src == me:               # after our sends to ourselves
                later.append((block, src, tag))
            else:
                handles.append(nctx.irecv(block, src, tag))
        for (dest, tag), block in zip(outs, sends):
            if dest != PROC_NULL:
                handles.append(nctx.isend(block, dest, tag))
        for block, src, tag in later:
            handles.append(nctx.irecv(block, src, tag))
        for h in handles:
            h.wait(max(deadline - _time.monotonic(), 0.001))
    except BaseException:
        for h in handles:
            if not h.done:
                try:
                    h.cancel()
                except Exception:
                    pass
        raise


cdef object _start_exchange(Context nctx, list sends, list recvs, tuple plan):
    """_exchange as a schedule (its NbcHandle): the blocks a rank sends
    itself become copies (the slot tags pair them up)."""
    ins, outs = plan
    cdef int me = nctx.rank
    to_self, S, R, copies = {}, [], [], []
    for (dest, tag), block in zip(outs, sends):
        if dest == me:
            to_self[tag] = block
        elif dest != PROC_NULL:
            S.append((dest, tag, block))
    for (src, tag), block in zip(ins, recvs):
        if src == me:
            if tag not in to_self:
                raise ArgumentError(f"rank {me} receives from itself a block "
                                    f"(tag {tag}) it does not send", ERR_ARG)
            copies.append((block, to_self[tag]))
        elif src != PROC_NULL:
            R.append((src, tag, block))
    return start_neighbors(nctx, S, R, copies)


def _w_blocks(spec, int n, str name, bint readonly):
    """Neighbor_alltoallw's [buf, (counts, displs), datatypes] (displs in
    bytes; with BOTTOM, addresses) -> [(memory, count, byte offset,
    datatype)] per neighbour (bufspec.w_blocks reads the spec)."""
    if n == 0:
        return []
    if isinstance(spec, (list, tuple)) and spec and spec[0] is BOTTOM:
        if len(spec) == 3:
            counts, displs = spec[1]
        else:
            counts, displs = spec[1], spec[2]
        types = spec[-1]
        if not (len(counts) == len(displs) == len(types) == n):
            raise ArgumentError(f"{name}: {n} counts, addresses and datatypes "
                                f"needed (one per neighbour), got "
                                f"{len(counts)}, {len(displs)}, {len(types)}",
                                ERR_COUNT)
        return [(_at_address(int(a), int(c), d, f"{name} block {i}"), int(c),
                 0, d) for i, (c, a, d) in enumerate(zip(counts, displs, types))]
    mem, blocks = bufspec.w_blocks(spec, n, name=name, readonly=readonly)
    return [(mem, c, at, d) for c, at, d in blocks]


def _at_address(address, count, datatype, str name):
    """BOTTOM: the memory of `count` items of `datatype` at an absolute
    address (what Get_address gave)."""
    first, end = datatype.span(count)
    if first < 0:
        raise NotImplementedError(f"{name}: a datatype with a negative lower "
                                  "bound at an absolute address")
    if end == 0:
        return np.zeros(0, np.uint8)
    return bufspec.at_addresses(address, address + end, name)