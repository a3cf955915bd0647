"""mpi4py buffer specifications, parsed into what the core moves.

    buf | [buf, datatype] | [buf, count] | [buf, count, datatype]
        | [buf, (count, displ), datatype] | [buf, count, displ, datatype]

for one message (`message`), and for one block per rank (`vector_message`)

    buf | [buf, counts] | [buf, (counts, displs)] | [buf, counts, datatype]
        | [buf, (counts, displs), datatype] | [buf, counts, displs, datatype]

Lists and tuples alike. `buf` is anything with the buffer protocol, a DLPack
producer on the CPU, or an array interface over host memory; a datatype is a
`gloocy.datatypes.Datatype` or a typecode ("d", "i4"...). Displacements count
datatype extents. What is left out is inferred as mpi4py does: the datatype
from the buffer's format, the count from its length. Errors have mpi4py's
exception types and name the argument.

A message's `data` is a 1-D array of the datatype's element dtype holding
exactly the bytes that travel: a view of the user's memory when the datatype
is contiguous, else a packed copy (send) or a scratch array that `unpack()`
scatters into the user's memory (receive).
"""

import ctypes
import functools
import operator
import sys
import warnings
import weakref

import numpy as np

from gloocy import errors
from gloocy.constants import BOTTOM, IN_PLACE
from gloocy.datatypes import BFLOAT16_T, Datatype, from_typecode
from gloocy.datatypes import (DOUBLE_INT, FLOAT_INT, INT_INT, LONG_DOUBLE_INT,
                              LONG_INT, SHORT_INT)

__all__ = ["BOTTOM", "Message", "VectorMessage", "message", "vector_message"]


_EMPTY = np.zeros(0, np.uint8)
_NATIVE = "<" if sys.byteorder == "little" else ">"


class Message:
    """One buffer of one call: `count` items of `datatype` travel as `data`."""

    __slots__ = ("data", "count", "datatype", "_mem", "_start")

    def __init__(self, data, count, datatype, mem=None, start=0):
        self.data, self.count, self.datatype = data, count, datatype
        self._mem, self._start = mem, start      # set when data is scratch

    @property
    def nbytes(self):
        return self.data.nbytes

    def unpack(self, nbytes=None):
        """Scatter received data into the user's memory (only needed, and
        only done, for non-contiguous receive datatypes); `nbytes`: how much
        arrived, when less than `data`."""
        if self._mem is not None:
            data = self.data
            if nbytes is not None:
                data = data[:nbytes // data.itemsize]
            self.datatype.unpack(data, self._mem, self.count, self._start)


class VectorMessage:
    """One block per rank: block i is data's bytes offsets[i] to
    offsets[i] + sizes[i] and holds counts[i] items of `datatype`."""

    __slots__ = ("data", "counts", "sizes", "offsets", "datatype", "_mem",
                 "_starts")

    def __init__(self, data, counts, sizes, offsets, datatype, mem=None,
                 starts=None):
        self.data, self.counts, self.datatype = data, counts, datatype
        self.sizes, self.offsets = sizes, offsets
        self._mem, self._starts = mem, starts    # set when data is scratch

    def unpack(self):
        """Scatter received blocks into the user's memory (only needed, and
        only done, for non-contiguous receive datatypes)."""
        if self._mem is None:
            return
        k = self.data.itemsize
        for count, start, offset, size in zip(self.counts, self._starts,
                                              self.offsets, self.sizes):
            block = self.data[offset // k:(offset + size) // k]
            self.datatype.unpack(block, self._mem, count, start)


# -- buffers ---------------------------------------------------------------------

def _buffer(obj, name, readonly):
    """(1-D uint8 view of obj's memory, what its element type is known by:
    a NumPy dtype or a buffer format)."""
    if isinstance(obj, np.ndarray):
        arr = obj
    else:
        try:
            view = memoryview(obj)
        except TypeError:
            arr = _foreign(obj, name)
        else:
            _check(view.contiguous, view.readonly, obj, name, readonly)
            if view.c_contiguous:
                return np.frombuffer(view, np.uint8), view.format
            return np.asarray(view).ravel(order="K").view(np.uint8), view.format
    if arr.dtype.hasobject:
        raise KeyError(f"{name}: NumPy arrays of Python objects have no "
                       "datatype (the lower-case methods pickle objects)")
    flags = arr.flags
    _check(flags.c_contiguous or flags.f_contiguous, not flags.writeable,
           obj, name, readonly)
    return arr.ravel(order="K").view(np.uint8), arr.dtype


def _check(contiguous, is_readonly, obj, name, readonly):
    if not contiguous:
        raise BufferError(f"{name}: {type(obj).__name__} buffer is not "
                          "contiguous; pass a contiguous copy (e.g. "
                          "numpy.ascontiguousarray) or describe the layout "
                          "with a derived datatype")
    if is_readonly and not readonly:
        raise BufferError(f"{name}: {type(obj).__name__} buffer is read-only "
                          "but must receive data")


class _HostArray:
    """An __array_interface__ NumPy can read, keeping its owner alive."""

    def __init__(self, interface, owner):
        self.__array_interface__ = {
            key: interface[key] for key in ("shape", "typestr", "descr",
                                            "data", "strides")
            if interface.get(key) is not None}
        self.__array_interface__["version"] = 3
        self.owner = owner


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_DLDeleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManaged(ctypes.Structure):             # DLPack < 1.0
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _DLDeleter)]


