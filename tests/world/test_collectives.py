"""Collectives on real processes (world sizes 1-5) against independent oracles.

Every rank builds its input from a seed, so the test process can rebuild every
rank's input and compute the answer with NumPy (or in closed form). Results
come back to the test process, which also checks that every rank got the
same bytes.
"""

import array
import hashlib
import math
import re
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gloocy
from gloocy import IN_PLACE
from gloocy.testing.oracle import DTYPES, FLOATS, INTS, UFUNCS
from conftest import examples

# Every test runs over each transport (see conftest.TRANSPORT_ENV); "mix"
# puts ranks on two pretend hosts: shared memory within one, TCP across.
TRANSPORTS = ("shm", "tcp", "mix")

SIZES = [1, 2, 3, 4, 5]
TINY_SEGMENT = {"GLOOCY_SEGMENT_BYTES": 8}   # pipelining worlds: 8-byte segments

OPS = {name: getattr(gloocy, name) for name in
       ("SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR")}
ALGORITHMS = [None, "ring", "recursive_doubling"]


def ops_for(dtype):
    if dtype in FLOATS:
        return ["SUM", "PROD", "MIN", "MAX"]
    return list(OPS)


def digest(buf):
    """Bytes of a buffer, or their SHA-256 when large (cheaper to send)."""
    data = memoryview(buf).tobytes()
    return data if len(data) <= 1 << 16 else hashlib.sha256(data).digest()


# -- deterministic inputs ---------------------------------------------------------

def rank_data(seed, rank, dtype, op, n):
    """Rank `rank`'s allreduce input. Chosen so that the reduction is exact in
    any order: integers over their whole range (wrapping is modular, hence
    order-free), integer-valued floats small enough that sums and products
    are exact, and for MIN/MAX any floats plus NaN (never -0.0, whose MIN
    with 0.0 has no defined sign)."""
    rng = np.random.default_rng([seed, rank, n, DTYPES.index(dtype),
                                 list(OPS).index(op)])
    dt = np.dtype(dtype)
    if dtype == "bool":
        return rng.random(n) < 0.7
    if dt.kind in "iu":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        if op in ("LAND", "LOR", "LXOR", "PROD"):
            a[rng.random(n) < 0.3] = 0
        return a
    if op == "SUM":
        bound = {"float16": 100, "float32": 1 << 20, "float64": 1 << 40}[dtype]
        return rng.integers(-bound, bound, n, endpoint=True).astype(dt)
    if op == "PROD":
        return rng.choice([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0], n).astype(dt)
    a = (rng.standard_normal(n) * 100).astype(dt)
    a[a == 0] = 1                             # no zero of either sign
    a[rng.random(n) < 0.05] = np.nan
    a[rng.random(n) < 0.02] = np.inf
    return a


def oracle(seed, size, dtype, op, n):
    """A left-to-right NumPy fold over every rank's input."""
    acc = rank_data(seed, 0, dtype, op, n)
    with np.errstate(all="ignore"):
        for r in range(1, size):
            acc = UFUNCS[op](acc, rank_data(seed, r, dtype, op, n))
    return acc.astype(dtype)


def assert_bits_equal(got_bytes, want, what):
    got = np.frombuffer(got_bytes, dtype=want.dtype)
    assert got.shape == want.shape, what
    if got.dtype.kind == "f":      # NaN == NaN here; the data's NaN is canonical
        bad = np.flatnonzero(got.view(f"u{got.itemsize}") != want.view(f"u{got.itemsize}"))
    else:
        bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"{what}: {bad.size} of {want.size} elements differ; "
                           f"first at {bad[0]}: got {got[bad[0]]!r}, "
                           f"want {want[bad[0]]!r}")


# -- rank-side functions (run in the rank processes) ----------------------------------

def r_world(comm):
    return comm.rank, comm.size, comm.Get_rank(), comm.Get_size()


def r_barrier_times(comm, rounds, delay):
    """Per round: (entry, exit) times. In round k, rank k % size enters the
    barrier `delay` seconds after the others."""
    out = []
    for k in range(rounds):
        if comm.rank == k % comm.size:
            time.sleep(delay)
        t_in = time.monotonic_ns()             # one clock for every process
        comm.Barrier()
        out.append((t_in, time.monotonic_ns()))
    return out


