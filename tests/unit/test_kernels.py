"""Reduction kernels (gloocy._core.reduce_local) against NumPy's ufuncs.

acc <op>= src on raw bytes must equal ``ufunc(acc, src).astype(dtype)``
element for element: integers wrap as NumPy's do, float16 is computed in
float32 and rounded once (bit-identical to NumPy), MIN/MAX propagate NaN as
np.minimum/np.maximum do. bfloat16, long double, complex and the (value,
index) pairs of MAXLOC/MINLOC are checked with NaN, infinities, signed zeros,
length 0 and misaligned buffers (bfloat16 against ml_dtypes, MAXLOC/MINLOC
with NaN against MPICH, run by mpi4py in a process of its own). Nothing
else needs a process.
"""

import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import peers
from gloocy import _core
from gloocy.testing.oracle import ARITH, BITS, FLOATS, INTS, UFUNCS

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


# -- the newer dtypes: bfloat16, long double, complex, (value, index) pairs ----------
#
# Special values (NaN, inf, -0.0, subnormals), length 0 and misaligned
# buffers for the types the tables above leave out. The oracles are NumPy's
# ufuncs (ml_dtypes' for bfloat16) and, for MAXLOC/MINLOC, MPICH itself.

OFFSETS = [(0, 0), (1, 3), (3, 1), (7, 5)]         # (acc_off, src_off) in bytes
SHORT_LENGTHS = [0, 1, 2, 5, 17, 333]


def run_kernel(op, code, acc, src, *, acc_off=0, src_off=0):
    """reduce_bytes for any NumPy dtype: the kernel of DTYPE_CODES[code] on
    copies placed acc_off/src_off bytes into bytearrays; acc's dtype back."""
    acc_buf = bytearray(acc_off) + acc.tobytes()
    src_buf = bytearray(src_off) + src.tobytes()
    _core.reduce_local(memoryview(src_buf)[src_off:], memoryview(acc_buf)[acc_off:],
                       OP_CODES[op], DTYPE_CODES[code])
    assert acc_buf[:acc_off] == bytearray(acc_off), "wrote before the buffer"
    assert src_buf == bytearray(src_off) + src.tobytes(), "changed src"
    return np.frombuffer(bytes(acc_buf[acc_off:]), dtype=acc.dtype)


def assert_same_values(got, want, *, zeros_either=False, what=""):
    """Equal as numbers, NaN where the oracle has NaN (any payload), the
    sign of every zero and infinity kept (unless zeros_either: MIN/MAX of
    0.0 and -0.0 may give either). Compares values, so the padding bytes of
    long double are ignored."""
    assert got.shape == want.shape, what
    nan = np.isnan(got)
    np.testing.assert_array_equal(nan, np.isnan(want), err_msg=f"{what}: NaN positions")
    g, w = got[~nan], want[~nan]
    bad = g != w
    if not zeros_either:
        bad |= np.signbit(g) != np.signbit(w)
    i = np.flatnonzero(bad)
    assert i.size == 0, f"{what}: {i.size} differ, first at {i[0]}: {g[i[0]]!r} != {w[i[0]]!r}"


def special_array(rng, dtype, n):
    """Floats of `dtype` over its range, a fifth of them special values."""
    info = np.finfo(dtype)
    a = (rng.standard_normal(n) * rng.choice([1e-3, 1, 1e3], n)).astype(dtype)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.max, -info.max,
                        info.tiny, info.smallest_subnormal, 1.0, -1.0], dtype=dtype)
    mask = rng.random(n) < 0.2
    a[mask] = rng.choice(special, mask.sum())
    return a


# bfloat16: every bit pattern, against ml_dtypes' own ufuncs

def _bf16():
    return pytest.importorskip(
        "ml_dtypes", reason="ml_dtypes is not installed (pip install ml_dtypes): "
        "it is the bfloat16 oracle").bfloat16