class _DLManagedVersioned(ctypes.Structure):    # DLPack >= 1.0
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", _DLDeleter),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_DL_READ_ONLY = 1 << 0
_DL_CAPSULES = {b"dltensor_versioned": _DLManagedVersioned,   # name -> struct
                b"dltensor": _DLManaged}

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]

_DL_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}   # DLDataTypeCode -> typestr
_DL_HOST_DEVICES = (1, 2, 3, 13)    # CPU; CUDA, CUDA host, managed: if host memory


def _dlpack_capsule(obj, device):
    """obj's capsule, versioned (DLPack 1.0) when the producer has it; a
    CUDA producer is asked not to synchronize any stream."""
    stream = {} if device == 1 else {"stream": -1}
    for kwargs in ({"max_version": (1, 0), **stream}, stream):
        try:
            return obj.__dlpack__(**kwargs)
        except (TypeError, RuntimeError):   # an older or a CPU-only producer
            pass
    return obj.__dlpack__()


def _tensor(capsule, name):
    """(managed tensor, read-only) of a capsule. The capsule is not marked
    used: holding it keeps the tensor alive, and its destructor releases
    the tensor (what mpi4py does, which producers made for it expect)."""
    for capsule_name, struct in _DL_CAPSULES.items():
        if capsule is not None and _capsule_valid(capsule, capsule_name):
            managed = struct.from_address(_capsule_pointer(capsule,
                                                           capsule_name))
            if struct is _DLManagedVersioned and managed.major != 1:
                raise BufferError(f"{name}: DLPack version "
                                  f"{managed.major}.{managed.minor} (1.x "
                                  "is understood)")
            flags = getattr(managed, "flags", 0)
            return managed, bool(flags & _DL_READ_ONLY)
    raise BufferError(f"{name}: __dlpack__ did not return an unused DLPack "
                      "capsule")


def _dlpack_device(obj, name):
    """The DLPack device type of obj (CPU when it does not say)."""
    if not hasattr(obj, "__dlpack_device__"):
        return 1
    device = obj.__dlpack_device__()
    if not isinstance(device, tuple):
        raise TypeError(f"{name}: __dlpack_device__() must return a tuple "
                        f"(device type, device id), got {device!r}")
    if len(device) != 2:
        raise ValueError(f"{name}: __dlpack_device__() must return "
                         f"(device type, device id), got {device!r}")
    if not all(isinstance(v, int) for v in device):
        raise TypeError(f"{name}: __dlpack_device__() gave {device!r}, not "
                        "two ints")
    return device[0]


def _from_dlpack(obj, name):
    """A NumPy array over a DLPack producer's memory, read from its capsule
    the way DLPack lays it out; the producer's deleter runs when the array
    goes."""
    device = _dlpack_device(obj, name)
    if device not in _DL_HOST_DEVICES:
        raise BufferError(f"{name}: {type(obj).__name__} lives on DLPack "
                          f"device type {device}; gloocy moves host memory "
                          "only (copy it to the CPU first)")
    capsule = _dlpack_capsule(obj, device)
    managed, readonly = _tensor(capsule, name)
    return _dlpack_array(obj, managed.dl_tensor, readonly, device, name,
                         capsule)


