"""Reduction kernels (gloocy._core.reduce_local) against NumPy's ufuncs.

acc <op>= src on raw bytes must equal ``ufunc(acc, src).astype(dtype)``
element for element: integers wrap as NumPy's do, float16 is computed in
float32 and rounded once (bit-identical to NumPy), MIN/MAX propagate NaN as
np.minimum/np.maximum do. No processes are needed here.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from gloocy import _core
from oracle import ARITH, BITS, FLOATS, INTS, UFUNCS

OP_CODES = _core.OP_CODES
DTYPE_CODES = _core.DTYPE_CODES


DEFINED = ([(op, dt) for op in ARITH for dt in INTS + FLOATS + ["bool"]]
           + [(op, dt) for op in BITS for dt in INTS + ["bool"]])
UNDEFINED = ([(op, dt) for op in BITS for dt in FLOATS]
             + [(op, "bytes") for op in UFUNCS])


def pair_id(pair):
    return f"{pair[0]}-{pair[1]}"


def oracle(op, acc, src):
    """NumPy's answer, in acc's dtype."""
    with np.errstate(all="ignore"):
        return UFUNCS[op](acc, src).astype(acc.dtype)


def reduce_bytes(op, dtype, acc, src, *, acc_off=0, src_off=0):
    """Run the kernel on copies of `acc` and `src` placed `acc_off`/`src_off`
    bytes into bytearrays (misaligned when the offset is not a multiple of
    the item size); return the result as an array of `dtype`."""
    acc_buf = bytearray(acc_off) + acc.tobytes()
    src_buf = bytearray(src_off) + src.tobytes()
    _core.reduce_local(memoryview(src_buf)[src_off:],
                       memoryview(acc_buf)[acc_off:],
                       OP_CODES[op], DTYPE_CODES[dtype])
    assert acc_buf[:acc_off] == bytearray(acc_off), "wrote before the buffer"
    assert src_buf == bytearray(src_off) + src.tobytes(), "changed src"
    return np.frombuffer(bytes(acc_buf[acc_off:]), dtype=dtype)


def assert_same(got, want, dtype, op=None):
    """Bit-identical, except that NaN only has to be NaN where NumPy's is
    (the payload of a NaN is not part of NumPy's contract either), and that
    MIN/MAX of 0.0 and -0.0 may be either zero: NumPy's own answer depends on
    the dtype (float16 keeps the first operand, the SIMD float32/float64
    loops the second)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtype in FLOATS:
        nan_got, nan_want = np.isnan(got), np.isnan(want)
        np.testing.assert_array_equal(nan_got, nan_want, err_msg="NaN positions")
        keep = ~nan_got
        if op in ("MIN", "MAX"):
            keep &= ~((got == 0) & (want == 0))
        got, want = got[keep], want[keep]
    bits = f"u{got.dtype.itemsize}" if dtype != "bool" else "u1"
    bad = np.flatnonzero(got.view(bits) != want.view(bits))
    assert bad.size == 0, (
        f"{bad.size} elements differ, first at {bad[0]}: got {got[bad[0]]!r} "
        f"want {want[bad[0]]!r}")


def random_array(rng, dtype, n):
    """Values over the whole range of `dtype`; floats include zeros of both
    signs, infinities, NaN, subnormals and values whose sum or product
    overflows."""
    dt = np.dtype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        # Make zeros common enough for the logical ops to see both cases.
        a[rng.random(n) < 0.25] = 0
        return a
    info = np.finfo(dt)
    a = (rng.standard_normal(n) * rng.choice([1e-3, 1, 1e3], n)).astype(dt)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.max, -info.max,
                        info.tiny, info.smallest_subnormal, -info.smallest_subnormal,
                        1.0, -1.0], dtype=dt)
    mask = rng.random(n) < 0.2
    a[mask] = rng.choice(special, mask.sum())
    return a


# -- the tables ------------------------------------------------------------------

def test_op_and_dtype_tables():
    assert set(OP_CODES) == set(UFUNCS) | {"MAXLOC", "MINLOC", "user"}
    assert set(DTYPE_CODES) == set(
        INTS + FLOATS + ["bool", "bytes", "complex64", "complex128",
                         "clongdouble", "longdouble", "bfloat16", "float_int",
                         "double_int", "long_int", "2int", "short_int"])
    assert len(set(OP_CODES.values())) == len(OP_CODES)
    assert len(set(DTYPE_CODES.values())) == len(DTYPE_CODES)
    assert all(isinstance(v, int) for v in [*OP_CODES.values(), *DTYPE_CODES.values()])


