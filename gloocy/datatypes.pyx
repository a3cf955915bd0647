# cython: language_level=3
"""mpi4py-compatible datatypes: the predefined ones, derived ones, typecodes.

A datatype is a handle on a typemap (a `Typemap`, declared with its C
fields in datatypes.pxd, which the message layer reads directly). Every
typemap here is made of copies of one predefined element type (a NumPy
dtype: numbers, bools, chars and the C-struct (value, index) pairs of
MAXLOC/MINLOC), placed at byte offsets, with MPI's lower bound and extent;
a type that mixes element types (a struct of a double and a char) is kept
as the bytes MPI moves, which are sent but never reduced.
The buffer layer (`gloocy.bufspec`) moves a message as a contiguous array
of that element dtype: a view of the user's memory when the typemap is
dense (`is_contiguous`), else a packed copy.

Sizes, extents, names, aliases and typecodes are those of mpi4py on MPICH;
so are envelopes, contents and decode() (_type_recipes.pxi). Pack and
external32 are in gloocy.packing; how constructors lay types out in
_type_layouts.pxi; the predefined types in _type_names.pxi.
"""

from gloocy._core cimport Buf, get_buffer

import operator

import numpy as np

from gloocy import handles as _handles
from gloocy.attributes import Attributes, create_keyval, free_keyval
from gloocy.errors import ERR_ARG, ERR_COUNT, ERR_TYPE, ArgumentError

__all__ = ["Datatype", "from_typecode", "typecode", "typealign", "ORDER_C",
           "ORDER_F", "ORDER_FORTRAN", "DISTRIBUTE_BLOCK", "DISTRIBUTE_CYCLIC",
           "DISTRIBUTE_NONE", "DISTRIBUTE_DFLT_DARG"]

# mpi4py's values
ORDER_C = 56
ORDER_F = ORDER_FORTRAN = 57
DISTRIBUTE_BLOCK = 121
DISTRIBUTE_CYCLIC = 122
DISTRIBUTE_NONE = 123
DISTRIBUTE_DFLT_DARG = -49767


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


cdef Typemap _MIXED                 # the element of mixed types (below)
cdef dict _BY_NAME                  # every predefined name -> its Datatype (below)
cdef object _ONE_BYTE = np.zeros(1, np.int64)


cdef class Typemap:
    """What a datatype handle points at (fields: datatypes.pxd). Offsets
    are the byte offsets of the elements (copies of the predefined `elem`)
    in typemap order. A type mixing element types (a struct of a double
    and a char) is kept as the bytes MPI moves: its elem is _MIXED."""

    def __init__(self, Typemap elem, offsets, lb, ub, true_lb, true_ub,
                 name="", code=None, align=0):
        """offsets: an int64 array, or a range of byte offsets (a run,
        kept as its first offset and step however many elements it has)."""
        self.elem = elem
        if isinstance(offsets, range):
            self._offsets, self.n = None, len(offsets)
            self.run_first, self.run_step = offsets.start, offsets.step
        else:
            self._offsets, self.n = offsets, offsets.size
        self.align = align or elem.align
        self.np, self.attr = None, None
        self.itemsize, self.elem_size = elem.itemsize, elem.elem_size
        self.lb, self.ub = lb, ub
        self.true_lb, self.true_ub = true_lb, true_ub
        self.name, self.code = name, code
        self.committed = False      # derived types need Commit() before use
        self._layout()

    @property
    def offsets(self):
        """The byte offset of each element, in typemap order (a run is
        spelled out each time it is asked, and kept a run: only packing a
        sparse layout asks, at a cost in proportion to the data)."""
        if self._offsets is None:
            _check_elements(self.n)
            return (self.run_first
                    + np.arange(self.n, dtype=np.int64) * self.run_step)
        return self._offsets

    def placement(self):
        """The offsets as Typemap() takes them: a range for a run (O(1)),
        else the array."""
        if self._offsets is not None:
            return self._offsets
        step = self.run_step or 1   # (a range's step is never 0)
        return range(self.run_first, self.run_first + self.n * step, step)

    def copies_run(self, int64_t count):
        """The range of offsets of `count` copies of this typemap, one
        extent apart from byte 0, when they make one run; else None."""
        cdef int64_t extent = self.ub - self.lb
        if self._offsets is not None or count <= 0 or self.n == 0:
            return None
        if count == 1:
            return self.placement()
        if self.n == 1 and extent != 0:
            return range(self.run_first, self.run_first + count * extent,
                         extent)
        if self.run_step != 0 and self.n * self.run_step == extent:
            return range(self.run_first,
                         self.run_first + count * self.n * self.run_step,
                         self.run_step)
        return None

    cdef _layout(self):
        """What follows from the offsets and bounds."""
        cdef int64_t n = self.n, k = self.itemsize, last
        cdef bint dense
        self.data_lb = self.data_ub = 0
        if self._offsets is None:
            last = (n - 1) * self.run_step
            if n:
                self.data_lb = self.run_first + min(0, last)
                self.data_ub = self.run_first + max(0, last) + k
            dense = self.run_first == 0 and (n == 1 or self.run_step == k)
        else:
            if n:
                self.data_lb = int(self._offsets.min())
                self.data_ub = int(self._offsets.max()) + k
            dense = np.array_equal(self._offsets, np.arange(n) * k)
        # Dense: packing any number of items is a no-op.
        self.contiguous = n == 0 or (self.ub - self.lb == n * k and dense)
        self.core = self.elem.core if self.elem is not None else -1
        self.dense = (self.core if self.contiguous and n > 0 and self.lb == 0
                      else -1)

    def __reduce__(self):
        if self.attr:           # predefined: unpickle to this module's handle
            return _predefined_handle, (self.attr,)
        return _typemap, (self.elem, self.placement(), self.lb, self.ub,
                          self.true_lb, self.true_ub, self.name, self.code,
                          self.align, self.recipe, self.committed)


