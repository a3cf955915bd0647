# Reduction kernels: acc[i] = acc[i] <op> src[i], fused-type loops over raw
# pointers. The (op, dtype) pair is resolved once per collective into a
# function pointer from KERNELS; loops never branch on the op.

from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t,
                          uint8_t, uint16_t, uint32_t, uint64_t)

cdef extern from "_half.h":
    float gloocy_h2f(uint16_t h) noexcept nogil
    uint16_t gloocy_f2h(float f) noexcept nogil
    float gloocy_bf2f(uint16_t h) noexcept nogil
    uint16_t gloocy_f2bf(float f) noexcept nogil

# (value, index) pairs for MAXLOC/MINLOC, laid out as C (and MPI) lays them.
cdef extern from *:
    """
    typedef struct { float v; int i; } gloocy_float_int;
    typedef struct { double v; int i; } gloocy_double_int;
    typedef struct { long v; int i; } gloocy_long_int;
    typedef struct { int v; int i; } gloocy_2int;
    typedef struct { short v; int i; } gloocy_short_int;
    """
    ctypedef struct gloocy_float_int:
        float v
        int i
    ctypedef struct gloocy_double_int:
        double v
        int i
    ctypedef struct gloocy_long_int:
        long v
        int i
    ctypedef struct gloocy_2int:
        int v
        int i
    ctypedef struct gloocy_short_int:
        short v
        int i

ctypedef fused pair_t:
    gloocy_float_int
    gloocy_double_int
    gloocy_long_int
    gloocy_2int
    gloocy_short_int

ctypedef fused real_t:
    float
    double
    long double

ctypedef fused num_t:
    int8_t
    int16_t
    int32_t
    int64_t
    uint8_t
    uint16_t
    uint32_t
    uint64_t
    float
    double
    long double

ctypedef fused int_t:
    int8_t
    int16_t
    int32_t
    int64_t
    uint8_t
    uint16_t
    uint32_t
    uint64_t