@pytest.mark.parametrize("dtype", ["complex64", "complex128", "clongdouble"])
@pytest.mark.parametrize("op", ["SUM", "PROD"])
def test_complex_kernels(op, dtype):
    rng = np.random.default_rng(7)
    acc = (rng.normal(size=33) + 1j * rng.normal(size=33)).astype(dtype)
    src = (rng.normal(size=33) + 1j * rng.normal(size=33)).astype(dtype)
    got = reduce_bytes(op, dtype, acc, src)
    want = (acc + src) if op == "SUM" else (acc * src)
    # PROD: (a+bi)(c+di) in the dtype's precision; NumPy may fuse differently.
    np.testing.assert_allclose(got, want, rtol=8 * np.finfo(got.real.dtype).eps)


@pytest.mark.parametrize("pair", UNDEFINED, ids=pair_id)
def test_meaningless_pairs_raise_type_error(pair):
    op, dtype = pair
    acc = bytearray(16)
    with pytest.raises(TypeError, match=op):
        _core.reduce_local(bytes(16), acc, OP_CODES[op], DTYPE_CODES[dtype])
    assert acc == bytearray(16)


@pytest.mark.parametrize("op,dtype", [(0, DTYPE_CODES["int32"]),
                                      (max(OP_CODES.values()) + 1, DTYPE_CODES["int32"]),
                                      (-1, DTYPE_CODES["int32"]),
                                      (OP_CODES["SUM"], max(DTYPE_CODES.values()) + 1),
                                      (OP_CODES["SUM"], -1)])
def test_unknown_codes_raise_type_error(op, dtype):
    with pytest.raises(TypeError):
        _core.reduce_local(bytes(16), bytearray(16), op, dtype)


def test_sizes_must_match_whole_elements():
    sum_, i32 = OP_CODES["SUM"], DTYPE_CODES["int32"]
    with pytest.raises(ValueError):
        _core.reduce_local(bytes(8), bytearray(12), sum_, i32)
    with pytest.raises(ValueError):
        _core.reduce_local(bytes(6), bytearray(6), sum_, i32)
    with pytest.raises((TypeError, ValueError, BufferError)):
        _core.reduce_local(bytes(8), bytes(8), sum_, i32)      # read-only acc


# -- every defined pair against NumPy ----------------------------------------------

LENGTHS = list(range(0, 70)) + [127, 128, 129, 1000, 100_003]


@pytest.mark.parametrize("pair", DEFINED, ids=pair_id)
def test_kernel_matches_numpy(pair):
    op, dtype = pair
    rng = np.random.default_rng([DTYPE_CODES[dtype], OP_CODES[op]])
    for n in LENGTHS:
        acc, src = random_array(rng, dtype, n), random_array(rng, dtype, n)
        assert_same(reduce_bytes(op, dtype, acc, src), oracle(op, acc, src), dtype, op)


@pytest.mark.parametrize("pair", DEFINED, ids=pair_id)
def test_kernel_on_misaligned_buffers(pair):
    op, dtype = pair
    rng = np.random.default_rng([DTYPE_CODES[dtype], OP_CODES[op], 1])
    for acc_off in range(8):
        for src_off in (0, 1, 3, 7):
            for n in (1, 5, 17, 333):
                acc, src = random_array(rng, dtype, n), random_array(rng, dtype, n)
                got = reduce_bytes(op, dtype, acc, src, acc_off=acc_off,
                                   src_off=src_off)
                assert_same(got, oracle(op, acc, src), dtype, op)


@pytest.mark.parametrize("pair", DEFINED, ids=pair_id)
def test_kernel_in_place(pair):
    # src and acc are the same memory: acc = acc <op> acc.
    op, dtype = pair
    rng = np.random.default_rng([DTYPE_CODES[dtype], OP_CODES[op], 2])
    for off in (0, 3):
        a = random_array(rng, dtype, 1001)
        buf = bytearray(off) + a.tobytes()
        view = memoryview(buf)[off:]
        _core.reduce_local(view, view, OP_CODES[op], DTYPE_CODES[dtype])
        got = np.frombuffer(bytes(buf[off:]), dtype=dtype)
        assert_same(got, oracle(op, a, a), dtype, op)


