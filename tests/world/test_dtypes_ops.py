"""The newer dtypes and ops across real processes (world sizes 1-4), over
shared memory, TCP and a mix of both (TRANSPORTS).

complex64/128 (SUM, PROD), long double (SUM, MIN, MAX), bfloat16 (SUM, MAX),
MAXLOC/MINLOC on aligned (value, index) structured pairs, AVG, and user ops
(Python functions and C functions through ctypes), in Allreduce, Reduce,
Scan, Exscan and Reduce_scatter_block. Every rank builds its input from a
seed; the test process rebuilds them all and folds them in rank order with
NumPy. Exact where the data make it exact (integers, sums of long doubles
that fit 64 mantissa bits, small bfloat16 integers), within a stated
tolerance for complex arithmetic; Allreduce results must be bit-identical on
every rank whatever the algorithm.
"""

import ctypes
import pickle

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gloocy
from gloocy import IN_PLACE

from gloocy.testing.processes import ProcessWorld
from conftest import TRANSPORT_ENV

TRANSPORTS = ("shm", "tcp", "mix")      # every test runs over each
BACKEND = "threads"     # ranks as threads (the mixed world stays processes)
SIZES = [1, 2, 3, 4]
ALGORITHMS = [None, "ring", "recursive_doubling"]
OPS = {"SUM": gloocy.SUM, "PROD": gloocy.PROD, "MIN": gloocy.MIN,
       "MAX": gloocy.MAX, "MAXLOC": gloocy.MAXLOC, "MINLOC": gloocy.MINLOC,
       "AVG": gloocy.AVG, "BAND": gloocy.BAND, "BOR": gloocy.BOR,
       "BXOR": gloocy.BXOR, "LAND": gloocy.LAND}
BF16 = np.dtype(ml_dtypes.bfloat16)
LD = np.dtype(np.longdouble)
EXTENDED = np.finfo(np.longdouble).nmant >= 63     # x86 80-bit long double
PAIR_VALUES = ["f4", "f8", "i8", "i4", "i2"]       # value types of the pairs
# complex tolerance: n <= 4 operands, each step within a few ulps
TOL = {"complex64": dict(rtol=1e-5, atol=1e-5),
       "complex128": dict(rtol=1e-12, atol=1e-12)}


def pair_dtype(value):
    return np.dtype([("v", value), ("i", "i4")], align=True)


def dtype_of(name):
    if name == "bfloat16":
        return BF16
    if name == "longdouble":
        return LD
    if name.startswith("pair-"):
        return pair_dtype(name[5:])
    return np.dtype(name)


# -- deterministic inputs --------------------------------------------------------

def make_input(name, op, seed, rank, n):
    """Rank `rank`'s input of dtype `name` for `op`."""
    rng = np.random.default_rng([seed, rank, n, len(name), len(op)])
    dt = dtype_of(name)
    if name.startswith("complex"):
        if op == "PROD":       # near the unit circle: no overflow, no underflow
            z = np.exp(1j * rng.uniform(-np.pi, np.pi, n)) * (
                1 + 0.1 * rng.standard_normal(n))
        elif op == "AVG":      # Gaussian integers: the sum is exact
            z = rng.integers(-1000, 1000, n) + 1j * rng.integers(-1000, 1000, n)
        else:
            z = rng.standard_normal(n) + 1j * rng.standard_normal(n)
        return z.astype(dt)
    if name == "longdouble":
        # 1 + k * 2**-60 needs 61 mantissa bits: exact only in long double
        k = rng.integers(0, 16, n).astype(LD)
        base = np.ones(n, LD) if op == "SUM" else rng.integers(-3, 4, n).astype(LD)
        return base + k * LD.type(2) ** -60          # MIN/MAX: near-ties
    if name == "bfloat16":
        if op == "SUM":
            return rng.integers(-8, 9, n).astype(np.float32).astype(BF16)
        return (rng.integers(-64, 65, n) / 4).astype(np.float32).astype(BF16)
    if name.startswith("pair-"):
        a = np.zeros(n, dt)
        vals = rng.integers(0, 3, n)                 # many ties
        a["v"] = vals / 2 if dt["v"].kind == "f" else vals - 1
        a["i"] = rng.integers(0, 6, n)
        return a
    if op == "AVG" or dt.kind in "iu":
        return rng.integers(-1000, 1000, n).astype(dt)
    return rng.standard_normal(n).astype(dt)