cdef reduce_fn KERNELS[<int>OP_LAST][<int>DT_LAST]


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_sum(num_t *a, const num_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        a[i] = a[i] + b[i]

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_prod(num_t *a, const num_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        a[i] = a[i] * b[i]

# MIN/MAX propagate NaN as NumPy's minimum/maximum do (b != b only for NaN).
@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_min(num_t *a, const num_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        if b[i] < a[i] or b[i] != b[i]:
            a[i] = b[i]

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_max(num_t *a, const num_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        if b[i] > a[i] or b[i] != b[i]:
            a[i] = b[i]

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_band(int_t *a, const int_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        a[i] = a[i] & b[i]

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_bor(int_t *a, const int_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        a[i] = a[i] | b[i]

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_bxor(int_t *a, const int_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        a[i] = a[i] ^ b[i]

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_land(int_t *a, const int_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        a[i] = (a[i] != 0) & (b[i] != 0)

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_lor(int_t *a, const int_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        a[i] = (a[i] != 0) | (b[i] != 0)

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_lxor(int_t *a, const int_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        a[i] = (a[i] != 0) ^ (b[i] != 0)


# float16: widen to float32, apply the op, round once (NumPy's semantics).
@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_half_sum(uint16_t *a, const uint16_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        a[i] = gloocy_f2h(gloocy_h2f(a[i]) + gloocy_h2f(b[i]))

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_half_prod(uint16_t *a, const uint16_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        a[i] = gloocy_f2h(gloocy_h2f(a[i]) * gloocy_h2f(b[i]))

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_half_min(uint16_t *a, const uint16_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    cdef float x, y
    for i in range(n):
        x = gloocy_h2f(a[i])
        y = gloocy_h2f(b[i])
        if y < x or y != y:
            a[i] = b[i]

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_half_max(uint16_t *a, const uint16_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    cdef float x, y
    for i in range(n):
        x = gloocy_h2f(a[i])
        y = gloocy_h2f(b[i])
        if y > x or y != y:
            a[i] = b[i]


# complex: interleaved (re, im) pairs of float or double.
@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_csum(real_t *a, const real_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(2 * n):
        a[i] = a[i] + b[i]

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_cprod(real_t *a, const real_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    cdef real_t re, im
    for i in range(n):
        re = a[2 * i] * b[2 * i] - a[2 * i + 1] * b[2 * i + 1]
        im = a[2 * i] * b[2 * i + 1] + a[2 * i + 1] * b[2 * i]
        a[2 * i] = re
        a[2 * i + 1] = im


# bfloat16: widen to float32, apply the op, round once.
@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_bf16_sum(uint16_t *a, const uint16_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        a[i] = gloocy_f2bf(gloocy_bf2f(a[i]) + gloocy_bf2f(b[i]))

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_bf16_prod(uint16_t *a, const uint16_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        a[i] = gloocy_f2bf(gloocy_bf2f(a[i]) * gloocy_bf2f(b[i]))

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_bf16_min(uint16_t *a, const uint16_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    cdef float x, y
    for i in range(n):
        x = gloocy_bf2f(a[i])
        y = gloocy_bf2f(b[i])
        if y < x or y != y:
            a[i] = b[i]

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_bf16_max(uint16_t *a, const uint16_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    cdef float x, y
    for i in range(n):
        x = gloocy_bf2f(a[i])
        y = gloocy_bf2f(b[i])
        if y > x or y != y:
            a[i] = b[i]


# MAXLOC/MINLOC: the extreme value, and on a tie the lowest index (MPI's rule).
@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_maxloc(pair_t *a, const pair_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        if b[i].v > a[i].v or (b[i].v == a[i].v and b[i].i < a[i].i):
            a[i] = b[i]

@cython.boundscheck(False)
@cython.wraparound(False)
cdef void k_minloc(pair_t *a, const pair_t *b, int64_t n) noexcept nogil:
    cdef int64_t i
    for i in range(n):
        if b[i].v < a[i].v or (b[i].v == a[i].v and b[i].i < a[i].i):
            a[i] = b[i]


cdef void _fill_complex(int dt, real_t *witness) noexcept:
    KERNELS[<int>OP_SUM][dt] = <reduce_fn>k_csum[real_t]
    KERNELS[<int>OP_PROD][dt] = <reduce_fn>k_cprod[real_t]

cdef void _fill_pairs(int dt, pair_t *witness) noexcept:
    KERNELS[<int>OP_MAXLOC][dt] = <reduce_fn>k_maxloc[pair_t]
    KERNELS[<int>OP_MINLOC][dt] = <reduce_fn>k_minloc[pair_t]

cdef void _fill_arith(int dt, num_t *witness) noexcept:
    KERNELS[<int>OP_SUM][dt] = <reduce_fn>k_sum[num_t]
    KERNELS[<int>OP_PROD][dt] = <reduce_fn>k_prod[num_t]
    KERNELS[<int>OP_MIN][dt] = <reduce_fn>k_min[num_t]
    KERNELS[<int>OP_MAX][dt] = <reduce_fn>k_max[num_t]

cdef void _fill_bits(int dt, int_t *witness) noexcept:
    KERNELS[<int>OP_BAND][dt] = <reduce_fn>k_band[int_t]
    KERNELS[<int>OP_BOR][dt] = <reduce_fn>k_bor[int_t]
    KERNELS[<int>OP_BXOR][dt] = <reduce_fn>k_bxor[int_t]
    KERNELS[<int>OP_LAND][dt] = <reduce_fn>k_land[int_t]
    KERNELS[<int>OP_LOR][dt] = <reduce_fn>k_lor[int_t]
    KERNELS[<int>OP_LXOR][dt] = <reduce_fn>k_lxor[int_t]

cdef void _fill_kernels() noexcept:
    memset(KERNELS, 0, sizeof(KERNELS))
    _fill_arith(DT_INT8, <int8_t *>NULL)
    _fill_arith(DT_INT16, <int16_t *>NULL)
    _fill_arith(DT_INT32, <int32_t *>NULL)
    _fill_arith(DT_INT64, <int64_t *>NULL)
    _fill_arith(DT_UINT8, <uint8_t *>NULL)
    _fill_arith(DT_UINT16, <uint16_t *>NULL)
    _fill_arith(DT_UINT32, <uint32_t *>NULL)
    _fill_arith(DT_UINT64, <uint64_t *>NULL)
    _fill_arith(DT_FLOAT32, <float *>NULL)
    _fill_arith(DT_FLOAT64, <double *>NULL)
    _fill_arith(DT_LONGDOUBLE, <long double *>NULL)
    _fill_complex(DT_COMPLEX64, <float *>NULL)
    _fill_complex(DT_COMPLEX128, <double *>NULL)
    _fill_complex(DT_CLONGDOUBLE, <long double *>NULL)
    _fill_pairs(DT_FLOAT_INT, <gloocy_float_int *>NULL)
    _fill_pairs(DT_DOUBLE_INT, <gloocy_double_int *>NULL)
    _fill_pairs(DT_LONG_INT, <gloocy_long_int *>NULL)
    _fill_pairs(DT_2INT, <gloocy_2int *>NULL)
    _fill_pairs(DT_SHORT_INT, <gloocy_short_int *>NULL)
    KERNELS[<int>OP_SUM][<int>DT_BFLOAT16] = <reduce_fn>k_bf16_sum
    KERNELS[<int>OP_PROD][<int>DT_BFLOAT16] = <reduce_fn>k_bf16_prod
    KERNELS[<int>OP_MIN][<int>DT_BFLOAT16] = <reduce_fn>k_bf16_min
    KERNELS[<int>OP_MAX][<int>DT_BFLOAT16] = <reduce_fn>k_bf16_max
    _fill_bits(DT_INT8, <int8_t *>NULL)
    _fill_bits(DT_INT16, <int16_t *>NULL)
    _fill_bits(DT_INT32, <int32_t *>NULL)
    _fill_bits(DT_INT64, <int64_t *>NULL)
    _fill_bits(DT_UINT8, <uint8_t *>NULL)
    _fill_bits(DT_UINT16, <uint16_t *>NULL)
    _fill_bits(DT_UINT32, <uint32_t *>NULL)
    _fill_bits(DT_UINT64, <uint64_t *>NULL)
    KERNELS[<int>OP_SUM][<int>DT_FLOAT16] = <reduce_fn>k_half_sum
    KERNELS[<int>OP_PROD][<int>DT_FLOAT16] = <reduce_fn>k_half_prod
    KERNELS[<int>OP_MIN][<int>DT_FLOAT16] = <reduce_fn>k_half_min
    KERNELS[<int>OP_MAX][<int>DT_FLOAT16] = <reduce_fn>k_half_max
    # bool is one byte holding 0 or 1: every op is a logical one (NumPy's
    # add on bool is OR, multiply is AND, and so on).
    KERNELS[<int>OP_SUM][<int>DT_BOOL] = <reduce_fn>k_lor[uint8_t]
    KERNELS[<int>OP_PROD][<int>DT_BOOL] = <reduce_fn>k_land[uint8_t]
    KERNELS[<int>OP_MIN][<int>DT_BOOL] = <reduce_fn>k_land[uint8_t]
    KERNELS[<int>OP_MAX][<int>DT_BOOL] = <reduce_fn>k_lor[uint8_t]
    KERNELS[<int>OP_BAND][<int>DT_BOOL] = <reduce_fn>k_land[uint8_t]
    KERNELS[<int>OP_BOR][<int>DT_BOOL] = <reduce_fn>k_lor[uint8_t]
    KERNELS[<int>OP_BXOR][<int>DT_BOOL] = <reduce_fn>k_lxor[uint8_t]
    KERNELS[<int>OP_LAND][<int>DT_BOOL] = <reduce_fn>k_land[uint8_t]
    KERNELS[<int>OP_LOR][<int>DT_BOOL] = <reduce_fn>k_lor[uint8_t]
    KERNELS[<int>OP_LXOR][<int>DT_BOOL] = <reduce_fn>k_lxor[uint8_t]

_fill_kernels()


cdef reduce_fn kernel_for(int op, int dtype) except NULL:
    """The kernel for (op, dtype), or TypeError when the pair is meaningless."""
    cdef reduce_fn fn = NULL
    if 0 < op < <int>OP_LAST and 0 < dtype < <int>DT_LAST:
        fn = KERNELS[op][dtype]
    if fn is NULL:
        raise OpError(
            f"op {OP_NAMES.get(op, op)} is not defined for dtype "
            f"{DTYPE_NAMES.get(dtype, 'untyped')}")
    return fn


@cython.boundscheck(False)
@cython.wraparound(False)
def reduce_local(const unsigned char[::1] src not None,
                 unsigned char[::1] acc not None, int op, int dtype):
    """acc <op>= src elementwise on raw bytes of `dtype` (kernel tests)."""
    cdef reduce_fn fn = kernel_for(op, dtype)
    cdef int64_t size = DTYPE_SIZES[dtype]
    if src.shape[0] != acc.shape[0] or src.shape[0] % size:
        raise ValueError("src and acc must hold the same whole number of elements")
    with nogil:
        if acc.shape[0]:
            fn(&acc[0], &src[0], acc.shape[0] // size)


ctypedef void (*user_fn)(void *acc, const void *src, int64_t n, void *ctx) noexcept nogil


@cython.boundscheck(False)
@cython.wraparound(False)
def apply_c_op(size_t function, size_t ctx, const unsigned char[::1] src not None,
               unsigned char[::1] acc not None, int64_t count):
    """acc = acc <op> src for `count` elements with a C function
    void f(void *acc, const void *src, int64_t count, void *ctx) at address
    `function` (e.g. from ctypes or cffi), without the GIL."""
    cdef user_fn fn = <user_fn><void *>function
    if function == 0:
        raise ValueError("function: NULL function pointer")
    if src.shape[0] != acc.shape[0]:
        raise ValueError("src and acc must have the same size")
    with nogil:
        if acc.shape[0]:
            fn(&acc[0], &src[0], count, <void *>ctx)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef void _divide(char *p, int64_t n, int dtype, int64_t by) noexcept nogil:
    """p[i] /= by, each in its own precision (as NumPy divides)."""
    cdef int64_t i
    cdef float ff = <float>by
    cdef double fd = <double>by
    if dtype == DT_FLOAT32 or dtype == DT_COMPLEX64:
        for i in range(n * (2 if dtype == DT_COMPLEX64 else 1)):
            (<float *>p)[i] = (<float *>p)[i] / ff
    elif dtype == DT_FLOAT64 or dtype == DT_COMPLEX128:
        for i in range(n * (2 if dtype == DT_COMPLEX128 else 1)):
            (<double *>p)[i] = (<double *>p)[i] / fd
    elif dtype == DT_LONGDOUBLE or dtype == DT_CLONGDOUBLE:
        for i in range(n * (2 if dtype == DT_CLONGDOUBLE else 1)):
            (<long double *>p)[i] = (<long double *>p)[i] / <long double>by
    elif dtype == DT_FLOAT16:
        for i in range(n):
            (<uint16_t *>p)[i] = gloocy_f2h(gloocy_h2f((<uint16_t *>p)[i]) / ff)
    elif dtype == DT_BFLOAT16:
        for i in range(n):
            (<uint16_t *>p)[i] = gloocy_f2bf(gloocy_bf2f((<uint16_t *>p)[i]) / ff)


def check_floating(buf, str name="recvbuf"):
    """TypeError unless buf holds floating-point or complex numbers (AVG)."""
    cdef Buf b = get_buffer(buf, name, False)
    if b.dtype not in (DT_FLOAT16, DT_BFLOAT16, DT_FLOAT32, DT_FLOAT64,
                       DT_LONGDOUBLE, DT_COMPLEX64, DT_COMPLEX128,
                       DT_CLONGDOUBLE):
        raise TypeError(f"op AVG needs a floating-point or complex {name}, "
                        f"got {DTYPE_NAMES.get(b.dtype, b.format)}")


def divide(buf, int64_t by):
    """buf /= by elementwise, for floating-point and complex buffers (AVG)."""
    check_floating(buf)
    cdef Buf b = get_buffer(buf, "recvbuf", True)
    if by < 1:
        raise ValueError(f"by: must be positive, got {by}")
    with nogil:
        _divide(b.ptr, b.count, b.dtype, by)


def reduce_into(src, acc, int op):
    """acc = src <op> acc elementwise, in place (MPI_Reduce_local): both
    buffers of one dtype and size."""
    cdef Buf sb = get_buffer(src, "inbuf", False)
    cdef Buf ab = get_buffer(acc, "inoutbuf", True)
    ab.require_dtype()
    _same_layout(sb, ab)
    cdef reduce_fn fn = kernel_for(op, ab.dtype)
    with nogil:
        if ab.count:
            fn(ab.ptr, sb.ptr, ab.count)