def _dlpack_layout(t, itemsize, name):
    """The element count of DLTensor t, whose elements must be one dense
    run (C or Fortran order; dimensions of one may have any stride)."""
    if t.ndim < 0 or t.ndim and not t.shape:
        raise BufferError(f"{name}: DLPack tensor of {t.ndim} dimensions "
                          "without a shape")
    shape = [t.shape[i] for i in range(t.ndim)]
    if any(n < 0 for n in shape):
        raise BufferError(f"{name}: DLPack shape {shape} is negative")
    count = int(np.prod(shape)) if shape else 1
    if t.strides and count > 1:
        strides = [t.strides[i] for i in range(t.ndim)]
        dims = [(n, st) for n, st in zip(shape, strides) if n > 1]
        for order in (dims[::-1], dims):            # C, then Fortran
            step = 1
            for n, st in order:
                if st != step:
                    break
                step *= n
            else:
                return count
        raise BufferError(f"{name}: DLPack strides {strides} of shape "
                          f"{shape} are not contiguous")
    return count


def _dlpack_array(obj, t, readonly, device, name, capsule):
    """The NumPy array of DLTensor t (its elements in memory order; a data
    type NumPy has no name for is its bytes); `capsule` lives as long."""
    itemsize = t.dtype.bits // 8 * t.dtype.lanes
    kind = _DL_KINDS.get(t.dtype.code) if t.dtype.lanes == 1 else (
        "c" if t.dtype.lanes == 2 and t.dtype.code == 2 else None)
    count = _dlpack_layout(t, itemsize, name)
    if kind is None or t.dtype.code == 6 and itemsize != 1:
        typestr, count = "|u1", count * itemsize       # opaque: its bytes
    elif t.dtype.code == 6:
        typestr = "|b1"
    else:
        typestr = f"{_NATIVE}{kind}{itemsize}"
    address = (t.data or 0) + t.byte_offset
    if device != 1 and address and _is_device_pointer(address):
        raise BufferError(f"{name}: {type(obj).__name__} is in CUDA device "
                          "memory; gloocy moves host memory only")
    host = _HostArray({"shape": (count,), "typestr": typestr,
                       "data": (address, readonly), "version": 3}, obj)
    array = np.asarray(host)
    # The capsule goes when the array does, from a weakref callback: its
    # destructor may run Python code, which must not run while an exception
    # is being raised (CPython saves and restores it around such callbacks).
    weakref.finalize(host, _keep, capsule)
    return array


def _keep(capsule):
    """Held by a finalizer until then; nothing to do."""


def _foreign(obj, name):
    """A NumPy array over a DLPack producer or an array interface."""
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, name)
    if hasattr(obj, "__cuda_array_interface__"):
        return _cuda_interface_array(obj, name)
    if hasattr(obj, "__array_interface__"):
        return np.asarray(obj)
    raise TypeError(f"{name}: expected a buffer (an object with the buffer "
                    "protocol, DLPack or an array interface) or "
                    f"[buffer, ...], got {type(obj).__name__}")


