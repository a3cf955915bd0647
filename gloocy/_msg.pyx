# cython: language_level=3, boundscheck=False, wraparound=False
"""The message layer: mpi4py buffer specs parsed once, in C.

The common forms (a buffer; [buf, datatype], [buf, count, datatype],
[buf, (count, displ), datatype], [buf, count, displ, datatype] with a dense
datatype, or a typecode) cost a buffer acquisition and a few reads here. The
rest (non-contiguous derived datatypes, DLPack, array interfaces, BOTTOM,
and every error, so that messages and exception types stay mpi4py's) are
parsed by `gloocy.bufspec` and only then acquired.
"""

cimport cython

from gloocy._core cimport Buf, I64, get_buffer
from gloocy.datatypes cimport Datatype, Typemap

import operator

from gloocy import bufspec
from gloocy.datatypes import _typedict
from gloocy.memory import BOTTOM as _BOTTOM, BUFFER_AUTOMATIC as _AUTOMATIC
from gloocy.memory import IN_PLACE as _IN_PLACE

# Read on every call: C variables, not module-dict lookups.
cdef object IN_PLACE = _IN_PLACE
cdef object BOTTOM = _BOTTOM            # export empty buffers, but are no
cdef object AUTOMATIC = _AUTOMATIC      # message by themselves (bufspec says why)
cdef dict TYPECODES = _typedict     # typecode -> predefined Datatype


@cython.freelist(16)
@cython.no_gc          # holds no cycle: the spec and buffers are the caller's
cdef class Message:
    """One buffer of one call: `count` items travel as `buf`."""

    cdef int unpack(self, int64_t nbytes=-1) except -1:
        if self.slow is not None:
            if self.block_sizes is not None:
                self.slow.unpack()              # a VectorMessage: all of it
            else:
                self.slow.unpack(None if nbytes < 0 else nbytes)
        return 0

    cdef object parsed(self):
        """The spec as bufspec parses it (for what is rarely needed)."""
        if self.slow is None:
            if self.block_sizes is not None:
                self.slow = bufspec.vector_message(
                    self.spec, self.block_sizes.n, name=self.buf.name,
                    readonly=True)
            else:
                self.slow = bufspec.message(self.spec, name=self.buf.name,
                                            readonly=True, blocks=self.blocks)
        return self.slow

    @property
    def datatype(self):
        """The message's Datatype (inferred from the buffer if not given)."""
        if self._datatype is None:
            self._datatype = self.parsed().datatype
        return self._datatype

    @property
    def data(self):
        """The travelling elements as a 1-D NumPy array."""
        return self.parsed().data

    @property
    def nbytes(self):
        return self.buf.nbytes

    @property
    def sizes(self):
        """A vector message's blocks, in bytes (a list; None otherwise)."""
        return _as_list(self.block_sizes)

    @property
    def offsets(self):
        """Where each block of a vector message starts in buf, in bytes."""
        return _as_list(self.block_offsets)


cdef list _as_list(I64 values):
    if values is None:
        return None
    return [values.v[i] for i in range(values.n)]


cdef inline object _datatype_of(object slot):
    """A spec's datatype slot as a Datatype (a typecode looked up); None
    for what bufspec judges."""
    if type(slot) is str:
        return TYPECODES.get(slot)
    return slot


cdef inline Typemap _dense(object datatype):
    """The layout of `datatype` when a message of it is a view of the
    buffer, as the core moves it; None for what bufspec parses (or
    rejects): no Datatype, DATATYPE_NULL, not committed, not dense."""
    if not isinstance(datatype, Datatype):
        return None
    cdef Typemap h = (<Datatype>datatype)._h
    if h is None or h.dense < 0 or not h.committed:
        return None
    return h


cdef inline bint _is_spec_list(object spec):
    return type(spec) is list or type(spec) is tuple


