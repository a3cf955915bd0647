# User ops in the core: OP_USER's kernel is a trampoline to the user's
# function (a Python callable, or a C function through ctypes, both folded
# by gloocy.ops.Op.fold), so user ops run inside the reduction algorithms
# instead of being folded after a gather. The reductions run without the
# GIL; the trampoline takes it only for the call. Which op it calls is this
# thread's current one: the API sets it around a call (set_user_op), a
# schedule around each of its reduction steps. A commutative user op runs
# the algorithms predefined ops run; a non-commutative one those that
# combine operands in rank order (recursive doubling, Hillis-Steele, a
# binomial tree rooted at rank 0): log2(n) rounds either way. (MPI asks
# every op to be associative.)

cdef extern from "Python.h":
    object PyMemoryView_FromMemory(char *mem, Py_ssize_t size, int flags)
    int PyBUF_READ
    int PyBUF_WRITE

cdef extern from *:
    """
    static __thread void *gloocy_user_op = NULL;     /* a UserOp (a reference) */
    static __thread void *gloocy_user_error = NULL;  /* an exception (a reference) */
    static __thread int gloocy_user_commutes = 0;    /* the op set commutes */
    """
    void *gloocy_user_op
    void *gloocy_user_error
    int gloocy_user_commutes


cdef class UserOp:
    """fold(acc, src): acc = acc <op> src, on memoryviews of elements of
    `itemsize` bytes (the kernel's view of a user op); `commute`: the op is
    commutative (any algorithm may run it)."""

    def __init__(self, fold, int64_t itemsize, bint commute=False):
        if itemsize < 1:
            raise ValueError(f"itemsize: must be positive, got {itemsize}")
        self.fold = fold
        self.itemsize = itemsize
        self.commute = commute


cdef void user_kernel(void *acc, const void *src, int64_t n) noexcept nogil:
    if gloocy_user_error is NULL:       # after an error the rest is moot
        _call_user(<char *>acc, <char *>src, n)


cdef void _call_user(char *acc, char *src, int64_t n) noexcept with gil:
    global gloocy_user_error
    cdef UserOp op
    try:
        if gloocy_user_op is NULL:
            raise OpError("op: a user op's kernel ran with no user op set")
        op = <UserOp>gloocy_user_op
        op.fold(PyMemoryView_FromMemory(acc, n * op.itemsize, PyBUF_WRITE),
                PyMemoryView_FromMemory(src, n * op.itemsize, PyBUF_READ))
    except BaseException as e:
        Py_INCREF(e)
        gloocy_user_error = <void *>e


cdef reduce_fn kernel_of(int op, int dtype) except NULL:
    if op == OP_USER:
        return user_kernel
    return kernel_for(op, dtype)


cdef void user_swap(void **op, void **error) noexcept nogil:
    global gloocy_user_op, gloocy_user_error
    cdef void *p = gloocy_user_op
    cdef void *e = gloocy_user_error
    gloocy_user_op, gloocy_user_error = op[0], error[0]
    op[0], error[0] = p, e


def set_user_op(UserOp op=None):
    """Make `op` the user op this thread's OP_USER reductions call (None:
    none). Unsetting it raises what it raised meanwhile."""
    global gloocy_user_op, gloocy_user_error, gloocy_user_commutes
    gloocy_user_commutes = op is not None and op.commute
    if op is not None:
        Py_INCREF(op)
    if gloocy_user_op is not NULL:
        Py_DECREF(<object>gloocy_user_op)
    gloocy_user_op = <void *>op if op is not None else NULL
    if op is None and gloocy_user_error is not NULL:
        error = <object>gloocy_user_error
        Py_DECREF(error)
        gloocy_user_error = NULL
        raise error


cdef bint user_op_commutes() noexcept nogil:
    return gloocy_user_commutes != 0


cdef int allreduce_user(Context ctx, Coll *c, char *buf,
                        int64_t count) except -1 nogil:
    if ctx.size == 1:
        return 0
    if gloocy_user_commutes:        # any algorithm, as predefined ops
        return run_allreduce(ctx, c, buf, count, ALGO_AUTO)
    return allreduce_recursive_doubling(ctx, c, buf, count)  # rank order


cdef int scan_user(Context ctx, Coll *c, char *x, int64_t count, char *out,
                   bint exclusive) except -1 nogil:
    return run_scan(ctx, c, x, count, out, exclusive)       # rank order
