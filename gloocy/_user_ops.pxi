# User ops in the core: OP_USER's kernel is a trampoline to the user's
# function (a Python callable, or a C function through ctypes, both folded
# by gloocy.ops.Op.fold), so user ops run inside the reduction algorithms
# instead of being folded after a gather. The reductions run without the
# GIL; the trampoline takes it only for the call. Which op it calls is this
# thread's current one: the API sets it around a call (set_user_op), a
# schedule around each of its reduction steps. User ops run one algorithm:
# a left fold along the ranks (a chain), so that neither commutativity nor
# associativity is assumed of them, as when they were folded after a
# gather: O(n) steps, which a user's Python function dominates anyway.

cdef extern from "Python.h":
    object PyMemoryView_FromMemory(char *mem, Py_ssize_t size, int flags)
    int PyBUF_READ
    int PyBUF_WRITE

cdef extern from *:
    """
    static __thread void *gloocy_user_op = NULL;     /* a UserOp (a reference) */
    static __thread void *gloocy_user_error = NULL;  /* an exception (a reference) */
    """
    void *gloocy_user_op
    void *gloocy_user_error


cdef class UserOp:
    """fold(acc, src): acc = acc <op> src, on memoryviews of elements of
    `itemsize` bytes (the kernel's view of a user op)."""

    def __init__(self, fold, int64_t itemsize):
        if itemsize < 1:
            raise ValueError(f"itemsize: must be positive, got {itemsize}")
        self.fold = fold
        self.itemsize = itemsize


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
    global gloocy_user_op, gloocy_user_error
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


cdef int allreduce_chain(Context ctx, Coll *c, char *buf,
                         int64_t count) except -1 nogil:
    cdef int n = ctx.size, r = ctx.rank, i
    cdef int64_t nbytes = count * c.itemsize
    cdef Xfer x
    cdef Xfer *xs
    if n == 1:
        return 0
    if r > 0:
        post_recv(ctx, c, &x, r - 1, 0, ctx.scratch(nbytes), nbytes)
        wait_xfer(ctx, c, &x)
        _reduce_ordered(c, buf, ctx.scratch(nbytes), count, nbytes, True)
    if r < n - 1:
        post_send(ctx, c, &x, r + 1, 0, buf, nbytes)
        wait_xfer(ctx, c, &x)
        post_recv(ctx, c, &x, n - 1, 1, buf, nbytes)
        wait_xfer(ctx, c, &x)
        return 0
    xs = <Xfer *>_alloc((n - 1) * sizeof(Xfer))
    try:
        for i in range(n - 1):
            post_send(ctx, c, &xs[i], i, 1, buf, nbytes)
        waitall(ctx, c, xs, n - 1)
    finally:
        free(xs)
    return 0


cdef int scan_chain(Context ctx, Coll *c, char *x, int64_t count, char *out,
                    bint exclusive) except -1 nogil:
    cdef int n = ctx.size, r = ctx.rank
    cdef int64_t nbytes = count * c.itemsize
    cdef char *tmp = ctx.scratch(nbytes)
    cdef Xfer xf
    if r > 0:
        post_recv(ctx, c, &xf, r - 1, 0, tmp, nbytes)
        wait_xfer(ctx, c, &xf)
        if exclusive:
            memmove(out, tmp, nbytes)
        _reduce_ordered(c, x, tmp, count, nbytes, True)
    if r < n - 1:
        post_send(ctx, c, &xf, r + 1, 0, x, nbytes)
        wait_xfer(ctx, c, &xf)
    if not exclusive and out != x:
        memmove(out, x, nbytes)
    return 0