def make_buffer(kind, n, seed, receiver):
    """A buffer of `kind` with `n` elements: root's data from `seed`, or (for
    a receiver) different bytes at every position."""
    if kind in ("bytes", "bytearray", "memoryview"):
        nbytes = n
    elif kind.startswith("array-"):
        nbytes = n * array.array(kind[-1]).itemsize
    elif kind == "2d-float64":
        nbytes = n * 3 * 8
    elif kind == "readonly-float32":
        nbytes = n * 4
    else:
        nbytes = n * np.dtype(kind).itemsize
    raw = np.random.default_rng([seed, n]).integers(0, 256, nbytes, dtype=np.uint8)
    if receiver:
        raw = ~raw                             # every byte differs from root's
    if kind == "bytes":
        return bytearray(raw.tobytes()) if receiver else raw.tobytes()
    if kind == "bytearray":
        return bytearray(raw.tobytes())
    if kind == "memoryview":
        return memoryview(bytearray(raw.tobytes()))
    if kind.startswith("array-"):
        a = array.array(kind[-1])
        a.frombytes(raw.tobytes())
        return a
    if kind == "2d-float64":
        return raw.view(np.float64).reshape(n, 3).copy()
    if kind == "readonly-float32":
        a = raw.view(np.float32).copy()
        a.flags.writeable = receiver
        return a
    return raw.view(kind).copy()


def r_bcast(comm, cases):
    """cases: list of (kind, n, root, seed); returns what each Bcast left."""
    out = []
    for kind, n, root, seed in cases:
        buf = make_buffer(kind, n, seed, receiver=comm.rank != root)
        comm.Bcast(buf, root=root)
        out.append(digest(buf))
    return out


def r_allreduce(comm, seed, dtype, ops, lengths, algorithms):
    """Every (op, n, algorithm, in place?) combination; returns {key: (result
    bytes, sendbuf unchanged?)}."""
    out = {}
    for op in ops:
        for n in lengths:
            for algo in algorithms:
                for in_place in (True, False):
                    x = rank_data(seed, comm.rank, dtype, op, n)
                    kw = {} if algo is None else {"algorithm": algo}
                    if in_place:
                        comm.Allreduce(IN_PLACE, x, op=OPS[op], **kw)
                        out[op, n, algo, True] = (digest(x), True)
                    else:
                        send = x.copy()
                        recv = np.empty_like(x)
                        recv.view(np.uint8)[:] = 0xA5
                        comm.Allreduce(send, recv, op=OPS[op], **kw)
                        out[op, n, algo, False] = (digest(recv),
                                                   send.tobytes() == x.tobytes())
    return out


def r_float_sum(comm, seed, dtype, n, algorithm):
    """SUM of arbitrary (inexact) floats."""
    x = float_noise(seed, comm.rank, dtype, n)
    comm.Allreduce(IN_PLACE, x, op=gloocy.SUM, algorithm=algorithm)
    return x.tobytes()


