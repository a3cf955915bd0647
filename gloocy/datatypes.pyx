# cython: language_level=3
"""mpi4py-compatible datatypes: the predefined ones, derived ones, typecodes.

A datatype is a handle on a typemap (a `Typemap`, declared with its C
fields in datatypes.pxd, which the message layer reads directly). Every
typemap here is made of copies of one predefined element type (a NumPy
dtype: numbers, bools, chars and the C-struct (value, index) pairs of
MAXLOC/MINLOC), placed at byte offsets, with MPI's lower bound and extent.
The buffer layer (`gloocy.bufspec`) moves a message as a contiguous array
of that element dtype: a view of the user's memory when the typemap is
dense (`is_contiguous`), else a packed copy.

Sizes, extents, names, aliases and typecodes are those of mpi4py on MPICH.
"""

from gloocy._core cimport Buf, get_buffer

import operator

import numpy as np

from gloocy import handles as _handles
from gloocy.attributes import Attributes, create_keyval, free_keyval
from gloocy.errors import ERR_ARG, ERR_COUNT, ERR_TYPE, ArgumentError

__all__ = ["Datatype", "from_typecode", "typecode", "ORDER_C", "ORDER_F",
           "ORDER_FORTRAN"]

# mpi4py's values
ORDER_C = 56
ORDER_F = ORDER_FORTRAN = 57


def _mpi_error(message, error_class):
    """errors.ArgumentError (a ValueError) with MPI's error class."""
    return ArgumentError(message, error_class)


cdef int _core_code(object np_dtype):
    """The core's dtype code of elements of `np_dtype`, -1 when it has none."""
    if np_dtype is None:
        return -1
    cdef Buf probe
    try:
        probe = get_buffer(np.zeros(1, np_dtype), "datatype", False)
    except Exception:
        return -1
    return probe.dtype


cdef class Typemap:
    """What a datatype handle points at (fields: datatypes.pxd). Offsets
    are the byte offsets of the elements (copies of the predefined `elem`)
    in typemap order."""

    def __init__(self, Typemap elem, offsets, lb, ub, true_lb, true_ub,
                 name="", code=None):
        self.elem, self.offsets = elem, offsets
        self.np, self.attr = None, None
        self.itemsize, self.elem_size = elem.itemsize, elem.elem_size
        self.lb, self.ub = lb, ub
        self.true_lb, self.true_ub = true_lb, true_ub
        self.name, self.code = name, code
        self.committed = False      # derived types need Commit() before use
        self.n = offsets.size
        self._layout()

    cdef _layout(self):
        """What follows from the offsets and bounds."""
        cdef int64_t n = self.n, k = self.itemsize
        self.data_lb, self.data_ub = ((int(self.offsets.min()),
                                       int(self.offsets.max()) + k)
                                      if n else (0, 0))
        # Dense: packing any number of items is a no-op.
        self.contiguous = n == 0 or (
            self.ub - self.lb == n * k
            and np.array_equal(self.offsets, np.arange(n) * k))
        self.core = self.elem.core if self.elem is not None else -1
        self.dense = (self.core if self.contiguous and n > 0 and self.lb == 0
                      else -1)

    def __reduce__(self):
        if self.attr:           # predefined: unpickle to this module's handle
            return _predefined_handle, (self.attr,)
        return Typemap, (self.elem, self.offsets, self.lb, self.ub,
                         self.true_lb, self.true_ub, self.name, self.code)


cdef Typemap _predefined(attr, mpi_name, np_dtype, code, size=None,
                         true_ub=None, int core=-1):
    """The handle of a predefined element type (np_dtype None: bfloat16,
    whose NumPy dtype is looked up only when needed)."""
    cdef Typemap h = Typemap.__new__(Typemap)
    h.elem, h.np, h.attr, h.name, h.code = h, np_dtype, attr, mpi_name, code
    h.committed = True
    h.itemsize = np_dtype.itemsize if np_dtype is not None else 2
    h.offsets = np.zeros(1, np.int64)
    h.n = 1
    h.lb, h.ub, h.true_lb = 0, h.itemsize, 0
    h.elem_size = h.itemsize if size is None else size
    h.true_ub = h.itemsize if true_ub is None else true_ub
    h._layout()
    h.core = h.dense = core if np_dtype is None else _core_code(np_dtype)
    return h


