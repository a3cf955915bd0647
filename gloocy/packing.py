"""MPI_Pack and friends: a message's items as contiguous bytes at a position
of a user buffer, and back; "external32", MPI's portable representation
(big-endian, fixed sizes); addresses (Get_address, Aint_add, Aint_diff).

The bytes of a packed message are those gloocy sends: a datatype's elements
in typemap order, without gaps (bufspec.message gathers and scatters them).
"""

import numpy as np

from gloocy import bufspec
from gloocy.memory import BottomType, BufferAutomaticType, InPlaceType, buffer
from gloocy.errors import ArgumentError, ERR_ARG, ERR_TRUNCATE

__all__ = ["pack", "unpack", "pack_size", "pack_external", "unpack_external",
           "pack_external_size", "get_address", "aint_add", "aint_diff"]

EXTERNAL32 = "external32"


def _out_bytes(buf, name):
    """The writable bytes of buffer `buf`."""
    return bufspec._buffer(buf, name, False)[0]


def _position(position, room):
    position = bufspec._nonnegative(position, "position", "position")
    if position > room:
        raise ArgumentError(f"position: {position} is past the end of the "
                            f"{room}-byte buffer", ERR_ARG)
    return position


def _put(data, outbuf, position):
    out = _out_bytes(outbuf, "outbuf")
    position = _position(position, out.size)
    n = data.nbytes
    if position + n > out.size:
        raise ArgumentError(f"outbuf: {n} packed bytes do not fit at position "
                            f"{position} of a {out.size}-byte buffer",
                            ERR_TRUNCATE)
    out[position:position + n] = data.reshape(-1).view(np.uint8)
    return position + n


def _take(inbuf, position, n):
    raw = bufspec._buffer(inbuf, "inbuf", True)[0]
    position = _position(position, raw.size)
    if position + n > raw.size:
        raise ArgumentError(f"inbuf: {n} bytes to unpack at position "
                            f"{position}, but the buffer has {raw.size}",
                            ERR_TRUNCATE)
    return raw[position:position + n]


def pack(datatype, inbuf, outbuf, position):
    """Pack the items of datatype in buffer inbuf into outbuf's bytes from
    `position`; the position after them."""
    m = bufspec.message(_items(inbuf, datatype, "inbuf"), name="inbuf",
                        readonly=True)
    return _put(m.data, outbuf, position)


def unpack(datatype, inbuf, position, outbuf):
    """Unpack the bytes of inbuf from `position` into the items of datatype
    in buffer outbuf; the position after them."""
    m = bufspec.message(_items(outbuf, datatype, "outbuf"), name="outbuf")
    raw = _take(inbuf, position, m.nbytes)
    m.data.reshape(-1).view(np.uint8)[:] = raw
    m.unpack()
    return position + m.nbytes


def pack_size(datatype, count):
    """Bytes that `count` items of datatype take packed (no overhead)."""
    return bufspec._nonnegative(count, "count", "count") * datatype.Get_size()