def _cuda_interface_array(obj, name):
    """A NumPy array over a __cuda_array_interface__ in host memory (CUDA
    host or managed memory), its fields checked as mpi4py checks them."""
    interface = obj.__cuda_array_interface__
    what = f"{name}: {type(obj).__name__}.__cuda_array_interface__"
    if not isinstance(interface, dict):
        raise TypeError(f"{what} is not a dict")
    data, typestr, shape = (interface["data"], interface["typestr"],
                            interface["shape"])          # KeyError: missing
    strides = interface.get("strides")
    descr = interface.get("descr")
    if not isinstance(data, tuple):
        raise TypeError(f"{what}: data must be (pointer, read-only)")
    if len(data) != 2:
        raise ValueError(f"{what}: data must be (pointer, read-only)")
    if interface.get("mask") is not None:
        raise BufferError(f"{what}: masked arrays are not supported")
    if not isinstance(typestr, str):
        raise TypeError(f"{what}: typestr must be a str")
    if typestr[:1] not in ("<", ">", "|", "=") or typestr[:1] == (
            ">" if _NATIVE == "<" else "<"):
        raise BufferError(f"{what}: typestr {typestr!r} is not in this "
                          "machine's byte order")
    dtype = np.dtype(typestr[1:2] + str(int(typestr[2:])))  # ValueError: bad size
    if descr is not None and not isinstance(descr, list):
        raise TypeError(f"{what}: descr must be a list")
    if descr is not None and (len(descr) != 1
                              or tuple(descr[0]) != ("", typestr)):
        warnings.warn(f"{what}: ignoring 'descr' {descr!r}; the typestr "
                      f"{typestr!r} describes the items", RuntimeWarning,
                      stacklevel=4)
    if not isinstance(shape, tuple) or not (strides is None
                                            or isinstance(strides, tuple)):
        raise TypeError(f"{what}: shape and strides must be tuples")
    if any(n < 0 for n in shape):
        raise BufferError(f"{what}: negative extent in shape {shape}")
    step = dtype.itemsize
    for n, stride in reversed(list(zip(shape, strides or shape))):
        if strides is not None and n > 1 and stride != step:
            raise BufferError(f"{what}: strides {strides} are not C-contiguous")
        step *= n
    address, readonly = data
    if address and _is_device_pointer(address):
        raise BufferError(f"{name}: {type(obj).__name__} is in CUDA device "
                          "memory; gloocy moves host memory only (copy it to "
                          "the host first)")
    count, typestr = int(np.prod(shape)), (_NATIVE + typestr[1:]
                                           if dtype.itemsize > 1
                                           else "|" + typestr[1:])
    if dtype.kind == "V":           # opaque items: their bytes (as mpi4py)
        count, typestr = count * dtype.itemsize, "|u1"
    host = {"shape": (count,), "typestr": typestr,
            "data": (address, bool(readonly)), "version": 3}
    return np.asarray(_HostArray(host, obj))


@functools.lru_cache(maxsize=None)
def _libcuda():
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def _is_device_pointer(address):
    """Whether the CUDA driver says `address` is device (not host) memory;
    without a driver it cannot be."""
    cuda = _libcuda()
    if cuda is None or not address:
        return False
    kind = ctypes.c_uint(0)
    # cuPointerGetAttribute(&kind, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr);
    # it fails (nonzero) on memory CUDA does not know: plain host memory.
    status = cuda.cuPointerGetAttribute(ctypes.byref(kind), 2,
                                        ctypes.c_void_p(address))
    return status == 0 and kind.value != 1      # 1: CU_MEMORYTYPE_HOST


# -- datatypes of buffers --------------------------------------------------------

# (value, index) structs of MAXLOC/MINLOC, by layout (field names are free)
def _layout(dtype):
    return (dtype.itemsize,) + tuple(dtype.fields[n][:2] for n in dtype.names)


_PAIRS = {_layout(t.np_dtype): t for t in (SHORT_INT, INT_INT, LONG_INT,
                                           FLOAT_INT, DOUBLE_INT,
                                           LONG_DOUBLE_INT)}
_OF_DTYPE = {}          # NumPy dtype -> Datatype, parsed once
_OF_FORMAT = {}         # buffer format -> Datatype, parsed once
_OWN = {}               # NumPy dtype -> the datatype whose np_dtype it is


def _inferred(key, name):
    """The datatype of a buffer whose elements are `key` (a NumPy dtype or
    a buffer format)."""
    cache = _OF_DTYPE if isinstance(key, np.dtype) else _OF_FORMAT
    datatype = cache.get(key)
    if datatype is None:
        datatype = cache[key] = (_of_dtype(key, name) if cache is _OF_DTYPE
                                 else _of_format(key, name))
        if cache is _OF_DTYPE and key == datatype.np_dtype:
            _OWN[key] = datatype
    return datatype


def _of_dtype(dtype, name):
    # Beyond mpi4py: aligned (value, index) structs and bfloat16, which the
    # core reduces.
    if dtype.names and _layout(dtype) in _PAIRS:
        return _PAIRS[_layout(dtype)]
    if dtype.name == "bfloat16":
        return BFLOAT16_T
    try:
        fmt = memoryview(np.empty(0, dtype)).format
    except (ValueError, TypeError, BufferError):
        raise BufferError(f"{name}: NumPy dtype {dtype} has no buffer "
                          "format, so no datatype; pass one") from None
    return _of_format(fmt, name)


def _of_format(fmt, name):
    code = fmt
    if code[:1] in ("@", "=", _NATIVE):
        code = code[1:]
    elif code[:1] in ("<", ">", "!"):
        raise BufferError(f"{name}: buffer format {fmt!r} is not in native "
                          "byte order")
    try:
        return from_typecode(code)
    except KeyError:
        raise KeyError(f"{name}: no datatype for buffer format {fmt!r}; "
                       "pass one") from None


