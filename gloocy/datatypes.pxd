# Datatypes as the message layer reads them: C fields, no Python lookups.
#
# A Datatype is a handle on a Typemap, the one place that describes a
# type's layout. Python-level names of datatypes.pyx (the predefined types,
# from_typecode, typecode, the _typedict* tables) are imported, not cimported.

from libc.stdint cimport int64_t


cdef class Typemap:
    cdef readonly Typemap elem       # the element type's (predefined) Typemap
    cdef object _offsets             # int64 array: byte offset of each element, in
                                     # typemap order; None: a run not spelled out yet
    cdef readonly int64_t run_first, run_step  # a run: element i at byte
                                     # run_first + i * run_step (O(1) memory)
    cdef public object np            # element NumPy dtype (element types; bfloat16: None until asked)
    cdef readonly int64_t itemsize   # bytes of one element as NumPy stores it
    cdef readonly int64_t elem_size  # MPI's size of one element (pair padding excluded)
    cdef readonly int64_t n          # elements in one item
    cdef readonly int64_t lb, ub     # MPI's bounds of one item, bytes (extent = ub - lb)
    cdef readonly int64_t true_lb, true_ub  # bytes the data really spans
    cdef readonly int64_t align      # alignment of the widest element (structs pad to it)
    cdef readonly int64_t data_lb, data_ub  # bytes the elements span as NumPy moves them
    cdef readonly bint contiguous    # any number of items are one dense run of elements
    cdef readonly int core           # the core's dtype code of the element, -1: none
    cdef readonly int dense          # core code when items are a dense run from byte 0
                                     # (a message is a view of the buffer), else -1
    cdef public bint committed       # usable in communication (predefined: always)
    cdef public str name             # MPI's name ("" for derived types)
    cdef readonly object code        # typecode (predefined types and their Dups), else None
    cdef readonly object attr        # predefined: its name in gloocy.datatypes, else None
    cdef public object attrs         # Attributes (keyvals) set on the type, or None
    cdef public object recipe        # how it was made (_type_recipes.pxi); None: named
    cdef _layout(self)               # sets data_lb/ub, contiguous, core, dense


cdef class Datatype:
    cdef readonly Typemap _h         # None: DATATYPE_NULL (or freed)
    cdef object __weakref__