def _typemap(elem, offsets, lb, ub, true_lb, true_ub, name, code, align,
             recipe, committed):
    cdef Typemap h = Typemap(elem, offsets, lb, ub, true_lb, true_ub, name,
                             code, align)
    h.recipe, h.committed = recipe, committed
    return h


cdef Typemap _predefined(attr, mpi_name, np_dtype, code, size=None,
                         true_ub=None, int core=-1):
    """The handle of a predefined element type (np_dtype None: bfloat16,
    whose NumPy dtype is looked up only when needed)."""
    cdef Typemap h = Typemap.__new__(Typemap)
    h.elem, h.np, h.attr, h.name, h.code = h, np_dtype, attr, mpi_name, code
    h.committed = True
    h.itemsize = np_dtype.itemsize if np_dtype is not None else 2
    h.align = np_dtype.alignment if np_dtype is not None else 2
    h.run_first, h.run_step, h.n = 0, h.itemsize, 1   # a run of one
    h.lb, h.ub, h.true_lb = 0, h.itemsize, 0
    h.elem_size = h.itemsize if size is None else size
    h.true_ub = h.itemsize if true_ub is None else true_ub
    h._layout()
    h.core = h.dense = core if np_dtype is None else _core_code(np_dtype)
    return h


def _predefined_datatype(attr):
    return _BY_NAME[attr]


def _predefined_handle(attr):
    return (<Datatype>_BY_NAME[attr])._h


include "_type_layouts.pxi"        # constructors' arguments -> typemaps

include "_type_recipes.pxi"