def float_noise(seed, rank, dtype, n):
    rng = np.random.default_rng([seed, rank, n])
    return (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(dtype)


def r_signed_zero_and_nan(comm, op, algorithm):
    """Equal-comparing inputs with different bits: 0.0 vs -0.0 and NaNs with
    different payloads, at different ranks."""
    zeros = np.array([0.0, -0.0] * 4)
    x = np.array([zeros[(comm.rank + k) % 2] for k in range(8)])
    payload = np.array([0x7FF8000000000000 + comm.rank + 1], np.uint64).view(np.float64)
    x = np.concatenate([x, payload])
    comm.Allreduce(IN_PLACE, x, op=OPS[op], algorithm=algorithm)
    return x.tobytes()


def r_segment(comm):
    return getattr(comm._ctx, "segment", None)


def r_objects(comm, big):
    n, r = comm.size, comm.rank
    out = {}
    for root in range(n):
        obj = {"root": root, "list": list(range(root * 3)), "blob": bytes(root * 1000),
               "none": None} if r == root else "ignored"
        out["bcast", root] = comm.bcast(obj, root=root)
    out["bcast", "big"] = hashlib.sha256(
        comm.bcast(bytes(range(256)) * (big // 256) if r == n - 1 else None,
                   root=n - 1)).hexdigest()
    out["bcast", "none"] = comm.bcast(None if r == 0 else 42, root=0)
    out["sum"] = comm.allreduce(r + 1)                       # default op SUM
    out["prod"] = comm.allreduce(r + 1, op=gloocy.PROD)
    out["max"] = comm.allreduce(r + 1, op=gloocy.MAX)
    out["min"] = comm.allreduce(r + 1, op=gloocy.MIN)
    out["concat"] = comm.allreduce([r] * r, op=gloocy.SUM)
    out["dict"] = comm.allreduce({r: r * r}, op=merge)
    out["order"] = comm.allreduce(r + 1, op=lambda a, b: a * 10 + b)
    out["land"] = comm.allreduce(r != 1, op=gloocy.LAND)
    out["lxor"] = comm.allreduce(True, op=gloocy.LXOR)
    out["allgather"] = comm.allgather(("rank", r, b"x" * (r * 5000)))
    out["allgather-empty"] = comm.allgather(b"")
    out["allgather-big"] = [hashlib.sha256(b).hexdigest() for b in
                            comm.allgather(bytes([r]) * (big if r == 0 else 1))]
    return out


def merge(a, b):
    return {**a, **b}


def r_timeouts(comm, default):
    """Accept/reject of timeouts; returns a list of (what, outcome)."""
    log = []

    def outcome(f):
        try:
            return ("ok", f())
        except Exception as e:
            return (type(e).__name__,)

    log.append(("default", comm.timeout == default))
    for t in (5, 2.5, 1e-3, 10**6):
        comm.timeout = t
        log.append((f"set {t}", comm.timeout == t and isinstance(comm.timeout, float)))
    comm.timeout = default
    for bad in (0, -1, -0.0, float("nan"), float("-inf")):
        log.append((f"set {bad}", outcome(lambda: setattr(comm, "timeout", bad)),
                    comm.timeout))
    log.append(("set str", outcome(lambda: setattr(comm, "timeout", "5"))))
    comm.timeout = default
    x = np.ones(4)
    calls = {
        "Barrier": lambda t: comm.Barrier(timeout=t),
        "Bcast": lambda t: comm.Bcast(x, root=0, timeout=t),
        "Allreduce": lambda t: comm.Allreduce(IN_PLACE, x, op=gloocy.MAX, timeout=t),
        "bcast": lambda t: comm.bcast("obj", root=0, timeout=t),
        "allgather": lambda t: comm.allgather("obj", timeout=t),
        "allreduce": lambda t: comm.allreduce(1, timeout=t),
    }
    for name, call in calls.items():
        for bad in (0, -1, float("nan")):
            log.append((f"{name} timeout={bad}", outcome(lambda: call(bad))))
        log.append((f"{name} timeout=5", outcome(lambda: call(5) and None)))
    # The world is still consistent after all the rejected calls.
    y = np.full(3, comm.rank + 1.0)
    comm.Allreduce(IN_PLACE, y, op=gloocy.SUM)
    log.append(("after", y.tolist(), comm.timeout == default))
    return log


def r_long_timeouts_wait(comm, t):
    """A rank arriving late must not trip a huge (or infinite) deadline."""
    if comm.rank == comm.size - 1:
        time.sleep(0.2)
    t0 = time.monotonic()
    comm.Barrier(timeout=t)
    x = np.full(5, 1.0)
    comm.Allreduce(IN_PLACE, x, timeout=t)
    return x.tolist(), time.monotonic() - t0


# -- the tests ---------------------------------------------------------------------

@pytest.mark.parametrize("size", SIZES)
def test_world_identity(world, size):
    assert world(size).run(r_world) == [(r, size, r, size) for r in range(size)]


@pytest.mark.parametrize("size", SIZES)
def test_barrier_nobody_leaves_before_everyone_entered(world, size):
    rounds, delay = max(size, 2), 0.1
    times = world(size).run(r_barrier_times, rounds, delay)
    lateness = []
    for k in range(rounds):
        entries = [times[r][k][0] for r in range(size)]
        exits = [times[r][k][1] for r in range(size)]
        assert min(exits) >= max(entries), f"round {k}: someone left early"
        lateness.append(entries[k % size] - min(entries))
    # The check has teeth: the late rank really was late, in some round at
    # least (under heavy load the others may be as late as it in one round).
    if size > 1:
        assert max(lateness) >= delay * 1e9 * 0.25, lateness


BCAST_KINDS = ["uint8", "int32", "float64", "float16", "bool", "complex128",
               "2d-float64", "bytes", "bytearray", "memoryview", "array-d",
               "array-i", "readonly-float32"]


@pytest.mark.parametrize("size", SIZES)
def test_bcast_every_root_every_buffer_kind(world, size):
    cases = [(kind, n, root, 1000 * root + n)
             for root in range(size)
             for kind in BCAST_KINDS
             for n in (0, 1, 7, 1001)]
    results = world(size).run(r_bcast, cases)
    for i, (kind, n, root, seed) in enumerate(cases):
        want = digest(make_buffer(kind, n, seed, receiver=False))
        for r in range(size):
            assert results[r][i] == want, f"rank {r}: {kind} n={n} root={root}"


@pytest.mark.parametrize("size", [2, 3, 5])
def test_bcast_large(world, size):
    cases = [("uint8", 3 * 2**20 + 1, 0, 1), ("float64", 2**19 + 3, size - 1, 2),
             ("bytes", 2**21 + 5, size // 2, 3)]
    results = world(size).run(r_bcast, cases)
    for i, (kind, n, root, seed) in enumerate(cases):
        want = digest(make_buffer(kind, n, seed, receiver=False))
        assert [res[i] for res in results] == [want] * size, (kind, n, root)


@settings(max_examples=examples(20), deadline=None)   # --long: 20
@given(data=st.data())
def test_bcast_hypothesis(world, data):
    size = data.draw(st.sampled_from(SIZES), "size")
    cases = data.draw(st.lists(st.tuples(
        st.sampled_from(BCAST_KINDS), st.integers(0, 5000),
        st.integers(0, size - 1), st.integers(0, 2**32)), min_size=1, max_size=4),
        "cases")
    results = world(size).run(r_bcast, cases)
    for i, (kind, n, root, seed) in enumerate(cases):
        want = digest(make_buffer(kind, n, seed, receiver=False))
        assert [res[i] for res in results] == [want] * size, (kind, n, root)


def check_allreduce(results, seed, size, dtype, lengths, ops, algorithms):
    for op in ops:
        for n in lengths:
            want = oracle(seed, size, dtype, op, n)
            for algo in algorithms:
                for in_place in (True, False):
                    key = (op, n, algo, in_place)
                    what = f"{op} {dtype} n={n} algorithm={algo} in_place={in_place}"
                    first = results[0][key][0]
                    for r in range(size):
                        got, send_intact = results[r][key]
                        assert send_intact, f"{what}: rank {r}'s sendbuf changed"
                        assert got == first, f"{what}: rank {r} differs from rank 0"
                    if len(first) == 32 and want.nbytes > 1 << 16:
                        assert first == digest(want), what
                    else:
                        assert_bits_equal(first, want, what)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", SIZES)
def test_allreduce_every_op_dtype_algorithm(world, size, dtype):
    seed = 7 * size + DTYPES.index(dtype)
    lengths = [0, 1, 2, 7, size + 1, 1001]
    ops = ops_for(dtype)
    results = world(size).run(r_allreduce, seed, dtype, ops, lengths, ALGORITHMS)
    check_allreduce(results, seed, size, dtype, lengths, ops, ALGORITHMS)


@pytest.mark.parametrize("size", [2, 3, 5])
def test_allreduce_large_every_algorithm(world, size):
    # > 64 KiB, where the default (auto) picks the ring.
    n = 50_001
    for dtype, ops in (("float32", ["SUM", "MAX"]), ("int64", ["BXOR"]),
                       ("float16", ["MIN"])):
        results = world(size).run(r_allreduce, size, dtype, ops, [n], ALGORITHMS)
        check_allreduce(results, size, size, dtype, [n], ops, ALGORITHMS)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("size", [2, 3, 4, 5])
def test_allreduce_float_sum_error_bound(world, size, dtype):
    # Arbitrary floats: any summation order is within (size - 1) * eps * sum|x|
    # of the exact sum (for float16 the kernel rounds to float16 after every
    # addition, as NumPy does); every rank must still get the same bits.
    n, seed = 2001, size
    parts = [float_noise(seed, r, dtype, n) for r in range(size)]
    exact = np.sum([p.astype(np.float64) for p in parts], axis=0)
    bound = (size - 1) * np.finfo(dtype).eps * np.sum(
        [np.abs(p.astype(np.float64)) for p in parts], axis=0)
    for algorithm in ALGORITHMS:
        got = world(size).run(r_float_sum, seed, dtype, n, algorithm)
        assert all(g == got[0] for g in got), f"{algorithm}: ranks disagree"
        err = np.abs(np.frombuffer(got[0], dtype).astype(np.float64) - exact)
        finite = np.isfinite(exact) & (np.abs(exact) < np.finfo(dtype).max / 2)
        assert (err[finite] <= bound[finite] * (1 + 1e-12)).all(), algorithm


OP_DTYPE_PAIRS = [(op, dt) for dt in DTYPES for op in ops_for(dt)]


@settings(max_examples=examples(25), deadline=None)   # --long: 25
@given(data=st.data())
def test_allreduce_hypothesis(world, data):
    size = data.draw(st.sampled_from(SIZES), "size")
    op, dtype = data.draw(st.sampled_from(OP_DTYPE_PAIRS), "op, dtype")
    n = data.draw(st.integers(0, 3000), "n")
    algorithm = data.draw(st.sampled_from(ALGORITHMS), "algorithm")
    seed = data.draw(st.integers(0, 2**32), "seed")
    results = world(size).run(r_allreduce, seed, dtype, [op], [n], [algorithm])
    check_allreduce(results, seed, size, dtype, [n], [op], [algorithm])


@pytest.mark.parametrize("op", ["MIN", "MAX"])
@pytest.mark.parametrize("size", [2, 3, 4, 5])
def test_allreduce_min_max_bitwise_same_on_every_rank(world, size, op):
    got = world(size).run(r_signed_zero_and_nan, op, "recursive_doubling")
    assert all(g == got[0] for g in got), [np.frombuffer(g).tolist() for g in got]


@pytest.mark.parametrize("op", ["MIN", "MAX"])
@pytest.mark.parametrize("size", [2, 3, 5])
def test_allreduce_min_max_ring_bitwise_same_on_every_rank(world, size, op):
    got = world(size).run(r_signed_zero_and_nan, op, "ring")
    assert all(g == got[0] for g in got), [np.frombuffer(g).tolist() for g in got]


# -- pipelining with 8-byte segments ------------------------------------------------

@pytest.mark.parametrize("size", [2, 3, 5])
def test_tiny_segments_bcast(world, size):
    w = world(size, **TINY_SEGMENT)
    assert w.run(r_segment) == [8] * size, "the segment knob did not take effect"
    cases = [(kind, n, root, 31 * n + root)
             for root in range(size)
             for kind in ("uint8", "float64", "float16", "bytes")
             for n in (0, 1, 3, 7, 9, 17, 1001)]
    results = w.run(r_bcast, cases)
    for i, (kind, n, root, seed) in enumerate(cases):
        want = digest(make_buffer(kind, n, seed, receiver=False))
        assert [res[i] for res in results] == [want] * size, (kind, n, root)


@pytest.mark.parametrize("size", [2, 3, 5])
def test_tiny_segments_ring_allreduce(world, size):
    w = world(size, **TINY_SEGMENT)
    lengths = [1, 2, 3, 5, 7, 13, 101, 1001]
    for dtype, ops in (("int8", ["SUM", "BXOR"]), ("int32", ["MAX"]),
                       ("float64", ["SUM", "MIN"]), ("float16", ["PROD"]),
                       ("bool", ["LXOR"])):
        seed = 11 * size + DTYPES.index(dtype)
        results = w.run(r_allreduce, seed, dtype, ops, lengths, ["ring", None])
        check_allreduce(results, seed, size, dtype, lengths, ops, ["ring", None])


@settings(max_examples=examples(15), deadline=None)   # --long: 15
@given(data=st.data())
def test_tiny_segments_hypothesis(world, data):
    size = data.draw(st.sampled_from([2, 3, 5]), "size")
    op, dtype = data.draw(st.sampled_from(OP_DTYPE_PAIRS), "op, dtype")
    n = data.draw(st.integers(0, 600), "n")
    root = data.draw(st.integers(0, size - 1), "root")
    seed = data.draw(st.integers(0, 2**32), "seed")
    w = world(size, **TINY_SEGMENT)
    results = w.run(r_allreduce, seed, dtype, [op], [n], ["ring"])
    check_allreduce(results, seed, size, dtype, [n], [op], ["ring"])
    want = digest(make_buffer(dtype, n, seed, receiver=False))
    assert w.run(r_bcast, [(dtype, n, root, seed)]) == [[want]] * size


# -- object methods -------------------------------------------------------------------

@pytest.mark.parametrize("size", SIZES)
def test_object_methods(world, size):
    big = 3 * 2**20
    results = world(size).run(r_objects, big)
    n = size
    for r, out in enumerate(results):
        for root in range(n):
            assert out["bcast", root] == {"root": root, "list": list(range(root * 3)),
                                          "blob": bytes(root * 1000), "none": None}
        assert out["bcast", "big"] == hashlib.sha256(
            bytes(range(256)) * (big // 256)).hexdigest()
        assert out["bcast", "none"] is None
        assert out["sum"] == n * (n + 1) // 2
        assert out["prod"] == math.factorial(n)
        assert out["max"] == n and out["min"] == 1
        assert out["concat"] == [k for k in range(n) for _ in range(k)]
        assert out["dict"] == {k: k * k for k in range(n)}
        assert out["order"] == int("".join(str(k + 1) for k in range(n)))
        assert out["land"] == (n == 1)
        assert out["lxor"] == (n % 2 == 1)
        assert out["allgather"] == [("rank", k, b"x" * (k * 5000)) for k in range(n)]
        assert out["allgather-empty"] == [b""] * n
        assert out["allgather-big"] == [
            hashlib.sha256(bytes([k]) * (big if k == 0 else 1)).hexdigest()
            for k in range(n)]


# -- timeouts ------------------------------------------------------------------------

@pytest.mark.parametrize("size", [1, 3])
def test_timeout_values_accepted_and_rejected(world, size):
    w = world(size)
    default = w.comm_timeout
    for r, log in enumerate(w.run(r_timeouts, default)):
        entries = {e[0]: e[1:] for e in log}
        assert entries["default"] == (True,)
        for t in (5, 2.5, 1e-3, 10**6):
            assert entries[f"set {t}"] == (True,), t
        for bad in (0, -1, -0.0, float("nan"), float("-inf")):
            assert entries[f"set {bad}"] == (("ValueError",), default), (r, bad)
        assert entries["set str"][0][0] in ("TypeError", "ValueError")
        for name in ("Barrier", "Bcast", "Allreduce", "bcast", "allgather",
                     "allreduce"):
            for bad in (0, -1, float("nan")):
                assert entries[f"{name} timeout={bad}"] == (("ValueError",),), \
                    (r, name, bad)
            assert entries[f"{name} timeout=5"] == (("ok", None),), (r, name)
        assert entries["after"] == ([size * (size + 1) / 2] * 3, True)


@pytest.mark.parametrize("t", [30, 1e9, 1e12, float("inf")])
def test_long_timeouts_really_wait(world, t):
    for x, seconds in world(3).run(r_long_timeouts_wait, t):
        assert x == [3.0] * 5


# -- the harness itself (the other tests trust it) -------------------------------------

def r_fail_on(comm, bad_rank, then_barrier):
    if comm.rank == bad_rank:
        raise KeyError(f"rank {comm.rank} fails on purpose")
    if then_barrier:
        comm.Barrier()           # blocks: the failed rank never comes
    return comm.rank


def r_sleep(comm, seconds):
    time.sleep(seconds)
    return comm.rank


def gone(pid):
    """True when `pid` is not a live process nor an unreaped zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "X"
    except FileNotFoundError:
        return True


def test_harness_reports_failures_timeouts_and_leaves_nothing():
    from gloocy.testing import RankFailure, RankTimeout
    from gloocy.testing.processes import ProcessWorld

    with ProcessWorld(3, timeout=20) as w:
        pids = w.pids
        with pytest.raises(RankFailure) as info:
            w.run(r_fail_on, 1, False)
        assert set(info.value.errors) == {1}
        err = info.value.errors[1]
        assert err.type_name == "KeyError" and err.is_a("LookupError")
        assert "fails on purpose" in str(info.value) and "r_fail_on" in err.traceback
        assert info.value.results[0] == 0 and info.value.results[2] == 2
        assert not w.reusable and w.alive
        # check=False: the error takes the rank's place in the results.
        res = w.run(r_fail_on, 2, False, check=False)
        assert res[:2] == [0, 1] and res[2].type_name == "KeyError"
        # A rank that fails while the others block: it is ended, as its
        # error would end it in a real job, and they lose it.
        t0 = time.monotonic()
        with pytest.raises(RankFailure) as info:
            w.run(r_fail_on, 0, True, grace=30)
        assert time.monotonic() - t0 < 25
        errors = info.value.errors
        assert errors[0].type_name == "KeyError"
        assert all(errors[r].is_a("PeerLostError") for r in (1, 2)), errors
        assert w.returncode(0) == -9 and not w.alive
        with pytest.raises(RuntimeError, match="dead"):
            w.run(r_world)
    assert all(gone(p) for p in pids)

    w = ProcessWorld(2, timeout=20)
    pids = w.pids
    # The ranks import this module first (a loaded machine once spent the
    # whole 0.5 s below in that import, so r_sleep was not on the stacks).
    w.run(r_sleep, 0)
    with pytest.raises(RankTimeout, match="ranks 0,1 did not finish") as info:
        w.run(r_sleep, 30, timeout=0.5)
    # the hung ranks' stacks
    assert re.search(r"line \d+ in r_sleep", str(info.value)), str(info.value)
    assert w.returncode(0) == -9 and w.returncode(1) == -9
    w.close()
    assert all(gone(p) for p in pids)

    w = ProcessWorld(3, timeout=20)
    pids = w.pids
    w.kill(1)
    assert gone(pids[1]) and w.returncode(1) == -9 and not w.alive
    assert w.run(r_sleep, 0, ranks=[0, 2]) == [0, 2]
    assert w.close() == [0, -9, 0]
    assert all(gone(p) for p in pids)


def test_worlds_cache_replaces_broken_worlds(worlds):
    a = worlds.get(2)
    assert worlds.get(2) is a and a.reusable
    a.kill(0)
    b = worlds.get(2)
    assert b is not a and b.reusable and a.returncode(1) is not None
    assert b.run(r_world) == [(0, 2, 0, 2), (1, 2, 1, 2)]


def test_worlds_cache_keeps_at_most_max_ranks_up():
    # Three kinds of world of 2 ranks with room for 4: making the third
    # closes the least recently used (the first is asked for again before
    # the second is made, so the second goes).
    cache = gloocy.testing.Worlds(backend="processes", max_ranks=4)
    try:
        a = cache.get(2, {"X": "a"})
        b = cache.get(2, {"X": "b"})
        assert cache.get(2, {"X": "a"}) is a
        c = cache.get(2, {"X": "c"})
        assert a.alive and c.alive and not b.alive
        assert a.run(r_world) == c.run(r_world) == [(0, 2, 0, 2), (1, 2, 1, 2)]
        b2 = cache.get(2, {"X": "b"})             # made again; a goes now
        assert b2 is not b and b2.alive and not a.alive and c.alive
    finally:
        cache.close()
