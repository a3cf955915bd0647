# The buffer layer: any object with the buffer protocol, C-contiguous,
# writable when it receives, with a format that maps to a gloocy dtype; the
# core's own allocations (_alloc); and the block layouts of the vector
# collectives (I64 arrays of counts and offsets, checked against a buffer).

import re

OP_NAMES = {OP_SUM: "SUM", OP_PROD: "PROD", OP_MIN: "MIN", OP_MAX: "MAX",
            OP_BAND: "BAND", OP_BOR: "BOR", OP_BXOR: "BXOR",
            OP_LAND: "LAND", OP_LOR: "LOR", OP_LXOR: "LXOR",
            OP_MAXLOC: "MAXLOC", OP_MINLOC: "MINLOC", OP_USER: "user"}
OP_CODES = {name: code for code, name in OP_NAMES.items()}

DTYPE_NAMES = {DT_BYTES: "bytes", DT_INT8: "int8", DT_INT16: "int16",
               DT_INT32: "int32", DT_INT64: "int64", DT_UINT8: "uint8",
               DT_UINT16: "uint16", DT_UINT32: "uint32", DT_UINT64: "uint64",
               DT_FLOAT16: "float16", DT_FLOAT32: "float32",
               DT_FLOAT64: "float64", DT_BOOL: "bool",
               DT_COMPLEX64: "complex64", DT_COMPLEX128: "complex128",
               DT_LONGDOUBLE: "longdouble", DT_BFLOAT16: "bfloat16",
               DT_FLOAT_INT: "float_int", DT_DOUBLE_INT: "double_int",
               DT_LONG_INT: "long_int", DT_2INT: "2int",
               DT_SHORT_INT: "short_int", DT_CLONGDOUBLE: "clongdouble"}
DTYPE_CODES = {name: code for code, name in DTYPE_NAMES.items()}

cdef int64_t DTYPE_SIZES[<int>DT_LAST]
DTYPE_SIZES[:] = [1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 1, 8, 16,
                  sizeof(long double), 2, sizeof(gloocy_float_int),
                  sizeof(gloocy_double_int), sizeof(gloocy_long_int),
                  sizeof(gloocy_2int), sizeof(gloocy_short_int),
                  2 * sizeof(long double)]

# numpy structured (value, index) pairs: T{<value code>:name:i:name:}
# (padding between the fields shows as "xx" or "2x")
_PAIR_FORMAT = re.compile(
    r"^T\{[@=<]?([fdlqih]):[^:]*:(?:\d*x)*[@=<]?i:[^:]*:\}$")
_PAIR_CODES = {b"f": DT_FLOAT_INT, b"d": DT_DOUBLE_INT, b"l": DT_LONG_INT,
               b"q": DT_LONG_INT, b"i": DT_2INT, b"h": DT_SHORT_INT}

cdef int _int_code(bint signed, Py_ssize_t size) noexcept nogil:
    if size == 1:
        return DT_INT8 if signed else DT_UINT8
    if size == 2:
        return DT_INT16 if signed else DT_UINT16
    if size == 4:
        return DT_INT32 if signed else DT_UINT32
    if size == 8:
        return DT_INT64 if signed else DT_UINT64
    return -1

cdef dict _FORMAT_DTYPES = {}      # (format, itemsize) -> DtypeCode: parse once

cdef int _dtype_cached(bytes fmt, Py_ssize_t itemsize):
    key = (fmt, itemsize)
    dt = _FORMAT_DTYPES.get(key)
    if dt is None:
        dt = _FORMAT_DTYPES[key] = dtype_of_format(fmt, itemsize)
    return dt


cdef int dtype_of_format(bytes fmt, Py_ssize_t itemsize) noexcept:
    """The DtypeCode of a struct-module format, -1 when unknown."""
    cdef bytes code = fmt
    cdef int dt
    pair = _PAIR_FORMAT.match(fmt.decode("ascii", "replace"))
    if pair:
        dt = _PAIR_CODES[pair.group(1).encode()]
        return dt if itemsize == DTYPE_SIZES[dt] else -1
    if code[:1] in (b"@", b"=", b"<") and len(code) > 1:
        code = code[1:]
    if code == b"Zf" and itemsize == 8:
        return DT_COMPLEX64
    if code == b"Zd" and itemsize == 16:
        return DT_COMPLEX128
    if code == b"g" and itemsize == sizeof(long double):
        return DT_LONGDOUBLE
    if code == b"Zg" and itemsize == 2 * sizeof(long double):
        return DT_CLONGDOUBLE
    if len(code) != 1:
        return -1
    return _dtype_of_char(code[0], itemsize)