@cython.cdivision(True)     # by extents > 0 and block counts > 0 only
cdef Message message(object spec, str name, bint readonly=False,
                     bint allow_in_place=False, int64_t blocks=1):
    cdef Message m
    cdef Buf b
    cdef Typemap dense
    cdef Py_ssize_t n
    cdef int64_t count, displ, extent, items
    if spec is None or spec is IN_PLACE:
        if allow_in_place:
            return None
        return _slow(spec, name, readonly, allow_in_place, blocks)
    if not _is_spec_list(spec):
        if spec is BOTTOM or spec is AUTOMATIC:
            return _slow(spec, name, readonly, allow_in_place, blocks)
        try:
            b = get_buffer(spec, name, not readonly)
        except Exception:
            return _slow(spec, name, readonly, allow_in_place, blocks)
        if b.dtype < 0:
            return _slow(spec, name, readonly, allow_in_place, blocks)
        m = Message.__new__(Message)
        m.buf, m.count, m.spec, m.blocks = b, b.count, spec, blocks
        return m
    n = len(spec)
    if n < 2 or n > 4:
        return _slow(spec, name, readonly, allow_in_place, blocks)
    datatype = _datatype_of(spec[n - 1])
    dense = _dense(datatype)
    if dense is None:
        return _slow(spec, name, readonly, allow_in_place, blocks)
    extent = dense.ub                   # lb is 0, extent > 0
    count = -1
    displ = 0
    if n == 3:
        second = spec[1]
        if type(second) is tuple or type(second) is list:
            if len(second) != 2:
                return _slow(spec, name, readonly, allow_in_place, blocks)
            count, displ = _index(second[0]), _index(second[1])
        else:
            count = _index(second)
    elif n == 4:
        count, displ = _index(spec[1]), _index(spec[2])
    if count < -1 or displ < 0 or (n > 2 and count < 0):
        return _slow(spec, name, readonly, allow_in_place, blocks)
    try:
        b = get_buffer(spec[0], name, not readonly, True)
    except Exception:
        return _slow(spec, name, readonly, allow_in_place, blocks)
    items = b.nbytes // extent          # whole items in the buffer
    if count < 0:                       # all of them
        if items * extent != b.nbytes:
            return _slow(spec, name, readonly, allow_in_place, blocks)
        count = items
    elif blocks != 1:
        if blocks < 1 or count > items // blocks:
            return _slow(spec, name, readonly, allow_in_place, blocks)
        count *= blocks
    # in the buffer (compared without overflow), else bufspec says why
    if displ > items or count > items - displ:
        return _slow(spec, name, readonly, allow_in_place, blocks)
    b.ptr += displ * extent
    b.nbytes = count * extent
    b.dtype = dense.dense
    b.itemsize = dense.itemsize
    b.count = count * dense.n
    m = Message.__new__(Message)
    m.buf, m.count, m.spec, m.blocks = b, count, spec, blocks
    m._datatype = datatype
    return m


cdef int64_t _index(object value) except? -3:
    """A count or displacement: -2 for what bufspec must judge."""
    if type(value) is int:
        return value
    try:
        return operator.index(value)
    except TypeError:
        return -2


cdef Message _slow(object spec, str name, bint readonly, bint allow_in_place,
                   int64_t blocks):
    """Parse in Python (the uncommon forms, and every error)."""
    slow = bufspec.message(spec, name=name, readonly=readonly,
                           allow_in_place=allow_in_place, blocks=blocks)
    if slow is None:
        return None
    cdef Message m = Message.__new__(Message)
    m.buf = get_buffer(slow.data, name, not readonly)
    m.count, m.slow, m._datatype = slow.count, slow, slow.datatype
    m.spec, m.blocks = spec, blocks
    return m