def _datatype(value, name):
    """A datatype slot of a spec: None, a Datatype or a typecode."""
    if value is None:
        return value
    if isinstance(value, Datatype):
        if value and not value.is_committed:
            raise errors.GloocyError(f"{name}: datatype {value.name or '(derived)'} "
                                     "is not committed (call Commit())",
                                     errors.ERR_TYPE)
        return value
    try:
        return from_typecode(value)     # any other object: KeyError
    except KeyError:
        raise KeyError(f"{name}: {value!r} is neither a Datatype nor a "
                       "typecode") from None


for _code in "?bhilqBHILQefdgFDG":         # the usual arrays start fast
    _inferred(np.dtype(_code), "")
del _code


# -- counts and displacements ----------------------------------------------------

def _int(value, name, what):
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: {what} must be an integer, got "
                        f"{value!r}") from None


def _nonnegative(value, name, what):
    n = _int(value, name, what)
    if n < 0:
        raise ValueError(f"{name}: negative {what} {n}")
    return n


def _pair(value, name, what):
    """(count, displ) from a 2-sequence."""
    if len(value) != 2:
        raise ValueError(f"{name}: expected ({what}) as 2 items, got "
                         f"{len(value)}")
    return value[0], value[1]


def _entries(mem, datatype, name):
    """How many items of `datatype` fill `mem` (no count was given)."""
    extent = datatype.extent
    if extent <= 0 or mem.size % extent:
        raise ValueError(f"{name}: cannot infer the count: the buffer's "
                         f"{mem.size} bytes are not a whole number of "
                         f"{datatype!r} items (extent {extent})")
    return mem.size // extent


def _check_span(mem, datatype, count, start, name):
    first, end = datatype.span(count)
    if count and (start + first < 0 or start + end > mem.size):
        raise ValueError(f"{name}: {count} items of {datatype!r} at byte "
                         f"{start} need bytes {start + first}..{start + end} "
                         f"but the buffer has {mem.size}")


def _split(spec, name, vector):
    """(buf, count(s), displ(s), datatype) from a spec; the slots left out
    are None. Only a tuple holds (counts, displs) in a vector spec."""
    if not isinstance(spec, (list, tuple)):
        return spec, None, None, None
    pairs = tuple if vector else (list, tuple)
    what = "counts, displs" if vector else "count, displ"
    if len(spec) == 2:
        buf, second = spec
        if isinstance(second, (Datatype, str)):
            return buf, None, None, second
        if isinstance(second, pairs):
            return (buf,) + _pair(second, name, what) + (None,)
        return buf, second, None, None
    if len(spec) == 3:
        buf, counts, datatype = spec
        if isinstance(counts, pairs):
            return (buf,) + _pair(counts, name, what) + (datatype,)
        return buf, counts, None, datatype
    if len(spec) == 4:
        return tuple(spec)
    raise ValueError(f"{name}: expected a buffer or a list/tuple of 2 to 4 "
                     f"items, got {len(spec)} items")


def _memory(buf, datatype, name, readonly):
    """(uint8 view, datatype) of a spec's buffer, the datatype inferred when
    not given; None and BOTTOM are empty."""
    if buf is None or buf is BOTTOM:
        if datatype is None:
            raise KeyError(f"{name}: cannot infer a datatype from {buf!r}; "
                           "pass one")
        return _EMPTY, datatype
    if buf is IN_PLACE:
        raise TypeError(f"{name}: IN_PLACE is not a buffer here")
    mem, key = _buffer(buf, name, readonly)
    if datatype is None:
        datatype = _inferred(key, name)
    if not datatype:
        raise errors.ArgumentError(f"{name}: the datatype is "
                                  "DATATYPE_NULL", errors.ERR_TYPE)
    return mem, datatype


def _no_data(buf, counts, name):
    """None carries no data; nor does BOTTOM with per-rank counts (its
    absolute addresses are read by message() and w_blocks())."""
    if any(counts):
        if buf is BOTTOM:
            raise NotImplementedError(
                f"{name}: BOTTOM (absolute addresses) with counts and "
                "displacements per rank: use Alltoallw's byte displacements "
                "or a struct datatype of absolute addresses")
        raise ValueError(f"{name}: the buffer is None but the count is "
                         f"{sum(counts)}")


