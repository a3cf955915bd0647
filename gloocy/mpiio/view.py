"""File views of MPI-IO (gloocy.mpiio): which bytes of a file a process
sees, and how a buffer's data become file bytes.

A view is a displacement, an etype and a filetype: from byte `disp` on,
the filetype is laid down again and again (one copy per extent), and only
the bytes of its elements belong to the view. A read or a write moves the
*data stream* of the buffer (its elements packed in typemap order) to or
from the view's bytes, from a position counted in etypes. ``View.segments``
turns a stretch of the data stream into runs of file bytes.

Data representations: "native" and "internal" are the bytes in memory;
"external32" is big-endian (gloocy.packing's conversion), supported for
types whose external32 sizes are their native ones. A representation made
with Register_datarep converts with the user's functions, called on the
data stream as ``write_fn(userbuf, elemtype, count, filebuf, 0)`` and
``read_fn(userbuf, elemtype, count, filebuf, 0)``: `count` elements of the
buffer's element type, packed in `userbuf`; its extent_fn must give each
element type its native size (the file's layout is the memory one).
"""

import numpy as np

from gloocy import packing
from gloocy.errors import (ERR_ARG, ERR_DUP_DATAREP, ERR_IO, ERR_TYPE,
                           ERR_UNSUPPORTED_DATAREP, GloocyError)

__all__ = ["View", "element_runs", "register_datarep", "to_file", "from_file",
           "packed_dtype", "converts", "stream_size", "type_extent"]

EXTERNAL32 = "external32"
# name -> a user's representation (None: one of MPI's)
_datareps = {"native": None, "internal": None, EXTERNAL32: None}


class _UserRep:
    __slots__ = ("read_fn", "write_fn", "extent_fn")

    def __init__(self, read_fn, write_fn, extent_fn):
        self.read_fn, self.write_fn, self.extent_fn = read_fn, write_fn, extent_fn

    def check(self, datatype):
        """The file layout is the memory one: each element keeps its size."""
        elem = _element_type(datatype)
        size = int(self.extent_fn(elem))
        if size != elem.Get_size():
            raise NotImplementedError(
                f"datarep: its extent_fn gives {elem!r} {size} bytes, not its "
                f"native {elem.Get_size()}: gloocy's user data representations "
                "keep the native sizes")


def _element_type(datatype):
    from gloocy.datatypes import Datatype
    return Datatype._wrap(datatype._handle().elem)


def register_datarep(datarep, read_fn, write_fn, extent_fn):
    """mpi4py's Register_datarep: a new data representation (the module's
    docstring says how its functions are called)."""
    if not isinstance(datarep, str):
        raise TypeError(f"datarep: expected a str, got {datarep!r}")
    for name, fn in (("read_fn", read_fn), ("write_fn", write_fn)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name}: expected a callable or None, got {fn!r}")
    if not callable(extent_fn):
        raise TypeError(f"extent_fn: expected a callable, got {extent_fn!r}")
    if datarep in _datareps:
        raise GloocyError(f"datarep: {datarep!r} is already registered",
                          ERR_DUP_DATAREP)
    _datareps[datarep] = _UserRep(read_fn, write_fn, extent_fn)


def check_datarep(datarep):
    if datarep not in _datareps:
        raise GloocyError(f"datarep: {datarep!r} is not a data representation "
                          f"here ({', '.join(_datareps)})", ERR_UNSUPPORTED_DATAREP)
    return datarep


def type_extent(datatype, datarep):
    """The extent of datatype in a file of representation `datarep`."""
    user = _datareps.get(check_datarep(datarep))
    if user is not None:
        return int(user.extent_fn(datatype))
    if datarep == EXTERNAL32 and datatype.is_predefined:
        return packing.pack_external_size(EXTERNAL32, datatype, 1)
    if datarep == EXTERNAL32:
        _same_external_size(datatype)
    return datatype.Get_extent()[1]