def fold(name, op, arrays):
    """arrays[0] <op> arrays[1] <op> ... in rank order, in a wide type."""
    if name.startswith("pair-"):
        acc = arrays[0].copy()
        for b in arrays[1:]:
            better = (b["v"] > acc["v"]) if op == "MAXLOC" else (b["v"] < acc["v"])
            tie = (b["v"] == acc["v"]) & (b["i"] < acc["i"])
            take = better | tie
            acc[take] = b[take]
        return acc
    if name == "bfloat16":
        wide = [a.astype(np.float32) for a in arrays]
    elif name.startswith("complex"):
        wide = [a.astype(np.complex128) for a in arrays]
    else:
        wide = [a.copy() for a in arrays]
    ufunc = {"SUM": np.add, "PROD": np.multiply, "MIN": np.minimum,
             "MAX": np.maximum, "AVG": np.add}[op]
    acc = wide[0]
    for b in wide[1:]:
        acc = ufunc(acc, b)
    if op == "AVG":
        dt = dtype_of(name)
        if dt.kind == "c":
            # component-wise, as the kernel divides (and NumPy would, for a
            # real divisor, up to the sign of zero)
            acc = acc.astype(dt)
            parts = acc.view(dt.type(0).real.dtype) / dt.type(0).real.dtype.type(
                len(arrays))
            return parts.view(dt)
        return acc.astype(dt) / dt.type(len(arrays))
    return acc.astype(dtype_of(name))


def same(name, got, want):
    """Exact comparison that ignores padding bytes (long double, pairs)."""
    if name.startswith("pair-"):
        return got.tolist() == want.tolist()
    if name == "bfloat16":
        return got.view(np.uint16).tolist() == want.view(np.uint16).tolist()
    return bool(np.array_equal(got, want))


def close(name, got, want):
    if name.startswith("complex"):
        return bool(np.allclose(got, want, **TOL[name]))
    return same(name, got, want)


def digest(name, a):
    """A picklable, padding-free form of a result."""
    if name == "bfloat16":
        return a.view(np.uint16).copy()
    if name.startswith("pair-"):
        return a.tolist()
    return a.copy()


def undigest(name, d):
    if name == "bfloat16":
        return np.asarray(d, np.uint16).view(BF16)
    if name.startswith("pair-"):
        return np.array([tuple(x) for x in d], dtype_of(name))
    return d


# -- rank-side functions ------------------------------------------------------------

def r_reductions(comm, cases):
    """cases: (name, op, n, seed, algorithm). For each: Allreduce (out of
    place and in place), Reduce to root seed % size, Scan."""
    out = []
    for name, op, n, seed, algorithm in cases:
        mine = make_input(name, op, seed, comm.rank, n)
        kw = {} if algorithm is None else {"algorithm": algorithm}
        recv = np.zeros_like(mine)
        comm.Allreduce(mine, recv, op=OPS[op], **kw)
        inplace = mine.copy()
        comm.Allreduce(IN_PLACE, inplace, op=OPS[op], **kw)
        root = seed % comm.size
        red = np.zeros_like(mine) if comm.rank == root else None
        comm.Reduce(mine, red, op=OPS[op], root=root)
        scan = None
        if op not in ("AVG",):
            scan = np.zeros_like(mine)
            comm.Scan(mine, scan, op=OPS[op])
        out.append((digest(name, recv), digest(name, inplace),
                    None if red is None else digest(name, red),
                    None if scan is None else digest(name, scan),
                    same(name, mine, make_input(name, op, seed, comm.rank, n))))
    return out


def r_reductions_caught(comm, cases):
    """r_reductions, but an exception comes back as a value (the world
    stays reusable when it is raised before anything is sent)."""
    try:
        return r_reductions(comm, cases)
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def check_reductions(results, size, cases, exact_across_ranks=True):
    errors = [r for r in results if isinstance(r, str)]
    assert not errors, errors[0]
    for c, (name, op, n, seed, algorithm) in enumerate(cases):
        what = f"{op} {name} n={n} algorithm={algorithm}"
        ins = [make_input(name, op, seed, r, n) for r in range(size)]
        want = fold(name, op, ins)
        root = seed % size
        first = undigest(name, results[0][c][0])
        for r in range(size):
            recv, inplace, red, scan, intact = results[r][c]
            recv, inplace = undigest(name, recv), undigest(name, inplace)
            assert intact, f"{what}: rank {r}'s sendbuf changed"
            assert close(name, recv, want), f"{what}: rank {r} {recv!r} != {want!r}"
            if exact_across_ranks:
                assert same(name, recv, first), f"{what}: rank {r} differs from rank 0"
                assert same(name, inplace, first), f"{what}: rank {r} in place"
            if r == root:
                assert close(name, undigest(name, red), want), f"{what}: Reduce"
            else:
                assert red is None
            if scan is not None:
                assert close(name, undigest(name, scan), fold(name, op, ins[:r + 1])), \
                    f"{what}: Scan at rank {r}"