cdef Message vector_message(object spec, int size, str name,
                            bint readonly=False):
    cdef Buf b
    cdef Typemap dense = None
    cdef Py_ssize_t n = 2
    cdef int64_t extent, items, limit, total = 0, i, c, d
    cdef bint end_to_end = False
    cdef I64 sizes, offsets
    if spec is None or spec is IN_PLACE or not _is_spec_list(spec):
        return _slow_vector(spec, size, name, readonly)
    n = len(spec)
    if n < 2 or n > 4:
        return _slow_vector(spec, size, name, readonly)
    if n > 2:                            # a datatype last
        datatype = _datatype_of(spec[n - 1])
        dense = _dense(datatype)
        if dense is None:
            return _slow_vector(spec, size, name, readonly)
    counts_spec = spec[1]
    if n == 4:
        displs_spec = spec[2]
    elif type(counts_spec) is tuple:     # (counts, displs)
        if len(counts_spec) != 2:
            return _slow_vector(spec, size, name, readonly)
        counts_spec, displs_spec = counts_spec
    else:
        displs_spec = None
    # items for now; bytes once the buffer's extent is known
    sizes = I64.zeros(size)
    offsets = I64.zeros(size)
    if not _ints(sizes, counts_spec):
        return _slow_vector(spec, size, name, readonly)
    if displs_spec is None:
        end_to_end = True
    elif type(displs_spec) is int:       # d: rank i's block at d * i
        for i in range(size):
            offsets.v[i] = <int64_t>displs_spec * i
    elif not _ints(offsets, displs_spec):
        return _slow_vector(spec, size, name, readonly)
    try:
        b = get_buffer(spec[0], name, not readonly, dense is not None)
    except Exception:
        return _slow_vector(spec, size, name, readonly)
    if dense is None:
        if b.dtype < 0:
            return _slow_vector(spec, size, name, readonly)
        extent = b.itemsize
    else:
        extent = dense.ub
        b.dtype, b.itemsize = dense.dense, dense.itemsize
    if extent <= 0:
        return _slow_vector(spec, size, name, readonly)
    limit = b.nbytes // extent           # whole items in the buffer
    cdef int64_t count = 0
    for i in range(size):
        c = sizes.v[i]
        d = total if end_to_end else offsets.v[i]
        # each block inside the buffer (else bufspec says so, as mpi4py)
        if c < 0 or d < 0 or d > limit or c > limit - d:
            return _slow_vector(spec, size, name, readonly)
        sizes.v[i] = c * extent
        offsets.v[i] = d * extent
        total = d + c
        count += c
    b.count = b.nbytes // b.itemsize
    cdef Message m = Message.__new__(Message)
    m.buf, m.count, m.spec, m.blocks = b, count, spec, 1
    m.block_sizes, m.block_offsets = sizes, offsets
    if dense is not None:
        m._datatype = datatype
    return m


cdef bint _ints(I64 out, object values) except -1:
    """Fill `out` from an int (the same for every rank) or a sequence of
    out.n ints; False for what bufspec must judge (NumPy arrays too:
    bufspec reads them)."""
    cdef Py_ssize_t i
    if type(values) is int:
        for i in range(out.n):
            out.v[i] = values
        return True
    if type(values) is not list and type(values) is not tuple:
        return False
    if len(values) != out.n:
        return False
    for i in range(out.n):
        v = values[i]
        if type(v) is not int:
            try:
                v = operator.index(v)
            except TypeError:
                return False
        out.v[i] = v
    return True


cdef Message _slow_vector(object spec, int size, str name, bint readonly):
    slow = bufspec.vector_message(spec, size, name=name, readonly=readonly)
    cdef Message m = Message.__new__(Message)
    m.buf = get_buffer(slow.data, name, not readonly)
    m.count, m.slow, m._datatype = sum(slow.counts), slow, slow.datatype
    m.spec, m.blocks = spec, 1
    m.block_sizes, m.block_offsets = I64(slow.sizes), I64(slow.offsets)
    return m


cdef Buf memory_buf(void *p, int64_t nbytes, int dtype, int64_t itemsize,
                    str name):
    cdef Buf b = Buf.__new__(Buf)
    b.ptr = <char *>p
    b.nbytes = nbytes
    b.itemsize = itemsize
    b.count = nbytes // itemsize
    b.dtype = dtype
    b.name = name
    return b