def _same_external_size(datatype):
    """external32 is supported where it keeps the native sizes (the layout
    of the file is then the memory one)."""
    if datatype.Get_size() and (packing.pack_external_size(EXTERNAL32, datatype, 1)
                                != datatype.Get_size()):
        raise NotImplementedError(
            f"external32: {datatype!r} has other sizes in external32 than in "
            "memory; gloocy's external32 files support types whose sizes are "
            "the same (not long, long double, wchar)")


# -- a datatype's data bytes ----------------------------------------------------

def _element_fields(np_dtype, elem_size):
    """[(offset, size)] of the data bytes of one element (pairs such as
    SHORT_INT have a gap between value and index)."""
    if np_dtype.fields:
        return [(np_dtype.fields[n][1], np_dtype.fields[n][0].itemsize)
                for n in np_dtype.names]
    return [(0, elem_size)]


def element_runs(datatype):
    """(offsets, lengths), int64 arrays: the runs of data bytes of one item
    of datatype, in typemap order, adjacent runs merged."""
    h = datatype._handle()
    fields = _element_fields(datatype.np_dtype, h.elem_size)
    offs = (np.asarray(h.offsets, np.int64)[:, None]
            + np.array([f[0] for f in fields], np.int64)).ravel()
    lens = np.tile(np.array([f[1] for f in fields], np.int64), h.n)
    return _merged(offs, lens)


def _merged(offs, lens):
    """Runs with each run that starts where the previous ends joined to it."""
    keep = lens > 0
    offs, lens = offs[keep], lens[keep]
    if offs.size < 2:
        return offs, lens
    starts = np.flatnonzero(offs[1:] != offs[:-1] + lens[:-1]) + 1
    starts = np.concatenate(([0], starts))
    return offs[starts], np.add.reduceat(lens, starts)


def packed_dtype(np_dtype):
    """The dtype of the data stream of elements of np_dtype: pairs without
    their padding."""
    if not np_dtype.fields or np_dtype.itemsize == sum(
            np_dtype.fields[n][0].itemsize for n in np_dtype.names):
        return np_dtype
    return np.dtype([(n, np_dtype.fields[n][0]) for n in np_dtype.names])


def to_file(data, datatype, datarep):
    """The bytes a message's `data` (1-D array of elements of datatype)
    have in a file."""
    if datarep == EXTERNAL32 and data.size:
        _same_external_size(datatype)
        native, ext = packing._external_dtypes(datatype)
        data = packing._convert(data.view(native), native, ext)
    else:
        packed = packed_dtype(data.dtype)
        if packed is not data.dtype:
            data = data.astype(packed)
    raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    user = _datareps.get(datarep)
    if user is not None and data.size:
        user.check(datatype)
        if user.write_fn is not None:
            out = np.zeros(raw.size, np.uint8)
            user.write_fn(memoryview(raw), _element_type(datatype), data.size,
                          memoryview(out), 0)
            raw = out
    return raw


def converts(datarep):
    """Whether file bytes differ from memory bytes in `datarep`."""
    user = _datareps.get(datarep)
    return datarep == EXTERNAL32 or user is not None and (
        user.read_fn is not None or user.write_fn is not None)


def stream_size(data):
    """Bytes of `data` in a file (the representations kept here have the
    native sizes)."""
    return data.size * packed_dtype(data.dtype).itemsize


def from_file(raw, data, datatype, datarep):
    """Fill the first elements of `data` from the file bytes `raw` (whole
    elements)."""
    packed = packed_dtype(data.dtype)
    n = raw.size // packed.itemsize
    if not n:
        return
    raw = raw[:n * packed.itemsize]
    user = _datareps.get(datarep)
    if user is not None:
        user.check(datatype)
        if user.read_fn is not None:
            native = np.zeros(raw.size, np.uint8)
            user.read_fn(memoryview(native), _element_type(datatype), n,
                         memoryview(raw), 0)
            raw = native
        data[:n] = raw.view(packed)
    elif datarep == EXTERNAL32:
        _same_external_size(datatype)
        native, ext = packing._external_dtypes(datatype)
        data[:n] = packing._convert(raw.view(ext), ext, native).view(data.dtype)
    else:
        data[:n] = raw.view(packed)