# -- hypothesis: any values, any length ------------------------------------------

def _elements(dtype):
    if dtype == "bool":
        return st.booleans()
    if dtype in FLOATS:
        return st.floats(width=np.dtype(dtype).itemsize * 8)   # NaN, inf, -0.0 too
    return None                                               # the full range


@st.composite
def cases(draw):
    op, dtype = draw(st.sampled_from(DEFINED))
    n = draw(st.integers(0, 200))
    arrays = hnp.arrays(np.dtype(dtype), n, elements=_elements(dtype))
    return (op, dtype, draw(arrays), draw(arrays),
            draw(st.integers(0, 7)), draw(st.integers(0, 7)))


@settings(max_examples=400, deadline=None)
@given(cases())
def test_kernel_matches_numpy_hypothesis(case):
    op, dtype, acc, src, acc_off, src_off = case
    got = reduce_bytes(op, dtype, acc, src, acc_off=acc_off, src_off=src_off)
    assert_same(got, oracle(op, acc, src), dtype, op)


# -- semantics spelled out, so a failure reads as the rule it breaks ------------------

@pytest.mark.parametrize("dtype", INTS)
def test_integer_overflow_wraps(dtype):
    info = np.iinfo(dtype)
    acc = np.array([info.max, info.min, info.max, info.min], dtype=dtype)
    src = np.array([1, -1 if info.min < 0 else info.max, info.max, info.min],
                   dtype=dtype)
    bits = 8 * np.dtype(dtype).itemsize
    for op, fold in (("SUM", lambda a, b: a + b), ("PROD", lambda a, b: a * b)):
        got = reduce_bytes(op, dtype, acc, src)
        for g, a, b in zip(got.tolist(), acc.tolist(), src.tolist()):
            want = fold(a, b) % (1 << bits)          # closed form: modular
            if info.min < 0 and want > info.max:
                want -= 1 << bits
            assert g == want, (op, a, b)


def test_float16_rounds_once_like_numpy():
    # Exact sums that are not float16 values round to nearest, ties to even:
    # 2049 -> 2048, 2051 -> 2052, 65512 -> 65504 (the largest float16), and
    # 65520 (the tie with 65536) -> inf; 0.1 + 0.2 rounds once from float32.
    acc = np.array([2048, 2048, 65504, 65504, 0.1, 6e-8], dtype=np.float16)
    src = np.array([1, 3, 8, 16, 0.2, 6e-8], dtype=np.float16)
    got = reduce_bytes("SUM", "float16", acc, src)
    assert got[:3].tolist() == [2048, 2052, 65504] and got[3] == np.inf
    with np.errstate(over="ignore"):
        want = (acc.astype(np.float32) + src.astype(np.float32)).astype(np.float16)
        assert_same(got, np.add(acc, src), "float16")
    assert_same(got, want, "float16")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["MIN", "MAX"])
def test_min_max_propagate_nan(op, dtype):
    nan = np.nan
    acc = np.array([nan, 1.0, nan, -np.inf, 0.0], dtype=dtype)
    src = np.array([1.0, nan, nan, nan, -0.0], dtype=dtype)
    got = reduce_bytes(op, dtype, acc, src)
    assert np.isnan(got[:4]).all()
    assert_same(got, oracle(op, acc, src), dtype, op)


@pytest.mark.parametrize("op,truth", [("LAND", lambda a, b: bool(a) and bool(b)),
                                      ("LOR", lambda a, b: bool(a) or bool(b)),
                                      ("LXOR", lambda a, b: bool(a) != bool(b))],
                         ids=["LAND", "LOR", "LXOR"])
@pytest.mark.parametrize("dtype", INTS)
def test_logical_ops_give_zero_or_one(op, truth, dtype):
    vals = [0, 1, 2, np.iinfo(dtype).max, np.iinfo(dtype).min or 7]
    acc = np.array([a for a in vals for _ in vals], dtype=dtype)
    src = np.array([b for _ in vals for b in vals], dtype=dtype)
    got = reduce_bytes(op, dtype, acc, src)
    assert got.tolist() == [int(truth(int(a), int(b)))
                            for a, b in zip(acc.tolist(), src.tolist())]