def r_avg(comm, cases):
    """cases: (dtype name, n, seed): Allreduce, Reduce (root 0) and
    Reduce_scatter_block with AVG."""
    out = []
    for name, n, seed in cases:
        mine = make_input(name, "AVG", seed, comm.rank, n)
        recv = np.zeros_like(mine)
        comm.Allreduce(mine, recv, op=gloocy.AVG)
        red = np.zeros_like(mine) if comm.rank == 0 else None
        comm.Reduce(mine, red, op=gloocy.AVG, root=0)
        block = n // comm.size
        rsb = np.zeros(block, mine.dtype)
        comm.Reduce_scatter_block(mine[:block * comm.size], rsb, op=gloocy.AVG)
        out.append((digest(name, recv), None if red is None else digest(name, red),
                    digest(name, rsb)))
    objs = (comm.allreduce(comm.rank + 1.0, op=gloocy.AVG),
            comm.allreduce(np.array([comm.rank, 2.0 * comm.rank]), op=gloocy.AVG).tolist(),
            comm.allreduce(1j * comm.rank, op=gloocy.AVG),
            attempt(lambda: comm.Scan(np.ones(3), np.zeros(3), op=gloocy.AVG)),
            attempt(lambda: comm.Exscan(np.ones(3), np.zeros(3), op=gloocy.AVG)))
    return out, objs


def attempt(f):
    """"ok", "TypeError" (any subclass, e.g. OpError) or the exception's name."""
    try:
        f()
        return "ok"
    except TypeError:
        return "TypeError"
    except Exception as e:
        return type(e).__name__


def r_bad_pairs(comm, cases):
    """Each (op, dtype) case must raise TypeError in every reduction, on
    every rank, before anything is sent: a correct Allreduce follows."""
    log = []
    for op, name in cases:
        x = make_input(name, "SUM", 1, comm.rank, 8)
        o = OPS[op]
        log.append((op, name, [
            attempt(lambda: comm.Allreduce(IN_PLACE, x.copy(), op=o)),
            attempt(lambda: comm.Allreduce(x, np.zeros_like(x), op=o)),
            attempt(lambda: comm.Reduce(x, np.zeros_like(x), op=o, root=0)),
            attempt(lambda: comm.Reduce_scatter(
                np.concatenate([x] * comm.size),
                np.zeros_like(x), [x.size] * comm.size, op=o)),
            attempt(lambda: comm.Scan(x, np.zeros_like(x), op=o)),
            attempt(lambda: comm.Exscan(x, np.zeros_like(x), op=o)),
        ]))
    y = np.full(3, comm.rank + 1.0)
    comm.Allreduce(IN_PLACE, y)
    comm.Barrier()
    return log, y.tolist()


def r_reduce_avg_int(comm):
    x = np.arange(4, dtype=np.int32)
    out = [attempt(lambda: comm.Reduce(x, np.zeros_like(x), op=gloocy.AVG,
                                       root=0, timeout=5))]
    y = np.full(3, comm.rank + 1.0)
    out.append(attempt(lambda: comm.Allreduce(IN_PLACE, y, timeout=5)))
    return out, y.tolist()


def concat(a, b, base):
    """a's digits then b's, in `base`, where each number's leading digit 1
    only marks where its digits start (1 stands for no digits): an
    associative but non-commutative op, as MPI asks of user ops."""
    p = np.ones_like(b)
    while np.any(p * base <= b):
        p = np.where(p * base <= b, p * base, p)
    return a * p + b - p


def digits_op(invec, inoutvec):
    """Non-commutative: inoutvec = invec (op) inoutvec, digits side by side."""
    inoutvec[:] = concat(invec, inoutvec, 10)


def digit(rank, k):
    return (np.arange(k, dtype=np.int64) + rank) % 10