# -- the view ---------------------------------------------------------------------

class View:
    """disp, etype, filetype and data representation of an open file, with
    the filetype's runs of data bytes (offsets from the start of each copy
    of it, lengths, and where each starts in its data)."""

    __slots__ = ("disp", "etype", "filetype", "datarep", "esize", "offs",
                 "lens", "starts", "fsize", "fextent", "dense")

    def __init__(self, disp, etype, filetype, datarep):
        for name, t in (("etype", etype), ("filetype", filetype)):
            if not t or not (t.is_predefined or t.is_committed):
                raise GloocyError(f"{name}: {t!r} is not a committed datatype",
                                  ERR_TYPE)
            if datarep == EXTERNAL32:
                _same_external_size(t)
            elif _datareps.get(check_datarep(datarep)) is not None:
                _datareps[datarep].check(t)
        self.disp, self.datarep = disp, datarep
        self.etype, self.filetype = etype, filetype
        self.esize = etype.Get_size()
        self.offs, self.lens = element_runs(filetype)
        self.fsize = int(self.lens.sum())
        self.fextent = filetype.Get_extent()[1]
        if self.esize <= 0 or self.fsize <= 0:
            raise GloocyError(f"Set_view: the etype and the filetype must hold "
                              f"data (sizes {self.esize} and {self.fsize})", ERR_TYPE)
        if self.fsize % self.esize:
            raise GloocyError(f"filetype: its {self.fsize} bytes are not whole "
                              f"etypes of {self.esize} bytes", ERR_TYPE)
        ends = self.offs + self.lens
        if (self.offs[0] < 0 or (self.offs[1:] < ends[:-1]).any()
                or ends[-1] > self.fextent):
            raise GloocyError("filetype: its displacements must be nonnegative, "
                              "increasing, without overlaps, and within its "
                              "extent", ERR_TYPE)
        self.starts = np.concatenate(([0], np.cumsum(self.lens)[:-1]))
        self.dense = (self.offs.size == 1 and self.offs[0] == 0
                      and self.lens[0] == self.fextent)

    def segments(self, pos, nbytes):
        """(file offsets, lengths) of the data bytes [pos, pos + nbytes) of
        the view, in order, adjacent runs merged."""
        if nbytes <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if self.dense:
            return (np.array([self.disp + pos], np.int64),
                    np.array([nbytes], np.int64))
        first, last = pos // self.fsize, (pos + nbytes - 1) // self.fsize
        copies = np.arange(first, last + 1, dtype=np.int64)[:, None]
        offs = (self.disp + copies * self.fextent + self.offs).ravel()
        data = (copies * self.fsize + self.starts).ravel()
        lens = np.tile(self.lens, copies.size)
        # cut the runs to [pos, pos + nbytes)
        lo = np.maximum(data, pos)
        hi = np.minimum(data + lens, pos + nbytes)
        offs, lens = offs + (lo - data), hi - lo
        return _merged(offs, lens)

    def byte_offset(self, pos):
        """The file offset of data byte `pos` of the view."""
        copy, rest = divmod(pos, self.fsize)
        i = int(np.searchsorted(self.starts, rest, "right")) - 1
        return (self.disp + copy * self.fextent + int(self.offs[i])
                + rest - int(self.starts[i]))

    def data_before(self, file_size):
        """How many data bytes of the view lie before byte `file_size`."""
        x = file_size - self.disp
        if x <= 0:
            return 0
        copy, rest = divmod(x, self.fextent)
        inside = np.clip(rest - self.offs, 0, self.lens).sum()
        return copy * self.fsize + int(inside)

    def check_whole(self, nbytes):
        if nbytes % self.esize:
            raise GloocyError(f"buf: {nbytes} bytes are not whole etypes of "
                              f"{self.esize} bytes", ERR_IO)

    @staticmethod
    def check_offset(offset, what="offset"):
        offset = int(offset)
        if offset < 0:
            raise GloocyError(f"{what}: {offset} is negative", ERR_ARG)
        return offset