def at_addresses(first, end, name):
    """The process's memory from address `first` to `end`, for BOTTOM's
    absolute addresses (MPI.Get_address): a view the caller answers for,
    as in MPI."""
    if first <= 0:
        raise ValueError(f"{name}: data at address {first} from BOTTOM: "
                         "displacements from BOTTOM are absolute addresses "
                         "(MPI.Get_address)")
    return np.frombuffer((ctypes.c_char * (end - first)).from_address(first),
                         np.uint8)


# -- the specs -------------------------------------------------------------------

def message(spec, *, name, readonly=False, allow_in_place=False, blocks=1):
    """A Message from a buffer spec. `readonly`: the buffer is only sent
    (read-only memory is fine). With `allow_in_place`, IN_PLACE and None
    give None. `blocks`: a count given in the spec is per block (one block
    per rank in Gather, Scatter, Allgather, Alltoall), as in mpi4py."""
    if spec is None or spec is IN_PLACE:
        if allow_in_place:
            return None
        raise TypeError(f"{name}: expected a buffer or [buffer, ...], got "
                        f"{spec!r}")
    if type(spec) is np.ndarray:        # the common case, kept short
        own = _OWN.get(spec.dtype)
        flags = spec.flags
        if (own is not None and flags.c_contiguous
                and (readonly or flags.writeable)):
            return Message(spec if spec.ndim == 1 else spec.ravel(),
                           spec.size, own)
    buf, count, displ, datatype = _split(spec, name, vector=False)
    mem, datatype = _memory(buf, _datatype(datatype, name), name, readonly)
    if buf is BOTTOM and count:         # items at absolute addresses
        count = _nonnegative(count, name, "count") * blocks
        first, end = datatype.span(count)
        return _items(at_addresses(first, end, name), datatype, count,
                      -first, readonly)
    if buf is None or buf is BOTTOM:    # no memory: no data
        count = 0 if count is None else _nonnegative(count, name, "count")
        _no_data(buf, [count], name)
        return Message(np.zeros(0, datatype.np_dtype), 0, datatype)
    extent = datatype.extent
    displ = 0 if displ is None else _nonnegative(displ, name, "displacement")
    if displ and extent <= 0:
        raise ValueError(f"{name}: cannot place items at displacement "
                         f"{displ}: the datatype's extent is {extent}")
    if displ * extent > mem.size:
        raise ValueError(f"{name}: displacement {displ} is past the end of "
                         f"the buffer ({mem.size} bytes)")
    if count is None:
        count = _entries(mem, datatype, name) - displ
    else:
        count = _nonnegative(count, name, "count") * blocks
    start = displ * extent
    _check_span(mem, datatype, count, start, name)
    return _items(mem, datatype, count, start, readonly)


def _items(mem, datatype, count, start, readonly):
    """The Message of `count` items of datatype from byte `start` of mem."""
    if datatype.is_contiguous or readonly:
        return Message(datatype.pack(mem, count, start), count, datatype)
    scratch = np.empty(count * datatype.n_elements, datatype.np_dtype)
    return Message(scratch, count, datatype, mem, start)


def _per_rank(value, size, name, what):
    """A list of `size` ints from a sequence of them, or from one int `n`:
    [n] * size for counts, [n * i for each rank i] for displacements."""
    if value is None:
        return None
    try:
        n = operator.index(value)
    except TypeError:
        pass
    else:
        return [n] * size if what == "counts" else [n * i for i in range(size)]
    try:
        length = len(value)
    except TypeError:
        raise TypeError(f"{name}: {what} must be an integer or a sequence of "
                        f"integers, got {value!r}") from None
    # items first, then the length (so mpi4py's exception types)
    items = [_int(value[i], name, what) for i in range(length)]
    if length != size:
        raise ValueError(f"{name}: expected {size} {what} (one per rank), "
                         f"got {length}")
    return items