def _predefined_handle(attr):
    return (<Datatype>_BY_NAME[attr])._h


def _index(value, what):
    """An int from anything with __index__ (TypeError else, as mpi4py)."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what}: expected an integer, got {value!r}") from None


def _count(value, what):
    n = _index(value, what)
    if n < 0:
        raise _mpi_error(f"{what}: negative count {n}", ERR_COUNT)
    return n


def _ints(values, what):
    return [_index(v, what) for v in values]


def _same_length(a, b, what):
    if len(a) != len(b):
        raise ValueError(f"{what}: expected {len(a)} items, got {len(b)}")


MAX_ELEMENTS = 1 << 26     # a derived type keeps one offset per element


def _check_elements(n):
    if n > MAX_ELEMENTS:
        raise NotImplementedError(
            f"a derived datatype of {n} elements (more than {MAX_ELEMENTS}): "
            "gloocy keeps one offset per element; describe the data with a "
            "larger element type")


def _block_starts(displs, blocklengths, extent):
    """Byte starts of the copies: blocklengths[i] consecutive copies (spaced
    by `extent`) starting at byte displs[i]."""
    lengths = np.asarray(blocklengths, np.int64).reshape(-1)
    first = np.cumsum(lengths) - lengths
    within = np.arange(lengths.sum(), dtype=np.int64) - np.repeat(first, lengths)
    return np.repeat(np.asarray(displs, np.int64), lengths) + within * extent


cdef inline Typemap _handle(Datatype self):
    if self._h is None:
        raise _mpi_error("invalid datatype: MPI_DATATYPE_NULL", ERR_TYPE)
    return self._h


cdef class Datatype:
    """An MPI datatype (mpi4py's ``MPI.Datatype``).

    Equality is that of the handle: aliases of one predefined type (FLOAT
    and FLOAT32_T) are one object, ``Datatype(t) == t``, a Dup is a new type.
    Python subclasses work everywhere a Datatype does.
    """

    def __cinit__(self, datatype=None):
        # in __cinit__ (not __init__): a subclass's __new__ calling
        # Datatype.__new__(cls, t) gets t's handle, as in mpi4py
        if datatype is None:
            return
        if not isinstance(datatype, Datatype):
            raise TypeError(f"expected a Datatype, got {datatype!r}")
        self._h = (<Datatype>datatype)._h

    @classmethod
    def _wrap(cls, Typemap handle):
        cdef Datatype self = cls.__new__(cls)
        self._h = handle
        return self

    def _handle(self):
        return _handle(self)

    def __eq__(self, other):
        if not isinstance(other, Datatype):
            return NotImplemented
        return self._h is (<Datatype>other)._h

    def __ne__(self, other):
        if not isinstance(other, Datatype):
            return NotImplemented
        return self._h is not (<Datatype>other)._h

    def __hash__(self):
        return id(self._h)

    def __bool__(self):
        return self._h is not None

    def __repr__(self):
        return f"<gloocy Datatype {self.Get_name() or 'derived'}>"

    def __reduce__(self):
        h = self._h
        if h is not None and not h.attr:
            return type(self)._wrap, (h,)
        name = "DATATYPE_NULL" if h is None else h.attr
        if self is _BY_NAME[name]:
            return name             # unpickles to this module's object
        return type(self), (_BY_NAME[name],)    # a subclass: Sub(FLOAT)

    # -- mpi4py's object model: integer handles, free (gloocy.handles) --------

    @property
    def handle(self):
        h = self._h
        return _handles.handle_of(None if h is None else ("Datatype", id(h)), self)

    def toint(self):
        return self.handle

    py2f = toint

    @classmethod
    def fromhandle(cls, handle):
        if int(handle) == 0:
            return cls()
        return cls(_handles.object_of(handle, Datatype))

    fromint = f2py = fromhandle

    def free(self):
        """Free a derived datatype; a copy of a predefined one becomes
        DATATYPE_NULL; the predefined ones stay."""
        h = self._h
        if h is None:
            return
        if h.attr:
            if self is not _BY_NAME.get(h.attr):
                self._h = None
            return
        _handles.forget(("Datatype", id(h)))
        self.Free()

    # -- sizes and bounds ----------------------------------------------------

    def Get_size(self):
        """Bytes of data in one item (padding excluded)."""
        h = _handle(self)
        return h.n * h.elem_size

    def Get_extent(self):
        """(lb, extent): where an item starts and how far apart items are."""
        h = _handle(self)
        return h.lb, h.ub - h.lb

    def Get_true_extent(self):
        """(lb, extent) of the bytes the data really spans."""
        h = _handle(self)
        return h.true_lb, h.true_ub - h.true_lb

    @property
    def size(self):
        return self.Get_size()

    @property
    def extent(self):
        return self.Get_extent()[1]

    @property
    def lb(self):
        return _handle(self).lb

    @property
    def ub(self):
        return _handle(self).ub

    @property
    def true_extent(self):
        return self.Get_true_extent()[1]

    @property
    def true_lb(self):
        return _handle(self).true_lb

    @property
    def true_ub(self):
        return _handle(self).true_ub

    @property
    def is_predefined(self):
        return self._h is None or self._h.attr is not None

    # -- names -----------------------------------------------------------------

    def Get_name(self):
        return "MPI_DATATYPE_NULL" if self._h is None else self._h.name

    def Set_name(self, name):
        _handle(self).name = str(name)

    @property
    def name(self):
        return self.Get_name()

    @name.setter
    def name(self, value):
        self.Set_name(value)

    # -- typecodes ---------------------------------------------------------------

    @staticmethod
    def fromcode(code):
        """The predefined datatype of a typecode (mpi4py's spelling)."""
        return from_typecode(code)

    def tocode(self):
        """The typecode of this datatype; ValueError when it has none."""
        code = typecode(self)
        if code is None:
            raise ValueError(f"{self!r} has no typecode")
        return code

    # -- life cycle ------------------------------------------------------------

    def Commit(self):
        """Make the type usable in communication; returns self."""
        _handle(self).committed = True
        return self

    @property
    def is_committed(self):
        return _handle(self).committed

    def Free(self):
        if self.is_predefined:
            raise _mpi_error(f"cannot free the predefined datatype "
                             f"{self.Get_name()}", ERR_TYPE)
        if self._h.attrs is not None:
            self._h.attrs.clear(self)
        self._h = None

    def Dup(self):
        h = _handle(self)
        dup = Typemap(h.elem, h.offsets, h.lb, h.ub, h.true_lb, h.true_ub,
                      code=h.code)
        dup.committed = h.committed
        if h.attrs is not None:
            dup.attrs = h.attrs.copy(self)      # the keys' copy callbacks
        return self._wrap(dup)

    # -- attributes (see gloocy.attributes) ------------------------------------

    @classmethod
    def Create_keyval(cls, copy_fn=None, delete_fn=None, nopython=False):
        return create_keyval(copy_fn, delete_fn, nopython)

    @classmethod
    def Free_keyval(cls, keyval):
        return free_keyval(keyval)

    def Get_attr(self, keyval):
        h = _handle(self)
        return (Attributes() if h.attrs is None else h.attrs).get(keyval)

    def Set_attr(self, keyval, attrval):
        h = _handle(self)
        if h.attrs is None:
            h.attrs = Attributes()
        h.attrs.set(self, keyval, attrval)

    def Delete_attr(self, keyval):
        h = _handle(self)
        (Attributes() if h.attrs is None else h.attrs).delete(self, keyval)

    Create_dup = Dup

    # -- constructors ----------------------------------------------------------

    def Create_contiguous(self, count):
        h = _handle(self)
        count = _count(count, "count")
        _check_elements(count * h.n)
        return _derive(type(self), [(h, np.arange(count, dtype=np.int64)
                                     * (h.ub - h.lb))])

    def Create_vector(self, count, blocklength, stride):
        """count blocks of blocklength items, block starts `stride` items apart."""
        h = _handle(self)
        return self.Create_hvector(count, blocklength,
                                   _index(stride, "stride") * (h.ub - h.lb))

    def Create_hvector(self, count, blocklength, stride):
        """As Create_vector with `stride` in bytes."""
        h = _handle(self)
        count = _count(count, "count")
        blocklength = _count(blocklength, "blocklength")
        stride = _index(stride, "stride")
        _check_elements(count * blocklength * h.n)
        displs = np.arange(count, dtype=np.int64) * stride
        return _derive(type(self), [(h, _block_starts(
            displs, [blocklength] * count, h.ub - h.lb))])

    def Create_indexed(self, blocklengths, displacements):
        """Blocks of blocklengths[i] items at displacements[i] items."""
        h = _handle(self)
        displs = np.asarray(_ints(displacements, "displacements"), np.int64)
        return self.Create_hindexed(blocklengths, displs * (h.ub - h.lb))

    def Create_hindexed(self, blocklengths, displacements):
        """As Create_indexed with displacements in bytes."""
        h = _handle(self)
        _same_length(blocklengths, displacements, "displacements")
        lengths = [_count(b, "blocklengths") for b in blocklengths]
        displs = _ints(displacements, "displacements")
        return _derive(type(self), [(h, _block_starts(displs, lengths,
                                                      h.ub - h.lb))])

    def Create_indexed_block(self, blocklength, displacements):
        return self.Create_indexed([blocklength] * len(displacements),
                                   displacements)

    def Create_hindexed_block(self, blocklength, displacements):
        return self.Create_hindexed([blocklength] * len(displacements),
                                    displacements)

    @classmethod
    def Create_struct(cls, blocklengths, displacements, datatypes):
        """Blocks of blocklengths[i] items of datatypes[i] at byte
        displacements[i]; every datatype must be made of one element type."""
        _same_length(blocklengths, displacements, "displacements")
        _same_length(blocklengths, datatypes, "datatypes")
        pieces = []
        for b, d, t in zip(blocklengths, displacements, datatypes):
            h = t._handle()
            pieces.append((h, _block_starts([_index(d, "displacements")],
                                            [_count(b, "blocklengths")],
                                            h.ub - h.lb)))
        return _derive(cls, pieces)

    def Create_resized(self, lb, extent):
        """The same data with lower bound `lb` and extent `extent` (bytes)."""
        h = _handle(self)
        lb, extent = _index(lb, "lb"), _index(extent, "extent")
        return self._wrap(Typemap(h.elem, h.offsets, lb, lb + extent,
                                  h.true_lb, h.true_ub))

    Resized = Create_resized

    def Create_subarray(self, sizes, subsizes, starts, order=ORDER_C):
        """The block subsizes at starts of an array of shape `sizes`; its
        extent is the whole array's."""
        h = _handle(self)
        _same_length(sizes, subsizes, "subsizes")
        _same_length(sizes, starts, "starts")
        sizes = [_count(n, "sizes") for n in sizes]
        subsizes = [_count(n, "subsizes") for n in subsizes]
        starts = [_count(n, "starts") for n in starts]
        if order not in (ORDER_C, ORDER_F):
            raise _mpi_error(f"order: expected ORDER_C or ORDER_F, got "
                             f"{order!r}", ERR_ARG)
        for n, sub, start in zip(sizes, subsizes, starts):
            if start + sub > n:
                raise _mpi_error(f"subarray {subsizes} at {starts} does not "
                                 f"fit in an array of shape {sizes}", ERR_ARG)
        npo = "C" if order == ORDER_C else "F"
        flat = np.arange(int(np.prod(sizes)), dtype=np.int64)
        index = flat.reshape(sizes, order=npo)[
            tuple([slice(s, s + n) for s, n in zip(starts, subsizes)])]
        extent = h.ub - h.lb
        sub = _derive(type(self), [(h, index.ravel(order=npo) * extent)])
        return sub.Create_resized(0, flat.size * extent)

    # -- what the buffer layer needs ---------------------------------------

    @property
    def np_dtype(self):
        """NumPy dtype of the element type (structured for value-index pairs)."""
        h = _handle(self).elem
        if h.np is None:        # ml_dtypes takes seconds to import: only now
            import ml_dtypes
            h.np = np.dtype(ml_dtypes.bfloat16)
        return h.np

    @property
    def n_elements(self):
        """How many elements (of `np_dtype`) one item holds."""
        return _handle(self).n

    @property
    def is_contiguous(self):
        """Whether any number of items are one dense run of elements, so the
        message is a view of the user's memory and packing is a no-op."""
        return _handle(self).contiguous

    def span(self, count):
        """(first, end) bytes, relative to the start of the first item, that
        pack() and unpack() of `count` items touch; (0, 0) for no data."""
        h = _handle(self)
        if count <= 0 or h.n == 0:
            return 0, 0
        step = (count - 1) * (h.ub - h.lb)
        return h.data_lb + min(0, step), h.data_ub + max(0, step)

    def _check_room(self, count, start, mem):
        first, end = self.span(count)
        if count and (start + first < 0 or start + end > mem.size):
            raise ValueError(f"{count} items of {self!r} from byte {start} "
                             f"need bytes {start + first}..{start + end} of a "
                             f"{mem.size}-byte buffer")

    def _offsets(self, count, start, mem):
        """Byte offsets in `mem` of every element of `count` items from byte
        `start`, in typemap order."""
        self._check_room(count, start, mem)
        h = _handle(self)
        steps = np.arange(count, dtype=np.int64)[:, None] * (h.ub - h.lb)
        return (start + steps + h.offsets).ravel()

    def _elements(self, mem, offsets):
        """An index into `mem` for the elements at byte `offsets` and the
        array it indexes: whole elements when every offset is a multiple of
        the element size, else single bytes."""
        dtype = self.np_dtype
        k = dtype.itemsize
        if not (offsets % k).any():
            return mem[:mem.size // k * k].view(dtype), offsets // k
        return mem, (offsets[:, None] + np.arange(k)).ravel()

    def pack(self, mem, count, start=0):
        """The elements of `count` items at byte `start` of the 1-D uint8
        array `mem`, as a 1-D array of `np_dtype`: a view of `mem` when the
        type is contiguous, else a gathered copy."""
        dtype = self.np_dtype
        if self.is_contiguous:
            self._check_room(count, start, mem)
            n = count * self.n_elements * dtype.itemsize
            return mem[start:start + n].view(dtype)
        source, index = self._elements(mem, self._offsets(count, start, mem))
        return source[index].view(dtype)

    def unpack(self, packed, mem, count, start=0):
        """Scatter `packed` (elements as pack() returns them) into the
        `count` items at byte `start` of the writable uint8 array `mem`.
        A shorter `packed` fills only the first elements (a short receive)."""
        if self.is_contiguous:
            target = self.pack(mem, count, start)
            target[:packed.size] = packed
            return
        offsets = self._offsets(count, start, mem)[:packed.size]
        target, index = self._elements(mem, offsets)
        target[index] = packed.view(target.dtype)


def _derive(cls, pieces):
    used = [(h, starts) for h, starts in pieces if starts.size]
    full = [(h, starts) for h, starts in used if h.n]
    elems = {id(h.elem): h.elem for h, _ in full}
    if len(elems) > 1:
        names = ", ".join(sorted([e.name for e in elems.values()]))
        raise NotImplementedError(
            f"gloocy datatypes are made of one element type; this one mixes "
            f"{names}")
    elem = next(iter(elems.values()), pieces[0][0].elem if pieces
                else (<Datatype>_BY_NAME["BYTE"])._h)
    if not used:
        return cls._wrap(Typemap(elem, np.zeros(0, np.int64), 0, 0, 0, 0))
    offsets = np.concatenate([(s[:, None] + h.offsets).ravel()
                              for h, s in full] or [np.zeros(0, np.int64)])
    lb = min([int(s.min()) + h.lb for h, s in used])
    ub = max([int(s.max()) + h.ub for h, s in used])
    true_lb = min([int(s.min()) + h.true_lb for h, s in full], default=0)
    true_ub = max([int(s.max()) + h.true_ub for h, s in full], default=0)
    return cls._wrap(Typemap(elem, offsets, lb, ub, true_lb, true_ub))


# -- the predefined types ----------------------------------------------------

def _pair(value):
    """The C struct {value; int} of MAXLOC/MINLOC."""
    return np.dtype([("v", value), ("i", "i4")], align=True)


# attribute names (aliases share the handle), MPI name, element dtype, typecode
_TABLE = [
    ("PACKED", "MPI_PACKED", "u1", "B"),
    ("BYTE", "MPI_BYTE", "u1", "B"),
    ("AINT", "MPI_AINT", "p", "p"),
    ("OFFSET", "MPI_OFFSET", "i8", "p"),
    ("COUNT", "MPI_COUNT", "i8", "p"),
    ("CHAR", "MPI_CHAR", "S1", "c"),
    ("WCHAR", "MPI_WCHAR", "U1", "U"),
    ("SIGNED_CHAR", "MPI_SIGNED_CHAR", "b", "b"),
    ("SHORT SIGNED_SHORT", "MPI_SHORT", "h", "h"),
    ("INT SIGNED_INT", "MPI_INT", "i", "i"),
    ("LONG SIGNED_LONG", "MPI_LONG", "l", "l"),
    ("LONG_LONG SIGNED_LONG_LONG", "MPI_LONG_LONG_INT", "q", "q"),
    ("UNSIGNED_CHAR", "MPI_UNSIGNED_CHAR", "B", "B"),
    ("UNSIGNED_SHORT", "MPI_UNSIGNED_SHORT", "H", "H"),
    ("UNSIGNED UNSIGNED_INT", "MPI_UNSIGNED", "I", "I"),
    ("UNSIGNED_LONG", "MPI_UNSIGNED_LONG", "L", "L"),
    ("UNSIGNED_LONG_LONG", "MPI_UNSIGNED_LONG_LONG", "Q", "Q"),
    ("FLOAT FLOAT32_T", "MPI_FLOAT", "f", "f"),
    ("DOUBLE FLOAT64_T", "MPI_DOUBLE", "d", "d"),
    ("LONG_DOUBLE", "MPI_LONG_DOUBLE", "g", "g"),
    ("C_BOOL BOOL", "MPI_C_BOOL", "?", "b1"),
    ("INT8_T SINT8_T", "MPI_INT8_T", "i1", "i1"),
    ("INT16_T SINT16_T", "MPI_INT16_T", "i2", "i2"),
    ("INT32_T SINT32_T", "MPI_INT32_T", "i4", "i4"),
    ("INT64_T SINT64_T", "MPI_INT64_T", "i8", "i8"),
    ("UINT8_T", "MPI_UINT8_T", "u1", "u1"),
    ("UINT16_T", "MPI_UINT16_T", "u2", "u2"),
    ("UINT32_T", "MPI_UINT32_T", "u4", "u4"),
    ("UINT64_T", "MPI_UINT64_T", "u8", "u8"),
    ("FLOAT16_T", "MPIX_C_FLOAT16", "e", "e"),
    # MPICH has no bfloat16 (there it is DATATYPE_NULL); gloocy's core has.
    ("BFLOAT16_T", "MPIX_BFLOAT16", None, None),
    ("C_COMPLEX C_FLOAT_COMPLEX", "MPI_C_COMPLEX", "F", "F"),
    ("C_DOUBLE_COMPLEX", "MPI_C_DOUBLE_COMPLEX", "D", "D"),
    ("C_LONG_DOUBLE_COMPLEX", "MPI_C_LONG_DOUBLE_COMPLEX", "G", "G"),
    ("CXX_BOOL", "MPI_CXX_BOOL", "?", "?"),
    ("CXX_FLOAT_COMPLEX", "MPI_CXX_FLOAT_COMPLEX", "F", "F"),
    ("CXX_DOUBLE_COMPLEX", "MPI_CXX_DOUBLE_COMPLEX", "D", "D"),
    ("CXX_LONG_DOUBLE_COMPLEX", "MPI_CXX_LONG_DOUBLE_COMPLEX", "G", "G"),
    ("SHORT_INT", "MPI_SHORT_INT", _pair("h"), None),
    ("INT_INT TWOINT", "MPI_2INT", _pair("i"), None),
    ("LONG_INT", "MPI_LONG_INT", _pair("l"), None),
    ("FLOAT_INT", "MPI_FLOAT_INT", _pair("f"), None),
    ("DOUBLE_INT", "MPI_DOUBLE_INT", _pair("d"), None),
    ("LONG_DOUBLE_INT", "MPI_LONG_DOUBLE_INT", _pair("g"), None),
    # Fortran
    ("CHARACTER", "MPI_CHARACTER", "S1", "c"),
    ("LOGICAL F_BOOL", "MPI_LOGICAL", "i4", "i"),
    ("INTEGER F_INT", "MPI_INTEGER", "i4", "i"),
    ("REAL F_FLOAT", "MPI_REAL", "f4", "f"),
    ("DOUBLE_PRECISION F_DOUBLE", "MPI_DOUBLE_PRECISION", "f8", "d"),
    ("COMPLEX F_COMPLEX F_FLOAT_COMPLEX", "MPI_COMPLEX", "c8", "F"),
    ("DOUBLE_COMPLEX F_DOUBLE_COMPLEX", "MPI_DOUBLE_COMPLEX", "c16", "D"),
    ("INTEGER1", "MPI_INTEGER1", "i1", "i1"),
    ("INTEGER2", "MPI_INTEGER2", "i2", "i2"),
    ("INTEGER4", "MPI_INTEGER4", "i4", "i4"),
    ("INTEGER8", "MPI_INTEGER8", "i8", "i8"),
    ("REAL4", "MPI_REAL4", "f4", "f4"),
    ("REAL8", "MPI_REAL8", "f8", "f8"),
    ("REAL16", "MPI_REAL16", "g", "f16"),
    ("COMPLEX8", "MPI_COMPLEX8", "c8", "c8"),
    ("COMPLEX16", "MPI_COMPLEX16", "c16", "c16"),
    ("COMPLEX32", "MPI_COMPLEX32", "G", "c32"),
]

# Names MPICH leaves null: distinct objects, all equal to DATATYPE_NULL.
_NULL_NAMES = ["DATATYPE_NULL", "LOGICAL1", "LOGICAL2", "LOGICAL4",
               "LOGICAL8", "LOGICAL16", "INTEGER16", "REAL2", "COMPLEX4"]

cdef dict _BY_NAME = {}      # every name above and in _TABLE -> its Datatype

for _name in _NULL_NAMES:
    _BY_NAME[_name] = Datatype()

for _attrs, _mpi_name, _np, _code in _TABLE:
    _attrs = _attrs.split()
    if _np is None:
        _h = _predefined(_attrs[0], _mpi_name, None, _code)
    elif isinstance(_np, np.dtype):     # pair: MPI counts no padding
        _h = _predefined(_attrs[0], _mpi_name, _np, _code,
                         size=_np["v"].itemsize + 4,
                         true_ub=_np.fields["i"][1] + 4)
    else:
        _h = _predefined(_attrs[0], _mpi_name, np.dtype(_np), _code)
    _dt = Datatype._wrap(_h)
    for _name in _attrs:
        _BY_NAME[_name] = _dt

globals().update(_BY_NAME)
__all__ += _NULL_NAMES + [a for row in _TABLE for a in row[0].split()]
del _attrs, _mpi_name, _np, _code, _h, _dt, _name

# -- typecodes (the format characters of the buffer protocol and NumPy) -------

def _named(table):
    """A typecode table of names, with the Datatypes they name."""
    return {code: _BY_NAME[name] for code, name in table.items()}


_typedict_c = _named({
    "?": "C_BOOL", "b": "SIGNED_CHAR", "h": "SHORT", "i": "INT",
    "l": "LONG", "q": "LONG_LONG", "B": "UNSIGNED_CHAR",
    "H": "UNSIGNED_SHORT", "I": "UNSIGNED", "L": "UNSIGNED_LONG",
    "Q": "UNSIGNED_LONG_LONG", "f": "FLOAT", "d": "DOUBLE",
    "g": "LONG_DOUBLE", "F": "C_FLOAT_COMPLEX", "D": "C_DOUBLE_COMPLEX",
    "G": "C_LONG_DOUBLE_COMPLEX", "b1": "C_BOOL", "i1": "INT8_T",
    "i2": "INT16_T", "i4": "INT32_T", "i8": "INT64_T", "u1": "UINT8_T",
    "u2": "UINT16_T", "u4": "UINT32_T", "u8": "UINT64_T",
    "f2": "FLOAT16_T", "f4": "FLOAT", "c8": "C_FLOAT_COMPLEX",
    "f8": "DOUBLE", "c16": "C_DOUBLE_COMPLEX", "f16": "LONG_DOUBLE",
    "c32": "C_LONG_DOUBLE_COMPLEX",
})

_typedict_f = _named({
    "l": "LOGICAL", "i": "INTEGER", "r": "REAL", "s": "REAL",
    "d": "DOUBLE_PRECISION", "c": "COMPLEX", "z": "DOUBLE_COMPLEX",
    "i1": "INTEGER1", "i2": "INTEGER2", "i4": "INTEGER4", "i8": "INTEGER8",
    "r4": "REAL4", "r8": "REAL8", "r16": "REAL16", "c8": "COMPLEX8",
    "c16": "COMPLEX16", "c32": "COMPLEX32",
})

# Everything a buffer format may say: struct-module codes, NumPy type
# strings, Python's "Z" complex prefix, chars/strings, datetimes as int64.
_typedict = dict(_typedict_c)
_typedict.update(_named({
    "e": "FLOAT16_T", "Zf": "C_FLOAT_COMPLEX", "Zd": "C_DOUBLE_COMPLEX",
    "Zg": "C_LONG_DOUBLE_COMPLEX",
    "n": "COUNT", "N": "UNSIGNED_LONG", "p": "AINT", "P": "UNSIGNED_LONG",
    "c": "CHAR", "a": "CHAR", "S": "CHAR", "S1": "CHAR", "s": "CHAR",
    "1s": "CHAR", "U": "WCHAR", "U1": "WCHAR", "w": "WCHAR", "1w": "WCHAR",
    "u": "UINT16_T", "1u": "UINT16_T",
    "M": "INT64_T", "M8": "INT64_T", "m": "INT64_T", "m8": "INT64_T",
}))


def from_typecode(code):
    """The predefined datatype of a typecode; KeyError when there is none
    (TypeError when `code` is unhashable, as in mpi4py)."""
    try:
        return _typedict[code]
    except KeyError:
        raise KeyError(f"no datatype has the typecode {code!r}") from None


def typecode(datatype):
    """The typecode of a predefined datatype (or of a Dup of one), else None."""
    if not isinstance(datatype, Datatype):
        raise TypeError(f"expected a Datatype, got {datatype!r}")
    h = (<Datatype>datatype)._h
    return None if h is None else h.code
