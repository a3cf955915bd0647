# cython: language_level=3
"""mpi4py's ``MPI.buffer`` (alias ``MPI.memory``): a 1-D view of bytes of
memory, with its address, that the buffer protocol exports.

It views another object's buffer (``buffer(obj)``, ``frombuffer``), fresh
memory (``allocate``, what ``Alloc_mem`` returns) or raw memory at an
address (``fromaddress``, the caller answers for it). ``release()`` forgets
the memory; the view is empty afterwards.

Also mpi4py's address constants ``BOTTOM``, ``IN_PLACE`` and
``BUFFER_AUTOMATIC``: singletons that stand for MPICH's addresses (0, -1,
-2) as integers and export an empty buffer, as mpi4py's do. gloocy tells
them apart by identity (``buf is IN_PLACE``); they live here, in a module
that imports nothing from gloocy when it is loaded, so every layer may
import them.
"""

from cpython.buffer cimport (PyBUF_FORMAT, PyBUF_ND, PyBUF_SIMPLE,
                             PyBUF_STRIDES, PyBUF_WRITABLE, PyBuffer_FillInfo,
                             PyBuffer_Release, PyObject_CheckBuffer,
                             PyObject_GetBuffer)
from libc.stdint cimport uintptr_t
from libc.string cimport memmove, memset

__all__ = ["buffer", "memory", "BOTTOM", "IN_PLACE", "BUFFER_AUTOMATIC",
           "BottomType", "InPlaceType", "BufferAutomaticType"]

cdef object _NOTHING = object()


cdef bint _on_device(obj) except -1:
    """Whether obj says its memory is a device's (a DLPack device other than
    the CPU, or a CUDA array interface): as in mpi4py, a buffer over it
    gives the host no access to the bytes (BufferError)."""
    if PyObject_CheckBuffer(obj):
        return False
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return obj.__dlpack_device__()[0] != 1      # kDLCPU
    return hasattr(obj, "__cuda_array_interface__")


cdef class buffer:
    """A 1-D view of bytes (format "B") of memory; over a device's memory
    (DLPack, CUDA array interface) its bytes cannot be read or written
    through its own methods (it still exports the buffer, as mpi4py's)."""

    cdef Py_buffer _view            # held when _held
    cdef bint _held
    cdef char *_ptr
    cdef Py_ssize_t _size
    cdef bint _readonly
    cdef bint _device               # the memory is a device's: no host access
    cdef object _obj                # what the memory belongs to, or None

    def __init__(self, obj=_NOTHING):
        if obj is not _NOTHING:
            self._hold(obj, False, False)

    cdef _hold(self, obj, bint writable, bint readonly):
        """View obj's buffer (writable: refuse a read-only one; readonly:
        export it read-only even when it is writable)."""
        self.release()
        cdef object exporter = obj
        if not PyObject_CheckBuffer(obj):   # DLPack, array interfaces
            from gloocy import bufspec      # (bufspec imports this module)
            exporter = bufspec._buffer(obj, "buffer", not writable)[0]
        PyObject_GetBuffer(exporter, &self._view,
                           PyBUF_WRITABLE if writable else PyBUF_SIMPLE)
        self._held = True
        self._ptr, self._size = <char *>self._view.buf, self._view.len
        self._readonly = self._view.readonly or readonly
        self._device = _on_device(obj)
        self._obj = obj

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._view)

    # -- constructors --------------------------------------------------------

    @classmethod
    def allocate(cls, nbytes, bint clear=False):
        """Fresh memory of nbytes (zeroed: Python's bytearray always is)."""
        if not isinstance(nbytes, int):
            raise TypeError(f"nbytes: expected an int, got {nbytes!r}")
        if nbytes < 0:
            raise ValueError(f"nbytes: negative size {nbytes}")
        cdef buffer self = cls.__new__(cls)
        self._hold(bytearray(nbytes), False, False)
        return self

    @classmethod
    def frombuffer(cls, obj, bint readonly=False):
        """A view of obj's buffer (writable unless `readonly`)."""
        cdef buffer self = cls.__new__(cls)
        self._hold(obj, not readonly, readonly)
        return self

    @classmethod
    def fromaddress(cls, address, Py_ssize_t nbytes, bint readonly=False):
        """A view of nbytes at a raw address (nothing keeps them alive)."""
        if nbytes < 0:
            raise ValueError(f"nbytes: negative size {nbytes}")
        if address == 0 and nbytes > 0:
            raise ValueError("address: NULL with a nonzero size")
        cdef buffer self = cls.__new__(cls)
        self._ptr = <char *><uintptr_t>address
        self._size, self._readonly = nbytes, readonly
        return self

    def toreadonly(self):
        """A read-only view of the same memory."""
        cdef buffer other = type(self).__new__(type(self))
        if self._held:
            other._hold(self._obj, False, True)
        else:
            other._ptr, other._size = self._ptr, self._size
        other._readonly = True
        return other

    def release(self):
        """Forget the memory (and release the viewed object's buffer)."""
        if self._held:
            self._held = False
            PyBuffer_Release(&self._view)
        self._ptr, self._size, self._readonly, self._obj = NULL, 0, False, None
        self._device = False

    cdef int _host_only(self) except -1:
        if self._device:
            raise BufferError(f"buffer: the memory of {type(self._obj).__name__} "
                              "is a device's (DLPack or CUDA array interface): "
                              "not readable here")
        return 0

    # -- what it is --------------------------------------------------------------

    @property
    def address(self):
        return <uintptr_t>self._ptr

    @property
    def obj(self):
        return self._obj

    @property
    def nbytes(self):
        return self._size

    @property
    def readonly(self):
        return self._readonly

    @property
    def format(self):
        return "B"

    @property
    def itemsize(self):
        return 1

    def __len__(self):
        return self._size

    def __getbuffer__(self, Py_buffer *view, int flags):
        # (the message layer reads the address through it, device or not)
        PyBuffer_FillInfo(view, self, self._ptr, self._size, self._readonly,
                          flags)

    def tobytes(self, order=None):
        self._host_only()
        return self._ptr[:self._size]

    def cast(self, format, shape=None):
        self._host_only()
        view = memoryview(self)
        return view.cast(format) if shape is None else view.cast(format, shape)

    # -- items and slices ----------------------------------------------------------

    cdef Py_ssize_t _index(self, i) except -1:
        cdef Py_ssize_t k = i
        if k < 0:
            k += self._size
        if not 0 <= k < self._size:
            raise IndexError(f"index {i} out of range (size {self._size})")
        return k

    cdef tuple _span(self, slice s):
        start, stop, step = s.indices(self._size)
        if step != 1:
            raise IndexError("slices of a buffer must have step 1")
        return start, max(start, stop)

    def __getitem__(self, item):
        cdef buffer part
        if isinstance(item, slice):
            start, stop = self._span(item)
            part = type(self).__new__(type(self))
            if self._held:
                part._hold(self._obj, False, self._readonly)
            part._ptr, part._size = self._ptr + <Py_ssize_t>start, stop - start
            part._readonly = self._readonly
            return part
        if not hasattr(item, "__index__"):
            raise TypeError(f"buffer indices must be integers or slices, not "
                            f"{type(item).__name__}")
        self._host_only()
        return <unsigned char>self._ptr[self._index(item)]

    def __setitem__(self, item, value):
        if self._readonly:
            raise TypeError("buffer is read-only")
        cdef Py_ssize_t start, stop
        if isinstance(item, slice):
            start, stop = self._span(item)
            if isinstance(value, int):
                memset(self._ptr + start, <unsigned char>value, stop - start)
                return
            source = memoryview(value).cast("B")
            if source.nbytes != stop - start:
                raise ValueError(f"cannot assign {source.nbytes} bytes to a "
                                 f"slice of {stop - start}")
            memoryview(self)[start:stop] = source
            return
        if not hasattr(item, "__index__"):
            raise TypeError(f"buffer indices must be integers or slices, not "
                            f"{type(item).__name__}")
        self._host_only()
        self._ptr[self._index(item)] = <char><unsigned char>value

    def __delitem__(self, item):
        raise NotImplementedError("a buffer's size is fixed")