def vector_message(spec, size, *, name, readonly=False):
    """A VectorMessage from a vector buffer spec for `size` ranks (sizes and
    offsets of the blocks in bytes of `data`). `readonly`: the buffer is
    only sent."""
    if spec is None or spec is IN_PLACE:
        raise TypeError(f"{name}: expected a buffer or [buffer, counts, ...], "
                        f"got {spec!r}")
    buf, counts, displs, datatype = _split(spec, name, vector=True)
    mem, datatype = _memory(buf, _datatype(datatype, name), name, readonly)
    empty = buf is None or buf is BOTTOM
    counts = _per_rank(counts, size, name, "counts")
    displs = _per_rank(displs, size, name, "displs")
    if counts is None:          # the buffer split as evenly as it goes
        q, r = divmod(0 if empty else _entries(mem, datatype, name), size)
        counts = [q + (i < r) for i in range(size)]
    for n in counts:
        if n < 0:
            raise errors.ArgumentError(f"{name}: negative count {n}",
                                      errors.ERR_COUNT)
    if empty:
        _no_data(buf, counts, name)
    if displs is None:
        displs = [0] * size
        for i in range(1, size):
            displs[i] = displs[i - 1] + counts[i - 1]
    extent = datatype.extent
    starts = [d * extent for d in displs]
    for n, start in zip(counts, starts):
        _check_span(mem, datatype, n, start, name)
    dtype, k = datatype.np_dtype, datatype.np_dtype.itemsize
    sizes = [n * datatype.n_elements * k for n in counts]
    if datatype.is_contiguous:
        data = mem[:mem.size // k * k].view(dtype)
        return VectorMessage(data, counts, sizes, starts, datatype)
    offsets = [0] * size
    for i in range(1, size):
        offsets[i] = offsets[i - 1] + sizes[i - 1]
    if readonly:
        data = np.concatenate([datatype.pack(mem, n, start)
                               for n, start in zip(counts, starts)]
                              or [np.zeros(0, dtype)])
        return VectorMessage(data, counts, sizes, offsets, datatype)
    data = np.empty(sum(sizes) // k, dtype)
    return VectorMessage(data, counts, sizes, offsets, datatype, mem, starts)


def w_blocks(spec, size, *, name, readonly=False):
    """(uint8 memory, [(count, byte displacement, datatype)] per rank) of an
    Alltoallw spec: [buf, (counts, displs), datatypes], [buf, counts,
    displs, datatypes] or [buf, datatypes]; displacements are in bytes, each
    rank's block has its own datatype. Without counts and displacements
    (both None, or the two-item form) every block is one item at byte 0,
    as in mpi4py."""
    if not isinstance(spec, (list, tuple)):
        raise TypeError(f"{name}: expected [buffer, (counts, displs), datatypes] "
                        f"or [buffer, counts, displs, datatypes], got {spec!r}")
    if len(spec) not in (2, 3, 4):
        raise ValueError(f"{name}: expected 2 to 4 items ([buffer, (counts, "
                         f"displs), datatypes]...), got {len(spec)}")
    if len(spec) == 2:
        (buf, datatypes), counts, displs = spec, None, None
    elif len(spec) == 3:
        buf, pair, datatypes = spec
        counts, displs = _pair(pair, name, "counts, displs")
    else:
        buf, counts, displs, datatypes = spec
    if counts is None and displs is None and buf is not BOTTOM:
        counts, displs = [1] * size, [0] * size
    counts = _per_rank(counts, size, name, "counts")
    displs = _per_rank(displs, size, name, "displs")
    if counts is None or displs is None:
        raise ValueError(f"{name}: Alltoallw needs counts and displacements")
    if isinstance(datatypes, (Datatype, str)) or len(datatypes) != size:
        raise ValueError(f"{name}: expected {size} datatypes, one per rank, "
                         f"got {datatypes!r}")
    datatypes = [_datatype(d, name) for d in datatypes]
    if buf is BOTTOM and any(counts):   # displacements are addresses
        spans = [(start + d.span(n)[0], start + d.span(n)[1])
                 for n, start, d in zip(counts, displs, datatypes) if n]
        first = min([f for f, _ in spans])
        mem = at_addresses(first, max([e for _, e in spans]), name)
        displs = [start - first for start in displs]
        buf = mem
    mem = _memory(buf, datatypes[0], name, readonly)[0]
    if buf is None or buf is BOTTOM:
        _no_data(buf, counts, name)
    for n, start, datatype in zip(counts, displs, datatypes):
        if n < 0:
            raise errors.ArgumentError(f"{name}: negative count {n}", errors.ERR_COUNT)
        _check_span(mem, datatype, n, start, name)
    return mem, list(zip(counts, displs, datatypes))