cdef int _dtype_of_char(char c, Py_ssize_t itemsize) noexcept nogil:
    """The DtypeCode of a one-letter format (long double aside), -1 else."""
    if c in b"bhilqn":
        return _int_code(True, itemsize)
    if c in b"BHILQN":
        return _int_code(False, itemsize)
    if c == b"e" and itemsize == 2:
        return DT_FLOAT16
    if c == b"f" and itemsize == 4:
        return DT_FLOAT32
    if c == b"d" and itemsize == 8:
        return DT_FLOAT64
    if c == b"?" and itemsize == 1:
        return DT_BOOL
    return -1


cdef int _dtype_of_view(const char *fmt, Py_ssize_t itemsize):
    """dtype_of_format of a buffer's format: one letter is read in C (the
    usual arrays), the rest parsed once and cached."""
    if fmt is NULL:
        return _int_code(False, itemsize)     # "B" is the default
    if (fmt[0] == b"@" or fmt[0] == b"=" or fmt[0] == b"<") and fmt[1] != 0:
        fmt += 1
    if fmt[0] != 0 and fmt[1] == 0 and fmt[0] != b"g":
        return _dtype_of_char(fmt[0], itemsize)
    return _dtype_cached(<bytes>fmt, itemsize)


@cython.freelist(16)
@cython.no_gc          # holds no cycle: a buffer view and a name
cdef class Buf:
    """A buffer held for the length of one call (fields: _core.pxd)."""

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)

    cdef int require_dtype(self) except -1:
        if self.dtype < 0:
            raise TypeError(
                f"{self.name}: element format {self.format!r} has no gloocy "
                f"dtype (supported: {', '.join(list(DTYPE_CODES)[1:])}; "
                f"(value, index) pairs need an aligned structured dtype)")
        return 0

    @property
    def format(self):
        """The buffer's element format (for messages)."""
        if not self.held or self.view.format is NULL:
            return "B"
        return (<bytes>self.view.format).decode("ascii", "replace")


# Told of each user buffer of at least _watch_min bytes a call acquires:
# the ibverbs transport's registration cache learns which object owns the
# memory it is asked to register (set_buffer_watch). None: nobody listens.
cdef object _buffer_watch = None
cdef int64_t _watch_min = 0


def set_buffer_watch(watch, int64_t min_bytes=0):
    """Call watch(obj, address, nbytes) for every user buffer of at least
    min_bytes as a call acquires it; None: stop."""
    global _buffer_watch, _watch_min
    _buffer_watch = watch
    _watch_min = min_bytes


cdef Buf get_buffer(object obj, str name, bint writable, bint typed=False):
    """Acquire `obj`'s buffer; errors name the argument. A Buf (the message
    layer acquired it already) is used as it is."""
    cdef Buf b
    if type(obj) is Buf:
        b = <Buf>obj
        if writable and b.view.readonly:
            raise BufferError(f"{name}: buffer is read-only but must "
                              "receive data")
        return b
    b = Buf.__new__(Buf)
    b.name = name
    if obj is None:
        raise TypeError(f"{name}: expected a buffer, got None")
    cdef bint bf16 = False
    try:
        PyObject_GetBuffer(obj, &b.view, PyBUF_STRIDES if typed
                           else PyBUF_FORMAT | PyBUF_STRIDES)
    except (TypeError, ValueError, BufferError) as e:
        # bfloat16 arrays export no format of their own: view them as uint16
        # (asked only here: dtype.name costs microseconds).
        bf16 = _is_bfloat16(obj)
        if not bf16:
            raise type(e)(f"{name}: {type(obj).__name__} does not expose a "
                          f"usable buffer ({e})") from None
        PyObject_GetBuffer(obj.view("uint16"), &b.view,
                           PyBUF_FORMAT | PyBUF_STRIDES)
    b.held = True
    if not PyBuffer_IsContiguous(&b.view, b'C'):
        raise ValueError(f"{name}: buffer is not C-contiguous; pass a "
                         "contiguous copy (e.g. numpy.ascontiguousarray)")
    if writable and b.view.readonly:
        raise BufferError(f"{name}: buffer is read-only but must receive data")
    b.ptr = <char *>b.view.buf
    b.nbytes = b.view.len
    if _buffer_watch is not None and b.nbytes >= _watch_min:
        _buffer_watch(obj, <size_t>b.ptr, b.nbytes)
    b.itemsize = b.view.itemsize if b.view.itemsize > 0 else 1
    if typed:
        b.dtype = -1
    else:
        b.dtype = (DT_BFLOAT16 if bf16
                   else _dtype_of_view(b.view.format, b.itemsize))
    b.count = b.nbytes // b.itemsize
    return b


