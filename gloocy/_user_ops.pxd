# User ops (_user_ops.pxi): OP_USER's kernel, a trampoline that takes the
# GIL only to call the user's function. Python names: set_user_op.

# A user op as the kernel calls it: fold(acc, src) computes acc = acc <op>
# src (acc holds the lower ranks' operand) on memoryviews of whole
# elements of `itemsize` bytes.
cdef class UserOp:
    cdef object fold
    cdef int64_t itemsize
    cdef bint commute

# OP_USER's kernel: calls this thread's current UserOp (set_user_op); a
# Python error it raises is kept (the rest of the call then skips the
# user's function) and raised when the op is unset.
cdef void user_kernel(void *acc, const void *src, int64_t n) noexcept nogil
# The kernel for (op, dtype): kernel_for's, or user_kernel for OP_USER.
cdef reduce_fn kernel_of(int op, int dtype) except NULL
# Whether the user op set (set_user_op) is commutative.
cdef bint user_op_commutes() noexcept nogil
# The algorithms user ops run (blocking): a commutative op any that
# predefined ops run, a non-commutative one operands combined in rank
# order (recursive doubling; Hillis-Steele for scans; the result the same
# bits on every rank). Scan: `x` (clobbered) holds our input, `out` gets
# the result.
cdef int allreduce_user(Context ctx, Coll *c, char *buf,
                        int64_t count) except -1 nogil
cdef int scan_user(Context ctx, Coll *c, char *x, int64_t count, char *out,
                   bint exclusive) except -1 nogil
# Swap this thread's current user op and its pending error (both borrowed
# pointers: a schedule runs its reductions under its own).
cdef void user_swap(void **op, void **error) noexcept nogil