@pytest.mark.parametrize("op", ARITH)
def test_bfloat16_every_bit_pattern(op):
    # acc holds all 65536 patterns (NaNs with every payload, both infinities,
    # subnormals, both zeros), src a shuffle of them; ml_dtypes computes the
    # oracle (in float32, rounded once to nearest even).
    bf16 = _bf16()
    rng = np.random.default_rng(OP_CODES[op])
    every = np.arange(1 << 16, dtype=np.uint16)
    for shuffle in range(3):
        acc = every.view(bf16)
        src = rng.permutation(every).view(bf16)
        with np.errstate(all="ignore"):
            want = UFUNCS[op](acc, src)
        got = run_kernel(op, "bfloat16", acc, src)
        nan = np.isnan(want.astype(np.float32))
        np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
        g, w = got.view(np.uint16)[~nan], want.view(np.uint16)[~nan]
        if op in ("MIN", "MAX"):            # 0.0 vs -0.0: either zero
            both_zero = ((g & 0x7FFF) == 0) & ((w & 0x7FFF) == 0)
            g, w = g[~both_zero], w[~both_zero]
        bad = np.flatnonzero(g != w)
        assert bad.size == 0, (f"{op}: {bad.size} differ, first got {g[bad[0]]:#06x} "
                               f"want {w[bad[0]]:#06x}")


def test_bfloat16_rounds_once_to_nearest_even():
    # bfloat16 keeps 8 significant bits. Exact results that are not bfloat16
    # values, and what they must round to (closed forms):
    bf16 = _bf16()
    big = float(np.finfo(bf16).max)                    # (2 - 2**-7) * 2**127
    cases = [("SUM", 256, 1, 256),                     # tie: even 256
             ("SUM", 256, 3, 260),                     # tie: even 260 (not 258)
             ("SUM", 256, 1.5, 258),                   # below the tie at 259
             ("SUM", 1, 2 ** -8, 1),                   # tie: even 1
             ("SUM", 1 + 2 ** -7, 2 ** -8, 1 + 2 ** -6),   # tie: up to even
             ("SUM", big, 2.0 ** 119, np.inf),         # tie with 2**128: inf
             ("SUM", big, 2.0 ** 118, big),            # below the tie
             ("PROD", 1 + 2 ** -7, 1 + 2 ** -7, 1 + 2 ** -6),   # 1 + 2**-6 + 2**-14
             ("PROD", 3, 3, 9),
             ("PROD", 2.0 ** -100, 2.0 ** -30, 2.0 ** -130),    # a subnormal
             ("PROD", 2.0 ** -100, 2.0 ** -35, 0.0),   # under half the least, 2**-133
             ("PROD", np.inf, 0.0, np.nan),
             ("SUM", np.inf, -np.inf, np.nan),
             ("SUM", -0.0, -0.0, -0.0)]
    for op in ("SUM", "PROD"):
        mine = [c for c in cases if c[0] == op]
        acc = np.array([a for _, a, _, _ in mine], np.float32).astype(bf16)
        src = np.array([b for _, _, b, _ in mine], np.float32).astype(bf16)
        assert np.array_equal(acc.astype(np.float64), [float(a) for _, a, _, _ in mine])
        want = np.array([w for _, _, _, w in mine], np.float64)
        got = run_kernel(op, "bfloat16", acc, src).astype(np.float64)
        assert_same_values(got, want, what=op)


@pytest.mark.parametrize("op", ARITH)
def test_bfloat16_misaligned_and_empty(op):
    bf16 = _bf16()
    rng = np.random.default_rng([16, OP_CODES[op]])
    for acc_off, src_off in OFFSETS:
        for n in SHORT_LENGTHS:
            acc = special_array(rng, np.float32, n).astype(bf16)
            src = special_array(rng, np.float32, n).astype(bf16)
            with np.errstate(all="ignore"):
                want = UFUNCS[op](acc, src).astype(np.float32)
            got = run_kernel(op, "bfloat16", acc, src, acc_off=acc_off, src_off=src_off)
            assert_same_values(got.astype(np.float32), want,
                               zeros_either=op in ("MIN", "MAX"), what=f"{op} n={n}")


# long double and complex: NumPy's ufuncs in the same type

