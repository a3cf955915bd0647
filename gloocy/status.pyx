# cython: language_level=3
"""mpi4py's Status: where a received (or probed) message came from and how
big it is."""

from libc.stdint cimport int64_t

from array import array

from gloocy.constants import ANY_SOURCE, ANY_TAG, UNDEFINED

__all__ = ["Status"]

cdef int _ANY_SOURCE = ANY_SOURCE
cdef int _ANY_TAG = ANY_TAG
cdef int _UNDEFINED = UNDEFINED
# The fields from source on, as C ints: source, tag, count (int64: two),
# error, cancelled (status.pxd declares them in this order).
cdef Py_ssize_t _NFIELDS = 6
cdef Py_ssize_t _SHAPE = 6
cdef Py_ssize_t _STRIDE = sizeof(int)


cdef class Status:
    """Where a received (or probed) message came from and how big it is
    (`count` in bytes), as mpi4py's Status. ``Status(other)`` is a copy."""

    def __cinit__(self, *args, **kwargs):
        self.source, self.tag = _ANY_SOURCE, _ANY_TAG

    def __init__(self, Status status=None):
        if status is not None:
            self.source, self.tag, self.count = status.source, status.tag, status.count
            self.error, self.cancelled = status.error, status.cancelled

    cdef void set(self, int source, int tag, int64_t count) noexcept:
        self.source, self.tag, self.count = source, tag, count

    def _set(self, int source, int tag, int64_t count):
        self.source, self.tag, self.count = source, tag, count

    def Get_source(self):
        return self.source

    def Set_source(self, int source):
        self.source = source

    def Get_tag(self):
        return self.tag

    def Set_tag(self, int tag):
        self.tag = tag

    def Get_error(self):
        return self.error

    def Set_error(self, int error):
        self.error = error

    def Is_cancelled(self):
        return self.cancelled

    def Set_cancelled(self, flag):
        self.cancelled = bool(flag)

    def Get_count(self, datatype=None):
        """Bytes received, or whole elements of `datatype` (UNDEFINED when
        the bytes are not a whole number of them)."""
        if datatype is None:
            return self.count
        cdef int64_t size = getattr(datatype, "itemsize", None) or datatype.Get_size()
        if size == 0:
            return 0 if self.count == 0 else _UNDEFINED
        return self.count // size if self.count % size == 0 else _UNDEFINED

    def Get_elements(self, datatype=None):
        return self.Get_count(datatype)

    def Set_elements(self, datatype, int64_t count):
        cdef int64_t size = getattr(datatype, "itemsize", None) or datatype.Get_size()
        self.count = count * size

    # -- its memory: source, tag, count (two ints), error, cancelled ---------

    def __getbuffer__(self, Py_buffer *view, int flags):
        view.buf = <void *>&self.source
        view.obj = self
        view.len = _NFIELDS * sizeof(int)
        view.readonly = 0
        view.itemsize = sizeof(int)
        view.format = "i"
        view.ndim = 1
        view.shape = &_SHAPE
        view.strides = &_STRIDE
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer *view):
        pass

    def tomemory(self):
        """A writable memoryview of this status's fields as C ints."""
        return memoryview(self)

    def py2f(self):
        """The fields as a list of ints (mpi4py's Fortran status)."""
        return list(memoryview(self))

    @classmethod
    def f2py(cls, arg):
        cdef Status status = cls()
        memoryview(status)[:] = memoryview(array("i", arg))
        return status

    def __eq__(self, other):
        """Equal fields, as mpi4py compares statuses."""
        if not isinstance(other, Status):
            return NotImplemented
        cdef Status o = <Status>other
        return (self.source == o.source and self.tag == o.tag
                and self.count == o.count and self.error == o.error
                and self.cancelled == o.cancelled)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None

    def __reduce__(self):
        return _rebuild, (type(self), self.source, self.tag, self.count,
                          self.error, self.cancelled, getattr(self, "__dict__", None))

    def __repr__(self):
        return f"<Status source={self.source} tag={self.tag} count={self.count}>"

    def tomemory(self):
        """A writable memoryview of ints over this Status's own fields
        (source, tag, count as two ints, error, cancelled), as mpi4py's
        view of the C status: writing to it changes the Status."""
        return memoryview(_StatusMemory(self))


cdef class _StatusMemory:
    """The buffer Status.tomemory views: the Status's C fields, which are
    declared one after another (status.pxd) and so lie in a row."""
    cdef Status _status
    cdef Py_ssize_t _shape[1]
    cdef Py_ssize_t _strides[1]

    def __cinit__(self, Status status):
        self._status = status

    def __getbuffer__(self, Py_buffer *view, int flags):
        cdef char *first = <char *>&self._status.source
        cdef Py_ssize_t nbytes = (<char *>&self._status.cancelled - first
                                  + sizeof(self._status.cancelled))
        self._shape[0] = nbytes // sizeof(int)
        self._strides[0] = sizeof(int)
        view.buf = first
        view.obj = self
        view.len = nbytes
        view.readonly = 0
        view.itemsize = sizeof(int)
        view.format = "i"
        view.ndim = 1
        view.shape = self._shape
        view.strides = self._strides
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer *view):
        pass


def _rebuild(cls, source, tag, count, error, cancelled, state=None):
    cdef Status s = cls.__new__(cls)
    s.source, s.tag, s.count, s.error, s.cancelled = source, tag, count, error, cancelled
    if state:
        s.__dict__.update(state)
    return s