memory = buffer


# -- address constants -----------------------------------------------------------

cdef class _AddressConstant:
    """A named address (an int for comparisons, hashing and int(); no
    arithmetic) exporting an empty buffer that belongs to no object."""

    cdef readonly Py_ssize_t _address
    cdef str _name
    cdef Py_ssize_t _zero[1]         # the empty buffer's shape and stride

    def __int__(self):
        return self._address

    def __hash__(self):
        return hash(self._address)

    def __bool__(self):
        return self._address != 0

    def __eq__(self, other):
        if isinstance(other, type(self)):
            return True
        if isinstance(other, _AddressConstant) or not hasattr(other, "__index__"):
            return NotImplemented
        return self._address == other.__index__()

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __repr__(self):
        return self._name

    def __reduce__(self):
        return self._name           # this module's attribute of that name

    def __getbuffer__(self, Py_buffer *view, int flags):
        self._zero[0] = 0
        view.obj = None             # (Cython leaves it NULL: no owner)
        view.buf, view.len, view.readonly = NULL, 0, 0     # as mpi4py's
        view.itemsize, view.ndim = 1, 1
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = b"B"
        view.shape = view.strides = NULL
        if flags & PyBUF_ND:
            view.shape = self._zero
        if flags & PyBUF_STRIDES:
            view.strides = self._zero
        view.suboffsets = NULL
        view.internal = NULL


cdef class BottomType(_AddressConstant):
    """The type of BOTTOM: address 0 (displacements are absolute)."""

    def __cinit__(self):
        self._address, self._name = 0, "BOTTOM"

    def __index__(self):
        return self._address


cdef class InPlaceType(_AddressConstant):
    """The type of IN_PLACE: the receive buffer is also the send buffer."""

    def __cinit__(self):
        self._address, self._name = -1, "IN_PLACE"


cdef class BufferAutomaticType(_AddressConstant):
    """The type of BUFFER_AUTOMATIC: buffered sends without a size limit."""

    def __cinit__(self):
        self._address, self._name = -2, "BUFFER_AUTOMATIC"


BOTTOM = BottomType()
IN_PLACE = InPlaceType()
BUFFER_AUTOMATIC = BufferAutomaticType()