def digits_input(rank, k):
    """Rank's one digit per element, marked (see concat)."""
    return 10 + digit(rank, k)


def digits_want(ranks, k):
    """The fold of ranks' inputs in order: their digits side by side."""
    acc = np.ones(k, np.int64)
    for r in ranks:
        acc = acc * 10 + digit(r, k)
    return acc


def r_user_python_op(comm, k, root, commute):
    op = gloocy.Op.create(digits_op, commute=commute)
    n, r = comm.size, comm.rank
    mine = digits_input(r, k)
    out = {}
    recv = np.zeros(k, np.int64)
    comm.Allreduce(mine, recv, op=op)
    out["allreduce"] = recv.tolist()
    x = mine.copy()
    comm.Allreduce(IN_PLACE, x, op=op)
    out["allreduce in place"] = x.tolist()
    red = np.zeros(k, np.int64) if r == root else None
    comm.Reduce(mine, red, op=op, root=root)
    out["reduce"] = None if red is None else red.tolist()
    scan = np.zeros(k, np.int64)
    comm.Scan(mine, scan, op=op)
    out["scan"] = scan.tolist()
    ex = np.full(k, -1, np.int64)
    comm.Exscan(mine, ex, op=op)
    out["exscan"] = ex.tolist()
    send = 10 + np.concatenate([digit(r, k) + j for j in range(n)]) % 10
    rsb = np.zeros(k, np.int64)
    comm.Reduce_scatter_block(send, rsb, op=op)
    out["reduce_scatter_block"] = rsb.tolist()
    out["sendbuf intact"] = mine.tolist() == digits_input(r, k).tolist()
    try:
        pickle.dumps(op)
        out["pickle"] = "pickled"
    except ValueError:          # as mpi4py: only Op.Create'd ops travel
        out["pickle"] = "ValueError"
    return out


# The ctypes callback must outlive every call that may use it.
C_OP = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                        ctypes.c_void_p)
_KEEP = {}


def _c_digits(acc, src, n, ctx):
    """acc[i] = concat(acc[i], src[i]) in base *ctx, on int64."""
    m = ctypes.c_int64.from_address(ctx).value
    a = np.ctypeslib.as_array((ctypes.c_int64 * n).from_address(acc))
    b = np.ctypeslib.as_array((ctypes.c_int64 * n).from_address(src))
    a[:] = concat(a, b, m)


def c_digits_op(base):
    if base not in _KEEP:
        fn = C_OP(_c_digits)
        ctx = ctypes.c_int64(base)
        _KEEP[base] = (fn, ctx, gloocy.Op.from_c(
            ctypes.cast(fn, ctypes.c_void_p).value, ctypes.addressof(ctx),
            commute=False))
    return _KEEP[base][2]


def r_user_c_op(comm, k, base):
    op = c_digits_op(base)
    mine = base + digit(comm.rank, k) % base
    recv = np.zeros(k, np.int64)
    comm.Allreduce(mine, recv, op=op)
    x = mine.copy()
    comm.Allreduce(IN_PLACE, x, op=op)
    red = np.zeros(k, np.int64) if comm.rank == 0 else None
    comm.Reduce(mine, red, op=op, root=0)
    return recv.tolist(), x.tolist(), None if red is None else red.tolist()


def r_loc_objects(comm, values, indices):
    pair = (values[comm.rank], indices[comm.rank])
    return (comm.allreduce(pair, op=gloocy.MAXLOC),
            comm.allreduce(pair, op=gloocy.MINLOC),
            comm.reduce(pair, op=gloocy.MAXLOC, root=comm.size - 1))


def r_object_reduce_avg(comm):
    return (comm.reduce(comm.rank + 1.0, op=gloocy.AVG, root=0),
            comm.allreduce(comm.rank + 1.0, op=gloocy.AVG))


# -- the tests ---------------------------------------------------------------------

def cases_for(names_ops, size, lengths=(1, 7, 1001), algorithms=ALGORITHMS):
    return [(name, op, n, 97 * size + 13 * n + i, algo)
            for i, (name, op) in enumerate(names_ops)
            for n in lengths for algo in algorithms]


@pytest.mark.parametrize("size", SIZES)
def test_complex_sum_prod(world, size):
    cases = cases_for([(c, op) for c in ("complex64", "complex128")
                       for op in ("SUM", "PROD")], size, lengths=(1, 7, 5000))
    check_reductions(world(size).run(r_reductions, cases), size, cases)


