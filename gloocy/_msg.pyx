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

from gloocy._core cimport Buf, get_buffer
from gloocy.datatypes cimport Datatype, Typemap

import operator

from gloocy import bufspec
from gloocy.constants import IN_PLACE as _IN_PLACE
from gloocy.datatypes import _typedict

# Read on every call: C variables, not module-dict lookups.
cdef object IN_PLACE = _IN_PLACE
cdef dict TYPECODES = _typedict     # typecode -> predefined Datatype


@cython.freelist(16)
@cython.no_gc          # holds no cycle: the spec and buffers are the caller's
cdef class Message:
    """One buffer of one call: `count` items travel as `buf`."""

    cdef int unpack(self, int64_t nbytes=-1) except -1:
        if self.slow is not None:
            if self.sizes is not None:
                self.slow.unpack()              # a VectorMessage: all of it
            else:
                self.slow.unpack(None if nbytes < 0 else nbytes)
        return 0

    cdef object parsed(self):
        """The spec as bufspec parses it (for what is rarely needed)."""
        if self.slow is None:
            if self.sizes is not None:
                self.slow = bufspec.vector_message(
                    self.spec, len(self.sizes), name=self.buf.name,
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
    cdef int64_t extent, items, total = 0, i, c, d
    cdef list counts, displs = None, sizes, offsets
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
    counts = _ints(counts_spec, size)
    if counts is None:
        return _slow_vector(spec, size, name, readonly)
    if type(displs_spec) is int:         # d: rank i's block at d * i
        displs = [displs_spec * i for i in range(size)]
    elif displs_spec is not None:
        displs = _ints(displs_spec, size)
        if displs is None:
            return _slow_vector(spec, size, name, readonly)
    try:
        b = get_buffer(spec[0], name, not readonly, dense is not None)
    except Exception:
        return _slow_vector(spec, size, name, readonly)
    if dense is None:
        if b.dtype < 0:
            return _slow_vector(spec, size, name, readonly)
        extent, items = b.itemsize, 1
    else:
        extent, items = dense.ub, dense.n
        b.dtype, b.itemsize = dense.dense, dense.itemsize
    sizes = [None] * size
    offsets = [None] * size
    for i in range(size):
        c = counts[i]
        d = total if displs is None else displs[i]
        # each block inside the buffer (else bufspec says so, as mpi4py)
        if c < 0 or d < 0 or extent <= 0 or d > b.nbytes // extent \
                or c > b.nbytes // extent - d:
            return _slow_vector(spec, size, name, readonly)
        sizes[i] = c * extent
        offsets[i] = d * extent
        total = d + c if displs is None else total
    b.count = b.nbytes // b.itemsize
    cdef Message m = Message.__new__(Message)
    m.buf, m.count, m.spec, m.blocks = b, sum(counts), spec, 1
    m.sizes, m.offsets = sizes, offsets
    if dense is not None:
        m._datatype = datatype
    return m


cdef list _ints(object values, int size):
    """`size` ints from an int (the same for every rank) or a sequence of
    them; None for what bufspec must judge."""
    if type(values) is int:
        return [values] * size
    if type(values) is not list and type(values) is not tuple:
        return None                     # (NumPy arrays too: bufspec reads them)
    if len(values) != size:
        return None
    try:
        return [v if type(v) is int else operator.index(v) for v in values]
    except TypeError:
        return None


cdef Message _slow_vector(object spec, int size, str name, bint readonly):
    slow = bufspec.vector_message(spec, size, name=name, readonly=readonly)
    cdef Message m = Message.__new__(Message)
    m.buf = get_buffer(slow.data, name, not readonly)
    m.count, m.slow, m._datatype = sum(slow.counts), slow, slow.datatype
    m.spec, m.blocks = spec, 1
    m.sizes, m.offsets = slow.sizes, slow.offsets
    return m