cdef object _packing():
    # imported when first used: packing parses buffer specifications with
    # gloocy.bufspec, which imports this module
    import gloocy.packing
    return gloocy.packing


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

    __hash__ = None               # as mpi4py's handles

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
            return _predefined_datatype, (name,)    # this module's object
        return type(self), (_BY_NAME[name],)    # a copy or a subclass: Sub(FLOAT)

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
        """Named types, DATATYPE_NULL and Fortran 90 parameterized types."""
        h = self._h
        return (h is None or h.attr is not None or h.recipe is not None
                and h.recipe[0] in (COMBINER_F90_INTEGER, COMBINER_F90_REAL,
                                    COMBINER_F90_COMPLEX))

    # -- how it was made (_type_recipes.pxi) -------------------------------------

    Get_envelope = _get_envelope
    Get_contents = _get_contents
    decode = _decode

    @property
    def envelope(self):
        return _get_envelope(self)

    @property
    def contents(self):
        return _get_contents(self)

    @property
    def combiner(self):
        return _recipe(self)[0]

    @property
    def is_named(self):
        return _recipe(self)[0] == COMBINER_NAMED

    @property
    def typechar(self):
        """NumPy's character for the type ("V" for derived types)."""
        return "" if self._h is None else _typechar(self._h)

    @property
    def typestr(self):
        """NumPy's type string for the type ("V<extent>" for derived types)."""
        return "" if self._h is None else _typestr(self._h)

    @classmethod
    def Create_f90_integer(cls, r):
        """The integer type of at least r decimal digits."""
        name = _f90_kind("integer", 0, r, _INTEGER_KINDS)
        return _f90(COMBINER_F90_INTEGER, [_index(r, "r")], name)

    @classmethod
    def Create_f90_real(cls, p, r):
        """The real type of precision p and decimal exponent range r."""
        name = _f90_kind("real", p, r, _REAL_KINDS)
        return _f90(COMBINER_F90_REAL, [_index(p, "p"), _index(r, "r")], name)

    @classmethod
    def Create_f90_complex(cls, p, r):
        name = _f90_kind("complex", p, r, _COMPLEX_KINDS)
        return _f90(COMBINER_F90_COMPLEX, [_index(p, "p"), _index(r, "r")],
                    name)

    @classmethod
    def Match_size(cls, typeclass, size):
        """The Fortran type of `typeclass` (TYPECLASS_*) with `size` bytes."""
        if typeclass not in _MATCH:
            raise _mpi_error(f"typeclass: {typeclass!r} is not a TYPECLASS_*",
                             ERR_ARG)
        what, sizes = _MATCH[typeclass]
        name = sizes.get(_index(size, "size"))
        if name is None:
            raise _mpi_error(f"no {what} type of {size} bytes", ERR_ARG)
        return _BY_NAME[name]

    @classmethod
    def Get_value_index(cls, value, index):
        """The predefined (value, index) pair type of MAXLOC/MINLOC for
        these two types, or DATATYPE_NULL when there is none."""
        v, i = _handle(value), _handle(index)
        if i.name != "MPI_INT" or v.name not in _VALUE_INDEX:
            return _BY_NAME["DATATYPE_NULL"]
        return _BY_NAME[_VALUE_INDEX[v.name]]

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
        """The predefined datatype of a typecode (mpi4py's spelling);
        ValueError when there is none."""
        try:
            return from_typecode(code)
        except KeyError as e:
            raise ValueError(e.args[0]) from None

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
        dup = Typemap(h.elem, h.placement(), h.lb, h.ub, h.true_lb,
                      h.true_ub, code=h.code, align=h.align)
        dup.committed = h.committed
        dup.recipe = (COMBINER_DUP, [], [], [h])
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
        t = _copies(type(self), h, count)
        if t is None:
            _check_elements(count * h.n)
            t = _derive(type(self), [(h, np.arange(count, dtype=np.int64)
                                      * (h.ub - h.lb))])
        return _made(t, COMBINER_CONTIGUOUS, [], [count], [h])

    def Create_vector(self, count, blocklength, stride):
        """count blocks of blocklength items, block starts `stride` items apart."""
        h = _handle(self)
        stride = _index(stride, "stride")
        return _made(self.Create_hvector(count, blocklength,
                                         stride * (h.ub - h.lb)),
                     COMBINER_VECTOR, [], [count, blocklength, stride], [h])

    def Create_hvector(self, count, blocklength, stride):
        """As Create_vector with `stride` in bytes."""
        h = _handle(self)
        count = _count(count, "count")
        blocklength = _count(blocklength, "blocklength")
        stride = _index(stride, "stride")
        t = None
        if count == 1 or stride == blocklength * (h.ub - h.lb):
            t = _copies(type(self), h, count * blocklength)   # one run
        if t is None:
            _check_elements(count * blocklength * h.n)
            displs = np.arange(count, dtype=np.int64) * stride
            t = _derive(type(self), [(h, _block_starts(
                displs, [blocklength] * count, h.ub - h.lb))])
        return _made(t, COMBINER_HVECTOR, [], [count, blocklength, stride],
                     [h])

    def Create_indexed(self, blocklengths, displacements):
        """Blocks of blocklengths[i] items at displacements[i] items."""
        h = _handle(self)
        displs = _ints(displacements, "displacements")
        t = self.Create_hindexed(blocklengths,
                                 np.asarray(displs, np.int64) * (h.ub - h.lb))
        return _made(t, COMBINER_INDEXED, [],
                     [len(displs), *t._h.recipe[2][1:1 + len(displs)],
                      *displs], [h])

    def Create_hindexed(self, blocklengths, displacements):
        """As Create_indexed with displacements in bytes."""
        h = _handle(self)
        _same_length(blocklengths, displacements, "displacements")
        lengths = [_count(b, "blocklengths") for b in blocklengths]
        displs = _ints(displacements, "displacements")
        return _made(_derive(type(self), [(h, _block_starts(displs, lengths,
                                                            h.ub - h.lb))]),
                     COMBINER_HINDEXED, [], [len(lengths), *lengths, *displs],
                     [h])

    def Create_indexed_block(self, blocklength, displacements):
        t = self.Create_indexed([blocklength] * len(displacements),
                                displacements)
        c = t._h.recipe[2]
        return _made(t, COMBINER_INDEXED_BLOCK, [],
                     [c[0], _count(blocklength, "blocklength"), *c[1 + c[0]:]],
                     [_handle(self)])

    def Create_hindexed_block(self, blocklength, displacements):
        t = self.Create_hindexed([blocklength] * len(displacements),
                                 displacements)
        c = t._h.recipe[2]
        return _made(t, COMBINER_HINDEXED_BLOCK, [],
                     [c[0], _count(blocklength, "blocklength"), *c[1 + c[0]:]],
                     [_handle(self)])

    @classmethod
    def Create_struct(cls, blocklengths, displacements, datatypes):
        """Blocks of blocklengths[i] items of datatypes[i] at byte
        displacements[i]. When the element types differ, the extent is
        padded to a multiple of the widest element's alignment, as a C
        struct's (and MPICH's)."""
        _same_length(blocklengths, displacements, "displacements")
        _same_length(blocklengths, datatypes, "datatypes")
        pieces, lengths, displs, handles = [], [], [], []
        for b, d, t in zip(blocklengths, displacements, datatypes):
            h = t._handle()
            lengths.append(_count(b, "blocklengths"))
            displs.append(_index(d, "displacements"))
            handles.append(h)
            pieces.append((h, _block_starts([displs[-1]], [lengths[-1]],
                                            h.ub - h.lb)))
        return _made(_derive(cls, pieces, True), COMBINER_STRUCT, [],
                     [len(lengths), *lengths, *displs], handles)

    def Create_resized(self, lb, extent):
        """The same data with lower bound `lb` and extent `extent` (bytes)."""
        h = _handle(self)
        lb, extent = _index(lb, "lb"), _index(extent, "extent")
        return _made(self._wrap(Typemap(h.elem, h.placement(), lb, lb + extent,
                                        h.true_lb, h.true_ub, align=h.align)),
                     COMBINER_RESIZED, [], [lb, extent], [h])

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
        return _made(sub.Create_resized(0, flat.size * extent),
                     COMBINER_SUBARRAY, [len(sizes), order],
                     [*sizes, *subsizes, *starts], [h])

    def Create_darray(self, size, rank, gsizes, distribs, dargs, psizes,
                      order=ORDER_C):
        """Process `rank`'s part of a global array of shape gsizes
        distributed over a grid of psizes processes (rank's coordinates in
        it in row-major order), BLOCK, CYCLIC or NONE per dimension; its
        extent is the whole array's."""
        h = _handle(self)
        size, rank = _index(size, "size"), _index(rank, "rank")
        n = len(gsizes)
        for values, what in ((distribs, "distribs"), (dargs, "dargs"),
                             (psizes, "psizes")):
            _same_length(gsizes, values, what)
        gsizes = [_count(g, "gsizes") for g in gsizes]
        distribs, dargs = _ints(distribs, "distribs"), _ints(dargs, "dargs")
        psizes = [_count(p, "psizes") for p in psizes]
        if int(np.prod(psizes)) != size or not 0 <= rank < size:
            raise _mpi_error(f"psizes {psizes} must multiply to size {size} "
                             f"and rank {rank} be one of them", ERR_ARG)
        if order not in (ORDER_C, ORDER_F):
            raise _mpi_error(f"order: expected ORDER_C or ORDER_F, got "
                             f"{order!r}", ERR_ARG)
        coords = np.unravel_index(rank, psizes) if n else ()
        picked = [_distributed(g, d, a, p, int(c)) for g, d, a, p, c in
                  zip(gsizes, distribs, dargs, psizes, coords)]
        npo = "C" if order == ORDER_C else "F"
        index = np.arange(int(np.prod(gsizes)), dtype=np.int64).reshape(
            gsizes, order=npo)[np.ix_(*picked)] if n else np.zeros(1, np.int64)
        extent = h.ub - h.lb
        t = _derive(type(self), [(h, index.ravel(order=npo) * extent)])
        return _made(t.Create_resized(0, int(np.prod(gsizes)) * extent),
                     COMBINER_DARRAY,
                     [size, rank, n, *distribs, *dargs, *psizes, order],
                     gsizes, [h])

    # -- packing (gloocy.packing) -------------------------------------------

    def Pack(self, inbuf, outbuf, position, comm):
        """Pack inbuf into outbuf's bytes from `position`; the position
        after them."""
        return _packing().pack(self, inbuf, outbuf, position)

    def Unpack(self, inbuf, position, outbuf, comm):
        return _packing().unpack(self, inbuf, position, outbuf)

    def Pack_size(self, count, comm):
        return _packing().pack_size(self, count)

    def Pack_external(self, datarep, inbuf, outbuf, position):
        return _packing().pack_external(datarep, self, inbuf, outbuf,
                                        position)

    def Unpack_external(self, datarep, inbuf, position, outbuf):
        return _packing().unpack_external(datarep, self, inbuf, position,
                                          outbuf)

    def Pack_external_size(self, datarep, count):
        return _packing().pack_external_size(datarep, self, count)

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


include "_type_names.pxi"         # the predefined types and typecodes