@pytest.mark.parametrize("size", SIZES)
def test_long_double_sum_min_max(world, size):
    cases = cases_for([("longdouble", op) for op in ("SUM", "MIN", "MAX")],
                      size, lengths=(1, 7, 5000))
    results = world(size).run(r_reductions, cases)
    check_reductions(results, size, cases)
    if EXTENDED and size > 1:
        # the 2**-60 parts survived: nothing went through float64
        c = cases.index(("longdouble", "SUM", 7, 97 * size + 13 * 7, None))
        got = results[0][c][0]
        assert not np.array_equal(got, got.astype(np.float64).astype(LD))


@pytest.mark.parametrize("size", SIZES)
def test_bfloat16_sum_max(world, size):
    cases = cases_for([("bfloat16", op) for op in ("SUM", "MAX", "MIN")], size,
                      lengths=(1, 7, 40_000))
    check_reductions(world(size).run(r_reductions, cases), size, cases)


PAIR_PARAMS = PAIR_VALUES


@pytest.mark.parametrize("value", PAIR_PARAMS)
@pytest.mark.parametrize("size", SIZES)
def test_maxloc_minloc_pairs(world, size, value):
    name = f"pair-{value}"
    cases = cases_for([(name, "MAXLOC"), (name, "MINLOC")], size,
                      lengths=(1, 7, 5000))
    check_reductions(world(size).run(r_reductions_caught, cases), size, cases)


@pytest.mark.parametrize("size", SIZES)
def test_maxloc_minloc_objects(world, size):
    # ties at the maximum; the lowest *index* wins (indices fall with rank)
    values = [3, 5, 5, 1][:size]
    indices = [10 - r for r in range(size)]
    for r, (mx, mn, red) in enumerate(world(size).run(r_loc_objects, values, indices)):
        best = max(values)
        want_max = (best, min(i for v, i in zip(values, indices) if v == best))
        low = min(values)
        want_min = (low, min(i for v, i in zip(values, indices) if v == low))
        assert mx == want_max and mn == want_min
        assert red == (want_max if r == size - 1 else None)


@pytest.mark.parametrize("size", [2, 3])
def test_pairs_and_complex_with_tiny_segments(world, size):
    # 8-byte pipeline segments and 16-byte elements: no element is split
    w = world(size, GLOOCY_SEGMENT_BYTES=8)
    cases = cases_for([("complex128", "SUM"), ("longdouble", "MAX"),
                       ("pair-f8", "MAXLOC"), ("pair-i4", "MINLOC"),
                       ("bfloat16", "SUM")], size, lengths=(1, 3, 17, 301),
                      algorithms=["ring", None])
    check_reductions(w.run(r_reductions, cases), size, cases)


