# Ops as the Communicator reads them: C fields, no Python lookups.
# Python-level names of ops.pyx (SUM, MAX... OP_NULL, AVG) are imported.

cdef class Op:
    cdef readonly int code           # the core's op code: a kernel; OP_USER: folded
                                     # in Python; 0 (none): reduces no buffers
    cdef readonly bint commute       # commutative (Is_commutative)
    cdef readonly bint predefined    # one of gloocy.ops' ops, or a copy of one
    cdef readonly object name        # SUM, ... or the user function's name
    cdef object _combine             # (x, y) -> x <op> y on Python objects; None: cannot
    cdef object _fold                # (invec, inoutvec, datatype): inoutvec = invec <op> inoutvec
    cdef readonly size_t c_function  # address of a user op in C, 0: none
    cdef readonly size_t c_context   # its context pointer
    cdef object __weakref__
    cdef object _created             # (function, commute) of Op.Create: how it pickles
    cdef _copy(self, Op other)       # become a copy of other
    cdef object _key(self)           # what its integer handle names (None: null)
