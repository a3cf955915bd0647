# Reduction kernels (_kernels.pxi): acc[i] = acc[i] <op> src[i] over raw
# pointers, one function per (op, dtype), resolved once per collective.
# Python names: reduce_local, apply_c_op, check_floating, divide,
# reduce_into.

# acc[i] = acc[i] <op> src[i] for i < n elements.
ctypedef void (*reduce_fn)(void *acc, const void *src, int64_t n) noexcept nogil

# The kernel for (op, dtype); OpError when the pair is meaningless.
cdef reduce_fn kernel_for(int op, int dtype) except NULL