AVG_TYPES = ["float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("size", SIZES)
def test_avg(world, size):
    cases = [(name, n, 31 * size + n) for name in AVG_TYPES for n in (size, 8 * size + 3, 4000)]
    results = world(size).run(r_avg, cases)
    for r, (out, objs) in enumerate(results):
        for (name, n, seed), (recv, red, rsb) in zip(cases, out):
            ins = [make_input(name, "AVG", seed, q, n) for q in range(size)]
            want = fold(name, "AVG", ins)
            assert same(name, recv, want), (name, n, r)
            assert same(name, red, want) if r == 0 else red is None
            block = n // size
            blocks = [a[:block * size] for a in ins]
            assert same(name, rsb, fold(name, "AVG", blocks)[r * block:(r + 1) * block])
        assert objs == ((size + 1) / 2, [(size - 1) / 2, size - 1.0],
                        1j * (size - 1) / 2, "TypeError", "TypeError")


@pytest.mark.parametrize("size", [2, 3])
def test_object_reduce_avg_divides(world, size):
    avg = (size + 1) / 2
    assert world(size).run(r_object_reduce_avg)[0] == (avg, avg)


def r_bfloat16_reduce_scatter_block(comm, k):
    x = (np.arange(comm.size * k) % 7 + comm.rank).astype(np.float32).astype(BF16)
    out = []
    for op in (gloocy.SUM, gloocy.AVG):
        recv = np.zeros(k, BF16)
        try:
            comm.Reduce_scatter_block(x, recv, op=op)
            out.append(recv.astype(np.float32).tolist())
        except Exception as e:
            out.append(f"{type(e).__name__}: {e}")
    return out


@pytest.mark.parametrize("size", [1, 3])
def test_bfloat16_reduce_scatter_block(world, size):
    k = 5
    total = sum((np.arange(size * k) % 7 + q).astype(np.float32) for q in range(size))
    for r, (sums, avgs) in enumerate(world(size).run(
            r_bfloat16_reduce_scatter_block, k)):
        mine = total[r * k:(r + 1) * k]
        assert sums == mine.tolist()
        assert avgs == (mine / np.float32(size)).astype(BF16).astype(np.float32).tolist()


BAD_PAIRS = [("AVG", "int32"), ("AVG", "int64"), ("AVG", "pair-f8"),
             ("BAND", "complex128"), ("BXOR", "complex64"),
             ("MAXLOC", "float64"), ("MINLOC", "int32"), ("SUM", "pair-f8"),
             ("MAX", "pair-i4"), ("MAX", "complex128"), ("BXOR", "longdouble"),
             ("LAND", "bfloat16"), ("BOR", "float32")]


@pytest.mark.parametrize("size", SIZES)
def test_meaningless_op_dtype_pairs_raise_type_error(world, size):
    for log, after in world(size).run(r_bad_pairs, BAD_PAIRS):
        for op, name, outcomes in log:
            assert set(outcomes) - {"skipped"} == {"TypeError"}, (op, name, outcomes)
        assert after == [size * (size + 1) / 2] * 3


def test_reduce_avg_int_raises_everywhere_before_sending(transport):
    with ProcessWorld(3, env=TRANSPORT_ENV[transport], timeout=20) as w:
        for out, y in w.run(r_reduce_avg_int):
            assert out == ["TypeError", "ok"] and y == [6.0] * 3


@pytest.mark.parametrize("commute", [False, True])
@pytest.mark.parametrize("size", SIZES)
def test_user_python_op_folds_in_rank_order(world, size, commute):
    k = 9
    for root in sorted({0, size - 1}):
        results = world(size).run(r_user_python_op, k, root, commute)
        everyone = digits_want(range(size), k).tolist()
        for r, out in enumerate(results):
            assert out["allreduce"] == everyone
            assert out["allreduce in place"] == everyone
            assert out["reduce"] == (everyone if r == root else None)
            assert out["scan"] == digits_want(range(r + 1), k).tolist()
            assert out["exscan"] == ([-1] * k if r == 0 else
                                     digits_want(range(r), k).tolist())
            want_rsb = np.ones(k, np.int64)
            for q in range(size):
                want_rsb = want_rsb * 10 + (digit(q, k) + r) % 10
            assert out["reduce_scatter_block"] == want_rsb.tolist()
            assert out["sendbuf intact"] and out["pickle"] == "ValueError"


@pytest.mark.parametrize("size", SIZES)
def test_user_c_op_through_ctypes(world, size):
    k = 6
    for base in (10, 7):
        want = np.ones(k, np.int64)
        for q in range(size):
            want = want * base + digit(q, k) % base
        for r, (recv, inplace, red) in enumerate(
                world(size).run(r_user_c_op, k, base)):
            assert recv == want.tolist() and inplace == want.tolist()
            assert red == (want.tolist() if r == 0 else None)


HYPO_KINDS = ([("complex64", op) for op in ("SUM", "PROD")]
              + [("complex128", op) for op in ("SUM", "PROD")]
              + [("longdouble", op) for op in ("SUM", "MIN", "MAX")]
              + [("bfloat16", op) for op in ("SUM", "MAX")]
              + [(f"pair-{v}", op) for v in PAIR_VALUES if v != "i2"
                 for op in ("MAXLOC", "MINLOC")])


# 6 examples per transport: 18 in all (12 over one transport before), at
# half the cost of 12 over each.
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_new_dtypes_hypothesis(world, data):
    size = data.draw(st.sampled_from(SIZES), "size")
    cases = data.draw(st.lists(st.tuples(
        st.sampled_from(HYPO_KINDS), st.integers(0, 3000),
        st.integers(0, 2**32), st.sampled_from(ALGORITHMS)),
        min_size=1, max_size=3), "cases")
    cases = [(name, op, n, seed, algo) for (name, op), n, seed, algo in cases]
    check_reductions(world(size).run(r_reductions, cases), size, cases)


# -- bfloat16 values that round, NaN and infinities, over every allreduce algorithm --

BF16_ALGORITHMS = [None, "ring", "recursive_doubling", "halving_doubling", "bcube"]


def bf16_input(op, seed, rank, n):
    """bfloat16 values that do not add (multiply) exactly: 8 significant
    bits over several binades; SUM also gets NaN and infinities."""
    rng = np.random.default_rng([seed, rank, n, 16])
    if op == "PROD":       # near 1: a product of 4 neither overflows nor underflows
        x = 1 + rng.standard_normal(n) / 8
    else:
        x = rng.standard_normal(n) * 2.0 ** rng.integers(-6, 7, n)
        x[rng.random(n) < 0.03] = np.nan
        x[rng.random(n) < 0.03] = rng.choice([np.inf, -np.inf])
    if op in ("MIN", "MAX"):
        x[rng.random(n) < 0.1] = np.nan
    return x.astype(np.float32).astype(BF16)


def bf16_every_order(op, parts):
    """Every value op over `parts` can take with each step rounded to
    bfloat16 (ml_dtypes' ufuncs): one array per unordered binary tree over
    the parts (3 for three ranks, 15 for four)."""
    ufunc = {"SUM": np.add, "PROD": np.multiply}[op]
    if len(parts) == 1:
        return [parts[0]]
    first, rest = parts[0], parts[1:]
    out = []
    for mask in range(1 << len(rest)):          # the side `first` is on
        left = [first] + [p for k, p in enumerate(rest) if mask >> k & 1]
        right = [p for k, p in enumerate(rest) if not mask >> k & 1]
        if not right:
            continue
        with np.errstate(all="ignore"):
            out += [ufunc(a, b) for a in bf16_every_order(op, left)
                    for b in bf16_every_order(op, right)]
    return out


def r_bf16_allreduce(comm, cases):
    out = []
    for op, algo, n, seed in cases:
        x = bf16_input(op, seed, comm.rank, n)
        comm.Allreduce(IN_PLACE, x, op=OPS[op], algorithm=algo)
        out.append(x.view(np.uint16).copy())
    return out


@pytest.mark.parametrize("size", [2, 3, 4])
def test_bfloat16_rounding_and_nan_every_algorithm(world, size):
    # SUM/PROD: each element must be what one order of reduction gives, every
    # step rounded to nearest even (for two ranks: the one rounded sum), on
    # every rank bit for bit. MIN/MAX: NaN wherever a rank has NaN, else the
    # exact extreme.
    cases = [(op, algo, n, 31 * size + n) for op in ("SUM", "PROD", "MIN", "MAX")
             for algo in BF16_ALGORITHMS for n in (1, 7, 1001)]
    results = world(size).run(r_bf16_allreduce, cases)
    for c, (op, algo, n, seed) in enumerate(cases):
        what = f"{op} bfloat16 algorithm={algo} n={n} size={size}"
        got = results[0][c]
        assert all(np.array_equal(res[c], got) for res in results), \
            f"{what}: ranks got different bits"
        parts = [bf16_input(op, seed, r, n) for r in range(size)]
        got_f = got.view(BF16).astype(np.float32)
        if op in ("MIN", "MAX"):
            wide = [p.astype(np.float32) for p in parts]
            nan = np.isnan(wide).any(axis=0)
            want = (np.fmin if op == "MIN" else np.fmax).reduce(wide)
            np.testing.assert_array_equal(np.isnan(got_f), nan, err_msg=what)
            assert np.array_equal(got_f[~nan], want[~nan]), what
            continue
        orders = bf16_every_order(op, parts)
        cand = np.array([o.view(np.uint16) for o in orders])
        cand_nan = np.isnan(np.array([o.astype(np.float32) for o in orders]))
        ok = ((cand == got) | (cand_nan & np.isnan(got_f))).any(axis=0)
        k = np.flatnonzero(~ok)
        assert k.size == 0, (f"{what}: element {k[0]} is {got_f[k[0]]!r}, no order "
                             f"of {[float(p[k[0]]) for p in parts]} gives it")
        # the data are worth it: the order matters, or (two ranks) the one
        # rounding does
        exact = sum(p.astype(np.float64) for p in parts)
        rounded = np.any(cand != cand[:1]) if size > 2 else np.any(
            orders[0].astype(np.float64) != exact)
        assert rounded or n == 1, f"{what}: the data never rounded"