def _items(buf, datatype, name):
    """The message mpi4py's Pack and Unpack read in a buffer: as many whole
    items of datatype as its bytes hold, from its first byte."""
    if isinstance(buf, (list, tuple)):
        raise TypeError(f"{name}: expected a buffer, got {type(buf).__name__}"
                        " (the datatype is the method's object)")
    extent = datatype.Get_extent()[1]
    if extent <= 0:
        raise ArgumentError(f"{name}: cannot count items of a datatype of "
                            f"extent {extent}", ERR_ARG)
    return [buf, bufspec._buffer(buf, name, True)[0].size // extent, datatype]


# -- external32 -------------------------------------------------------------------

# Sizes MPI fixes for external32 where they differ from this machine's.
_EXTERNAL_SIZES = {"MPI_LONG": 4, "MPI_UNSIGNED_LONG": 4, "MPI_WCHAR": 4,
                   "MPI_LONG_DOUBLE": 16, "MPI_C_LONG_DOUBLE_COMPLEX": 32,
                   "MPI_CXX_LONG_DOUBLE_COMPLEX": 32}


def _check_datarep(datarep):
    if datarep != EXTERNAL32:
        raise ArgumentError(f"datarep: {datarep!r} is not a supported data "
                            f"representation (only {EXTERNAL32!r})", ERR_ARG)


def _element(datatype):
    """MPI's name of the element type of a (possibly derived) datatype."""
    return datatype._handle().elem.name


def _external_dtypes(datatype):
    """(native element dtype, external32 dtype: big-endian, MPI's size)."""
    native = datatype.np_dtype
    if native.fields:           # (value, index) pairs: their fields, packed
        fields = [(n, _external(native.fields[n][0], None))
                  for n in native.names]
        return native, np.dtype(fields)
    return native, _external(native, _element(datatype))


_LONG_DOUBLES = (np.dtype(np.longdouble), np.dtype(np.clongdouble))


def _external(dt, mpi_name):
    size = _EXTERNAL_SIZES.get(mpi_name, dt.itemsize)
    if dt.kind == "U":
        return np.dtype(">u4")
    if dt in _LONG_DOUBLES:
        return np.dtype(("V", 16 * (1 + (dt.kind == "c"))))   # IEEE quad
    if dt.kind in "iu" and size != dt.itemsize:
        return np.dtype(f">{dt.kind}{size}")
    return dt.newbyteorder(">")


def pack_external_size(datarep, datatype, count):
    _check_datarep(datarep)
    count = bufspec._nonnegative(count, "count", "count")
    _, ext = _external_dtypes(datatype)
    return count * datatype.n_elements * ext.itemsize


def pack_external(datarep, datatype, inbuf, outbuf, position):
    _check_datarep(datarep)
    m = bufspec.message(_items(inbuf, datatype, "inbuf"), name="inbuf",
                        readonly=True)
    native, ext = _external_dtypes(datatype)
    return _put(_convert(m.data.view(native), native, ext), outbuf, position)


def unpack_external(datarep, datatype, inbuf, position, outbuf):
    _check_datarep(datarep)
    m = bufspec.message(_items(outbuf, datatype, "outbuf"), name="outbuf")
    native, ext = _external_dtypes(datatype)
    n = m.data.nbytes // native.itemsize
    raw = _take(inbuf, position, n * ext.itemsize)
    m.data.reshape(-1).view(native)[:] = _convert(raw.view(ext), ext, native)
    m.unpack()
    return position + n * ext.itemsize


def _convert(values, src, dst):
    """values (of dtype src) as dtype dst: a byte swap or a resize, field
    by field for pairs; long doubles to and from IEEE quad."""
    if src.fields:
        out = np.empty(values.shape, dst)
        for name in src.names:
            out[name] = _convert(values[name], src.fields[name][0],
                                 dst.fields[name][0])
        return out
    if src.kind == "V" or dst.kind == "V":
        return _quad(values, src, dst)
    if src.kind == "U":                 # UCS-4 characters as their codes
        return values.view(np.uint32).astype(dst)
    if dst.kind == "U":
        return values.astype(np.uint32).view(dst)
    return values.astype(dst)


def _quad(values, src, dst):
    """Long doubles (or their complex pairs) to or from big-endian IEEE
    quad precision. x86's 80-bit extended has the same sign and exponent
    and an explicit integer bit; quad keeps 112 fraction bits."""
    native = dst if dst.kind != "V" else src
    parts = 2 if native.kind == "c" else 1
    if np.finfo(np.longdouble).nmant != 63:
        if np.finfo(np.longdouble).nmant == 112:     # already quad: swap
            step = native.itemsize // parts
            return (np.ascontiguousarray(values).view(np.uint8)
                    .reshape(-1, step)[:, ::-1].copy().view(dst).reshape(-1))
        raise NotImplementedError("external32 long doubles: this machine's "
                                  "long double is neither x87 nor quad")
    if dst.kind == "V":                 # x87 -> quad
        x = np.ascontiguousarray(values).view(np.uint16).reshape(-1, 8)
        mant = x[:, :4].copy().view(np.uint64).reshape(-1)
        signexp = x[:, 4].astype(np.uint64)
        hi = (signexp << np.uint64(48)) | ((mant >> np.uint64(15))
                                           & np.uint64((1 << 48) - 1))
        lo = (mant & np.uint64(0x7FFF)) << np.uint64(49)
        return np.stack([hi, lo], 1).astype(">u8").reshape(-1).view(dst)
    q = np.ascontiguousarray(values).view(">u8").reshape(-1, 2).astype(np.uint64)
    hi, lo = q[:, 0], q[:, 1]
    signexp = hi >> np.uint64(48)
    integer = np.where(signexp & np.uint64(0x7FFF), np.uint64(1 << 63),
                       np.uint64(0))
    mant = (integer | ((hi & np.uint64((1 << 48) - 1)) << np.uint64(15))
            | (lo >> np.uint64(49)))
    out = np.zeros((hi.size, 8), np.uint16)
    out[:, :4] = mant.view(np.uint16).reshape(-1, 4)
    out[:, 4] = signexp.astype(np.uint16)
    return out.reshape(-1).view(np.longdouble).view(dst).reshape(-1)


# -- addresses ---------------------------------------------------------------------

def get_address(location):
    """The address of location's first byte (None: 0; BOTTOM, IN_PLACE,
    BUFFER_AUTOMATIC: the address they stand for)."""
    if location is None:
        return 0
    if isinstance(location, (BottomType, InPlaceType, BufferAutomaticType)):
        return int(location)
    if isinstance(location, buffer):    # its own (an empty one's may be NULL)
        return location.address
    return int(bufspec._buffer(location, "location", True)[0].ctypes.data)


def aint_add(base, disp):
    return int(base) + int(disp)


def aint_diff(addr1, addr2):
    return int(addr1) - int(addr2)