@pytest.mark.parametrize("op", ARITH)
def test_long_double_special_values(op):
    rng = np.random.default_rng([15, OP_CODES[op]])
    for acc_off, src_off in OFFSETS + [(8, 0), (0, 9)]:
        for n in SHORT_LENGTHS:
            acc = special_array(rng, np.longdouble, n)
            src = special_array(rng, np.longdouble, n)
            with np.errstate(all="ignore"):
                want = UFUNCS[op](acc, src)
            got = run_kernel(op, "longdouble", acc, src, acc_off=acc_off,
                             src_off=src_off)
            assert_same_values(got, want, zeros_either=op in ("MIN", "MAX"),
                               what=f"{op} n={n} offsets {acc_off},{src_off}")


def test_long_double_keeps_its_precision():
    # 1 + 2**-60 needs 61 significant bits: exact in x86's 80-bit long double
    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("long double is not the 80-bit extended type here")
    one, tiny = np.longdouble(1), np.longdouble(2) ** -60
    acc, src = np.array([one, one + tiny]), np.array([tiny, tiny])
    assert run_kernel("SUM", "longdouble", acc, src).tolist() == [one + tiny,
                                                                  one + 2 * tiny]
    assert run_kernel("MAX", "longdouble", acc, src[::-1] + one).tolist() == [
        one + tiny, one + tiny]


def _agrees(got, want, scale, eps):
    """Per element: both NaN, or the same infinity, or finite and within
    4 ulps of the terms' magnitude `scale`."""
    with np.errstate(all="ignore"):
        close = np.abs(got - want) <= 4 * eps * scale
    return ((np.isnan(got) & np.isnan(want))
            | (np.isinf(want) & (got == want))
            | (np.isfinite(want) & np.isfinite(got) & close))


@pytest.mark.parametrize("dtype", ["complex64", "complex128", "clongdouble"])
@pytest.mark.parametrize("op", ["SUM", "PROD"])
def test_complex_special_values(op, dtype):
    # Components over the whole range with NaN, inf and signed zeros. SUM is
    # NumPy's add exactly. PROD is (ac - bd) + (ad + bc)i in the dtype's
    # precision, as MPICH and Python's complex compute it. NumPy's SIMD loops
    # fuse a multiply and an add, so where a product overflows NumPy may say
    # -inf where the unfused formula says NaN ((-203 - inf i)(-1.8e308 -
    # 0.0009i): NumPy -inf + inf i, MPICH and Python nan + inf i): each part
    # must match one of the two, exactly in its NaN and infinities.
    real = np.dtype(dtype).type(0).real.dtype
    eps = np.finfo(real).eps
    rng = np.random.default_rng([DTYPE_CODES[dtype], OP_CODES[op]])
    for acc_off, src_off in OFFSETS:
        for n in SHORT_LENGTHS:
            a, b, c, d = (special_array(rng, real, n) for _ in range(4))
            acc, src = np.zeros(n, dtype), np.zeros(n, dtype)
            acc.real, acc.imag, src.real, src.imag = a, b, c, d
            got = run_kernel(op, dtype, acc, src, acc_off=acc_off, src_off=src_off)
            what = f"{op} {dtype} n={n} offsets {acc_off},{src_off}"
            with np.errstate(all="ignore"):
                fused = np.add(acc, src) if op == "SUM" else np.multiply(acc, src)
            if op == "SUM":
                assert_same_values(got.real, fused.real, what=what)
                assert_same_values(got.imag, fused.imag, what=what)
                continue
            with np.errstate(all="ignore"):
                unfused = (a * c - b * d, a * d + b * c)     # each step rounded
                scale = (abs(a * c) + abs(b * d), abs(a * d) + abs(b * c))
            for part, g, f, u, s in zip(("real", "imag"), (got.real, got.imag),
                                        (fused.real, fused.imag), unfused, scale):
                ok = _agrees(g, u, s, eps) | _agrees(g, f, s, eps)
                i = np.flatnonzero(~ok)
                assert i.size == 0, (f"{what} {part}: {acc[i[0]]!r} * {src[i[0]]!r} "
                                     f"gave {g[i[0]]!r}, want {u[i[0]]!r}")


# (value, index) pairs: MAXLOC/MINLOC against MPI's rule and against MPICH

PAIR_CODES = {"float_int": "f4", "double_int": "f8", "long_int": "i8",
              "2int": "i4", "short_int": "i2"}


