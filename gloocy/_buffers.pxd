# Buffers (_buffers.pxi): a Python buffer held for one call, the core's
# own allocations, and the block layouts of the vector collectives. Python
# names: OP_NAMES, OP_CODES, DTYPE_NAMES, DTYPE_CODES; C table: DTYPE_SIZES
# (bytes per element of each DtypeCode).

cdef class Buf:
    """A buffer held for the length of one call (or of a request)."""
    cdef Py_buffer view
    cdef bint held
    cdef char *ptr          # first byte
    cdef int64_t nbytes     # size in bytes
    cdef int64_t itemsize   # bytes per element
    cdef int64_t count      # number of elements
    cdef int dtype          # DtypeCode, -1 when the format is not one of ours
    cdef str name           # argument name, for messages
    cdef int require_dtype(self) except -1


# Acquire obj's buffer (a Buf passes through); errors name the argument.
# typed: the caller knows the datatype, so the buffer's format is not asked
# for (dtype is -1; exporters such as NumPy skip building a format string).
cdef Buf get_buffer(object obj, str name, bint writable, bint typed=*)

# malloc that raises MemoryError (at least one byte: 0 is not an error).
cdef void *_alloc(int64_t nbytes) except? NULL nogil
cdef int _raise_nomem() except -1 with gil


# A malloc'd array of int64 (counts, offsets) that frees itself.
cdef class I64:
    cdef int64_t *v
    cdef Py_ssize_t n
    @staticmethod
    cdef I64 zeros(Py_ssize_t n)
    @staticmethod
    cdef I64 filled(Py_ssize_t n, int64_t value)
    cdef int64_t total(self)
    # Offsets of blocks of these sizes laid end to end.
    cdef I64 prefix(self)

# `size` non-negative ints from `counts`; errors name them as `name what`.
cdef list _counts(object counts, int size, str name, str what=*)
# (sizes, offsets) in bytes of `size` blocks inside buffer b (offsets
# default: end to end), checked to lie inside it. Counts and displacements
# are sequences of ints or an I64 (the message layer hands those over).
cdef tuple _layout(object counts, object displs, int size, Buf b, str name)
# ValueError unless a and b have one dtype (and, _same_layout, one size).
cdef int _same_dtype(Buf a, Buf b) except -1
cdef int _same_layout(Buf a, Buf b) except -1