cdef bint _is_bfloat16(object obj):
    """An ml_dtypes.bfloat16 NumPy array (its buffer has no format)."""
    dtype = getattr(obj, "dtype", None)
    return dtype is not None and getattr(dtype, "name", None) == "bfloat16"


cdef int _raise_nomem() except -1 with gil:
    raise MemoryError()


cdef void *_alloc(int64_t nbytes) except? NULL nogil:
    cdef void *p = malloc(<size_t>(nbytes if nbytes > 0 else 1))
    if p is NULL:
        _raise_nomem()
    return p


# -- block layouts: counts and displacements of the vector collectives -------

cdef class I64:
    """A malloc'd array of int64 (counts, offsets) that frees itself."""

    def __cinit__(self, values):
        self.n = len(values)
        self.v = <int64_t *>malloc(max(self.n, 1) * sizeof(int64_t))
        if self.v is NULL:
            raise MemoryError()
        for i, x in enumerate(values):
            self.v[i] = x

    def __dealloc__(self):
        free(self.v)

    @staticmethod
    cdef I64 zeros(Py_ssize_t n):
        cdef I64 z = I64(())
        free(z.v)
        z.v = <int64_t *>calloc(max(n, 1), sizeof(int64_t))
        if z.v is NULL:
            raise MemoryError()
        z.n = n
        return z

    @staticmethod
    cdef I64 filled(Py_ssize_t n, int64_t value):
        cdef I64 z = I64.zeros(n)
        cdef Py_ssize_t i
        for i in range(n):
            z.v[i] = value
        return z

    cdef int64_t total(self):
        cdef int64_t t = 0
        for i in range(self.n):
            t += self.v[i]
        return t

    cdef I64 prefix(self):
        """Offsets of blocks of these sizes laid end to end."""
        out, at = [], 0
        for i in range(self.n):
            out.append(at)
            at += self.v[i]
        return I64(out)


cdef list _counts(object counts, int size, str name, str what=""):
    """`size` non-negative ints; errors name them as `name what`."""
    try:
        values = [int(n) for n in counts]
    except (TypeError, ValueError):
        raise TypeError(f"{_label(name, what)}: expected {size} integers, "
                        f"got {counts!r}") from None
    if len(values) != size:
        raise ValueError(f"{_label(name, what)}: expected {size} entries, "
                         f"got {len(values)}")
    for n in values:
        if n < 0:
            raise ValueError(f"{_label(name, what)}: counts must not be "
                             "negative")
    return values


cdef I64 _int64s(object counts, int size, str name, str what):
    """_counts as an I64; an I64 (the message layer's) passes through."""
    cdef I64 given
    cdef Py_ssize_t i
    if type(counts) is not I64:
        return I64(_counts(counts, size, name, what))
    given = counts
    if given.n != size:
        raise ValueError(f"{_label(name, what)}: expected {size} entries, "
                         f"got {given.n}")
    for i in range(size):
        if given.v[i] < 0:
            raise ValueError(f"{_label(name, what)}: counts must not be "
                             "negative")
    return given


cdef str _label(str name, str what):
    return f"{name} {what}" if what else name


cdef tuple _layout(object counts, object displs, int size, Buf b, str name):
    """(sizes, offsets) in bytes of `size` blocks inside buffer b (offsets
    default: end to end), checked to lie inside it."""
    cdef I64 sizes = _int64s(counts, size, name, "counts")
    cdef I64 offs
    cdef int i
    if displs is None:
        offs = I64.zeros(size)
        for i in range(1, size):
            offs.v[i] = offs.v[i - 1] + sizes.v[i - 1]
    else:
        offs = _int64s(displs, size, name, "displacements")
    for i in range(size):
        if offs.v[i] > b.nbytes or sizes.v[i] > b.nbytes - offs.v[i]:
            raise ValueError(f"{name}: block {i} ({sizes.v[i]} bytes at "
                             f"{offs.v[i]}) ends past the buffer's "
                             f"{b.nbytes} bytes")
    return sizes, offs


cdef int _same_dtype(Buf a, Buf b) except -1:
    if a.dtype != b.dtype:      # named as the core has them (a datatype
        raise ValueError(       # given in a spec overrides the format)
            f"{a.name} is {DTYPE_NAMES.get(a.dtype, a.format)!r} but "
            f"{b.name} is {DTYPE_NAMES.get(b.dtype, b.format)!r}: the "
            "datatypes differ")
    return 0


cdef int _same_layout(Buf a, Buf b) except -1:
    if a.nbytes != b.nbytes:
        raise ValueError(f"{a.name} has {a.nbytes} bytes but {b.name} has "
                         f"{b.nbytes}")
    return _same_dtype(a, b)