def pair_array(rng, code, n):
    """Pairs with many ties; float values include NaN, infinities and both
    zeros."""
    a = np.zeros(n, np.dtype([("v", PAIR_CODES[code]), ("i", "i4")], align=True))
    kind = a.dtype["v"].kind
    if kind == "f":
        a["v"] = rng.choice([-np.inf, -1.5, -0.0, 0.0, 2.0, 2.0, np.inf, np.nan], n)
    else:
        info = np.iinfo(a.dtype["v"])
        a["v"] = rng.choice([info.min, -1, 0, 0, 7, info.max], n)
    a["i"] = rng.choice([np.iinfo(np.int32).min, -1, 0, 3, 3, 9, np.iinfo(np.int32).max], n)
    return a


def loc_by_the_rule(op, acc, src):
    """MPI's definition, element by element: the larger (MAXLOC) or smaller
    (MINLOC) value with its index; equal values: the smaller index. Only
    for pairs whose values are not NaN."""
    out = []
    for (u, i), (v, j) in zip(acc.tolist(), src.tolist()):
        if u == v:
            out.append((u, min(i, j)))
        else:
            best = max(u, v) if op == "MAXLOC" else min(u, v)
            out.append((best, i if best == u else j))
    return out


MPICH_PAIRS = r"""
import pickle, sys
import numpy as np
from mpi4py import MPI
types = {"float_int": MPI.FLOAT_INT, "double_int": MPI.DOUBLE_INT,
         "long_int": MPI.LONG_INT, "2int": MPI.TWOINT, "short_int": MPI.SHORT_INT}
out = []
for op, code, acc, src in pickle.load(sys.stdin.buffer):
    acc = acc.copy()
    getattr(MPI, op).Reduce_local([src, types[code]], [acc, types[code]])
    out.append(acc)
sys.stdout.buffer.write(pickle.dumps(out))
"""


def mpich_reduce_local(cases):
    """MPICH's MAXLOC/MINLOC (inoutbuf = inbuf op inoutbuf, as gloocy's acc
    = src op acc) on each (op, code, acc, src), run by mpi4py in a process
    of its own."""
    if not peers.installed("mpi4py") or peers.mpiexec() is None:
        pytest.skip(f"needs {peers.MPI}: MPICH is the oracle for NaN in "
                    "MAXLOC/MINLOC")
    r = subprocess.run([sys.executable, "-c", MPICH_PAIRS], input=pickle.dumps(cases),
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return pickle.loads(r.stdout)


@pytest.mark.parametrize("code", list(PAIR_CODES))
def test_loc_pairs_follow_the_rule(code):
    # No NaN here: the larger/smaller value, ties to the smaller index, on
    # every length and misalignment (the pairs' padding is not compared).
    rng = np.random.default_rng([DTYPE_CODES[code], 1])
    for op in ("MAXLOC", "MINLOC"):
        for acc_off, src_off in OFFSETS:
            for n in SHORT_LENGTHS:
                acc, src = pair_array(rng, code, n), pair_array(rng, code, n)
                if acc.dtype["v"].kind == "f":
                    acc["v"][np.isnan(acc["v"])] = 5.0
                    src["v"][np.isnan(src["v"])] = -5.0
                got = run_kernel(op, code, acc, src, acc_off=acc_off, src_off=src_off)
                assert got.tolist() == loc_by_the_rule(op, acc, src), (op, code, n)


def test_loc_pairs_with_nan_match_mpich():
    # MPI leaves NaN undefined; gloocy compares as C (and MPICH) does: a NaN
    # value never replaces the accumulator's pair, and a NaN in the
    # accumulator is never replaced. Every case against MPICH itself.
    rng = np.random.default_rng(1711)
    cases = [(op, code, pair_array(rng, code, n), pair_array(rng, code, n))
             for op in ("MAXLOC", "MINLOC") for code in PAIR_CODES
             for n in (0, 1, 64, 257)]
    wants = mpich_reduce_local(cases)
    for (op, code, acc, src), want in zip(cases, wants):
        for acc_off, src_off in OFFSETS:
            got = run_kernel(op, code, acc, src, acc_off=acc_off, src_off=src_off)
            what = f"{op} {code} n={acc.size} offsets {acc_off},{src_off}"
            assert got["i"].tolist() == want["i"].tolist(), what
            assert_same_values(got["v"], want["v"], zeros_either=True, what=what)
