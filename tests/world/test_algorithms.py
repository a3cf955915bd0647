"""Every algorithm of every collective, forced and automatic, at world sizes 1-7.

Algorithms are chosen by name (the ``algorithm=`` keyword or the
``GLOOCY_ALGORITHM_<COLLECTIVE>`` environment variable; the keyword wins).
``Context.last_algorithm`` names the algorithm the last call ran, which
proves the choice was honoured (or that a documented fall-back happened).

A *case* is a tuple ``(collective, algorithm, n, seed, kind)``; every rank
runs a batch of cases (``r_cases``) and returns, per case, what its buffer
holds afterwards and ``last_algorithm``. The test process rebuilds every
rank's input from the seed and predicts the result with NumPy (``expect``).
Data are exact in any reduction order (integers over their whole range,
integer-valued floats, MAX with NaN) except two kinds that only check that
every rank got the same bits: inexact float sums ("noise") and MIN over 0.0
vs -0.0 and NaNs with different payloads ("zeros").
"""

import functools
import hashlib
import os
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gloocy
from gloocy import IN_PLACE
from gloocy import _core
from conftest import examples

# Every test runs over each transport (see conftest.TRANSPORT_ENV); "mix"
# puts ranks on two pretend hosts: shared memory within one, TCP across.
TRANSPORTS = ("shm", "tcp", "mix")

SIZES = [1, 2, 3, 4, 5, 6, 7]
TINY_SEGMENT = {"GLOOCY_SEGMENT_BYTES": 8}     # pipelined algorithms: 8-byte segments

NAMES = {                                      # collective -> forced algorithm names
    "allreduce": ["ring", "recursive_doubling", "halving_doubling", "bcube"],
    "bcast": ["binomial", "chain", "scatter_allgather"],
    "allgather": ["ring", "recursive_doubling"],
    "reduce_scatter": ["ring", "halving"],
    "reduce": ["binomial", "ring", "recursive_doubling"],
}
ENV = {c: f"GLOOCY_ALGORITHM_{c.upper()}" for c in NAMES}

# kind -> (dtype, op) for the reductions; "noise"/"zeros": bits agree only
REDUCE_KINDS = {
    "i64-sum": ("int64", "SUM"), "i8-prod": ("int8", "PROD"),
    "u16-bxor": ("uint16", "BXOR"), "f64-sum": ("float64", "SUM"),
    "f32-max": ("float32", "MAX"), "bool-lor": ("bool", "LOR"),
    "noise": ("float32", "SUM"), "zeros": ("float64", "MIN"),
}
UFUNCS = {"SUM": np.add, "PROD": np.multiply, "MIN": np.minimum,
          "MAX": np.maximum, "BXOR": np.bitwise_xor, "LOR": np.logical_or}
EXACT_KINDS = ["i64-sum", "i8-prod", "u16-bxor", "f64-sum", "f32-max", "bool-lor"]
# allgather layouts: equal blocks (Allgather), ragged end to end, gaps between
GATHER_KINDS = ["equal", "ragged", "gaps"]
SCATTER_KINDS = ["block", "ragged"]            # Reduce_scatter_block / ragged counts


def counts_for(size):
    """Counts that break index arithmetic: 0, 1, below the size, odd, big."""
    return sorted({0, 1, max(size - 1, 0), size + 2, 7, 1001})


def digest(data):
    data = memoryview(data).tobytes()
    return data if len(data) <= 4096 else hashlib.sha256(data).digest()


# -- deterministic inputs (built alike on ranks and in the test process) ---------

def rng_for(seed, rank, n, kind):
    return np.random.default_rng([seed, rank, n, zlib.crc32(kind.encode())])


def reduce_input(seed, rank, n, kind):
    dtype, op = REDUCE_KINDS[kind]
    rng = rng_for(seed, rank, n, kind)
    if kind == "noise":
        return (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(dtype)
    if kind == "zeros":                        # equal values, different bits
        x = np.where((np.arange(n) + rank) % 2 == 0, 0.0, -0.0)
        nan = np.array([0x7FF8000000000000 + rank + 1], np.uint64).view(np.float64)
        x[np.arange(n) % 5 == 3] = nan[0]
        return x
    if dtype == "bool":
        return rng.random(n) < 0.3
    if dtype == "float64":                      # sums of these are exact
        return rng.integers(-(1 << 40), 1 << 40, n).astype(dtype)
    if dtype == "float32":
        x = (rng.standard_normal(n) * 100).astype(dtype)
        x[rng.random(n) < 0.05] = np.nan
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


def reduce_oracle(seed, size, n, kind):
    _, op = REDUCE_KINDS[kind]
    parts = [reduce_input(seed, r, n, kind) for r in range(size)]
    with np.errstate(all="ignore"):
        return functools.reduce(UFUNCS[op], parts).astype(parts[0].dtype)


def scatter_counts(seed, size, n, kind):
    if kind == "block":
        return [n] * size
    rng = np.random.default_rng([seed, size, n, 7])
    counts = rng.integers(0, n + 1, size).tolist()
    counts[int(rng.integers(size))] = 0         # some rank gets nothing
    return counts


def gather_layout(seed, size, n, kind):
    """(counts, displs) in int32 elements; displs None: end to end."""
    if kind == "equal":
        return [n] * size, None
    rng = np.random.default_rng([seed, size, n, 9])
    counts = rng.integers(0, n + 1, size).tolist()
    if kind == "ragged":
        return counts, None
    displs, at = [], 0
    for c in counts:                            # a gap of 1 before every block
        at += 1
        displs.append(at)
        at += c
    return counts, displs


def gather_block(seed, rank, count):
    return rng_for(seed, rank, count, "gather").integers(
        -2**31, 2**31, count, dtype=np.int32)


def bcast_data(seed, n):
    return rng_for(seed, 0, n, "bcast").integers(0, 256, n, dtype=np.uint8)


# -- rank side -------------------------------------------------------------------

def run_case(comm, coll, algo, n, seed, kind):
    """One call; returns (what our buffer holds, the algorithm that ran)."""
    kw = {} if algo is None else {"algorithm": algo}
    r, size = comm.rank, comm.size
    if coll == "allreduce":
        x = reduce_input(seed, r, n, kind)
        comm.Allreduce(IN_PLACE, x, op=getattr(gloocy, REDUCE_KINDS[kind][1]), **kw)
        out = x
    elif coll == "reduce":
        root = seed % size
        x = reduce_input(seed, r, n, kind)
        out = np.zeros_like(x) if r == root else None
        comm.Reduce(x, out, op=getattr(gloocy, REDUCE_KINDS[kind][1]),
                    root=root, **kw)
        out = b"" if out is None else out
    elif coll == "reduce_scatter":
        skind, rkind = kind.split("/")
        counts = scatter_counts(seed, size, n, skind)
        x = reduce_input(seed, r, sum(counts), rkind)
        op = getattr(gloocy, REDUCE_KINDS[rkind][1])
        out = np.zeros(counts[r], x.dtype)
        if skind == "block":
            comm.Reduce_scatter_block(x, out, op=op, **kw)
        else:
            comm.Reduce_scatter(x, out, counts, op=op, **kw)
    elif coll == "allgather":
        counts, displs = gather_layout(seed, size, n, kind)
        mine = gather_block(seed, r, counts[r])
        if kind == "equal":
            out = np.zeros(n * size, np.int32)
            comm.Allgather(mine, out, **kw)
        else:
            end = (displs[-1] if displs else 0) + counts[-1] if displs else sum(counts)
            out = np.full(end, -1, np.int32)
            spec = [out, counts] if displs is None else [out, (counts, displs)]
            comm.Allgatherv(mine, spec, **kw)
    elif coll == "bcast":
        root = seed % size
        out = bcast_data(seed, n) if r == root else np.full(n, r, np.uint8)
        comm.Bcast(out, root=root, **kw)
    else:
        raise ValueError(coll)
    return digest(out), comm._ctx.last_algorithm


def r_cases(comm, cases):
    return [run_case(comm, *case) for case in cases]


def r_env_cases(comm, env, cases):
    """Run cases with `env` set in os.environ on a communicator made
    meanwhile (the variables are read when a communicator is made)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with comm.Dup() as dup:
            return r_cases(dup, cases)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def r_errors(comm, calls):
    """Each call (collective, keyword algorithm, env value) must raise
    ValueError before anything is sent; returns the messages."""
    out = []
    for coll, algo, env in calls:
        saved = os.environ.get(ENV[coll])
        if env is not None:
            os.environ[ENV[coll]] = env
        dup = comm.Dup()            # reads the variables
        try:
            run_case(dup, coll, algo, 4, 1, {
                "allreduce": "i64-sum", "reduce": "i64-sum", "bcast": "",
                "allgather": "equal", "reduce_scatter": "block/i64-sum"}[coll])
        except ValueError as e:
            out.append(str(e))
        else:
            out.append(None)
        finally:
            if saved is None:
                os.environ.pop(ENV[coll], None)
            else:
                os.environ[ENV[coll]] = saved
            dup.Free()
    # Nothing was sent: the world still works.
    x = np.full(3, comm.rank + 1, np.int64)
    comm.Allreduce(IN_PLACE, x)
    out.append(x.tolist())
    return out


# -- the test side ---------------------------------------------------------------

def expect(coll, size, n, seed, kind):
    """Per rank: the digest its buffer must hold (None: no check beyond
    every rank agreeing)."""
    if coll == "allreduce":
        if kind in ("noise", "zeros"):
            return [None] * size
        return [digest(reduce_oracle(seed, size, n, kind))] * size
    if coll == "reduce":
        root = seed % size
        want = digest(reduce_oracle(seed, size, n, kind))
        return [want if r == root else digest(b"") for r in range(size)]
    if coll == "reduce_scatter":
        skind, rkind = kind.split("/")
        counts = scatter_counts(seed, size, n, skind)
        full = reduce_oracle(seed, size, sum(counts), rkind)
        offs = np.cumsum([0] + counts)
        return [digest(full[offs[r]:offs[r + 1]]) for r in range(size)]
    if coll == "allgather":
        counts, displs = gather_layout(seed, size, n, kind)
        blocks = [gather_block(seed, r, counts[r]) for r in range(size)]
        if displs is None:
            return [digest(np.concatenate(blocks))] * size
        out = np.full(displs[-1] + counts[-1], -1, np.int32)
        for r in range(size):
            out[displs[r]:displs[r] + counts[r]] = blocks[r]
        return [digest(out)] * size
    return [digest(bcast_data(seed, n))] * size


def expected_algorithm(coll, algo, size, kind):
    """The name last_algorithm must show after forcing `algo`."""
    if coll == "reduce" and algo == "recursive_doubling":
        return "binomial"                       # the old name of the tree
    if coll == "allgather" and algo == "recursive_doubling" and (
            size & (size - 1) or (kind == "gaps" and size > 1)):
        return "ring"                           # documented fall-back
    return algo


def check(results, cases, size):
    for i, (coll, algo, n, seed, kind) in enumerate(cases):
        what = f"{coll} algorithm={algo} size={size} n={n} seed={seed} kind={kind}"
        got = [results[r][i][0] for r in range(size)]
        ran = {results[r][i][1] for r in range(size)}
        assert len(ran) == 1, f"{what}: ranks ran {ran}"
        ran = ran.pop()
        if algo is None:
            # "shm": the node segment's, picked automatically (where it
            # wins) when every rank is on one host.
            assert ran in _core.ALGORITHM_TABLES[coll] and ran != "auto", what
        else:
            assert ran == expected_algorithm(coll, algo, size, kind), f"{what}: ran {ran}"
        if coll in ("allreduce", "allgather", "bcast"):
            assert all(g == got[0] for g in got), f"{what}: ranks got different bits"
        for r, want in enumerate(expect(coll, size, n, seed, kind)):
            if want is not None:
                assert got[r] == want, f"{what}: rank {r} is wrong"


def all_cases(size, counts, seed=0):
    cases = []
    for coll, names in NAMES.items():
        for algo in [None] + names:
            for n in counts:
                seed += 1
                if coll == "allreduce":
                    kinds = EXACT_KINDS + ["noise", "zeros"]
                elif coll == "reduce":
                    kinds = ["i64-sum", "f32-max"]
                elif coll == "reduce_scatter":
                    kinds = [f"{s}/{k}" for s in SCATTER_KINDS
                             for k in ("i64-sum", "f64-sum", "u16-bxor")]
                elif coll == "allgather":
                    kinds = GATHER_KINDS
                else:
                    kinds = [""]
                cases += [(coll, algo, n, seed, k) for k in kinds]
    return cases


@pytest.mark.parametrize("size", SIZES)
def test_every_algorithm_every_collective(world, size):
    cases = all_cases(size, counts_for(size))
    check(world(size).run(r_cases, cases), cases, size)


@pytest.mark.parametrize("size", [2, 3, 5, 6])
def test_tiny_segments(world, size):
    # Segmented algorithms (ring allreduce / reduce / reduce_scatter, the
    # binomial bcast) with 8-byte segments; the others ride along.
    cases = all_cases(size, [0, 1, size - 1, 13, 301], seed=100)
    check(world(size, **TINY_SEGMENT).run(r_cases, cases), cases, size)


@settings(max_examples=examples(12), deadline=None)   # --long: 12
@given(data=st.data())
def test_algorithms_hypothesis(world, data):
    size = data.draw(st.sampled_from(SIZES), "size")
    coll = data.draw(st.sampled_from(list(NAMES)), "collective")
    algo = data.draw(st.sampled_from([None] + NAMES[coll]), "algorithm")
    n = data.draw(st.integers(0, 3000), "n")
    seed = data.draw(st.integers(0, 2**32), "seed")
    kind = data.draw(st.sampled_from(
        {"allreduce": EXACT_KINDS + ["noise", "zeros"],
         "reduce": EXACT_KINDS,
         "reduce_scatter": [f"{s}/{k}" for s in SCATTER_KINDS for k in EXACT_KINDS],
         "allgather": GATHER_KINDS, "bcast": [""]}[coll]), "kind")
    env = data.draw(st.sampled_from([{}, TINY_SEGMENT]), "env")
    cases = [(coll, algo, n, seed, kind)]
    check(world(size, **env).run(r_cases, cases), cases, size)


@pytest.mark.parametrize("size", [3, 5, 6, 7])
def test_float_sums_bitwise_same_on_every_rank(world, size):
    # Inexact sums: the ranks must still agree bit for bit, and be close.
    n, seed = 2003, size
    got = world(size).run(r_noise_values, n, seed, NAMES["allreduce"])
    parts = [reduce_input(seed, r, n, "noise").astype(np.float64) for r in range(size)]
    exact, mag = np.sum(parts, axis=0), np.sum(np.abs(parts), axis=0)
    for i, algo in enumerate(NAMES["allreduce"]):
        assert all(g[i] == got[0][i] for g in got), f"{algo}: ranks disagree"
        err = np.abs(np.frombuffer(got[0][i], np.float32).astype(np.float64) - exact)
        assert (err <= (size - 1) * np.finfo(np.float32).eps * mag * 1.01).all(), algo


def r_noise_values(comm, n, seed, algos):
    out = []
    for algo in algos:
        x = reduce_input(seed, comm.rank, n, "noise")
        comm.Allreduce(IN_PLACE, x, algorithm=algo)
        out.append(x.tobytes())
    return out


def test_environment_chooses_and_keyword_wins(world):
    # A world started with every variable set: calls without the keyword
    # run the variable's algorithm; the keyword wins over it.
    env = {ENV["allreduce"]: "bcube", ENV["bcast"]: "scatter_allgather",
           ENV["allgather"]: "recursive_doubling", ENV["reduce_scatter"]: "halving",
           ENV["reduce"]: "ring"}
    size = 4
    plain = [("allreduce", None, 10, 1, "i64-sum"), ("bcast", None, 10, 2, ""),
             ("allgather", None, 10, 3, "equal"),
             ("reduce_scatter", None, 10, 4, "block/i64-sum"),
             ("reduce", None, 10, 5, "i64-sum")]
    forced = [("allreduce", "ring", 10, 1, "i64-sum"),
              ("bcast", "binomial", 10, 2, ""),
              ("allgather", "ring", 10, 3, "equal"),
              ("reduce_scatter", "ring", 10, 4, "block/i64-sum"),
              ("reduce", "binomial", 10, 5, "i64-sum")]
    results = world(size, **env).run(r_cases, plain + forced)
    ran = [results[0][i][1] for i in range(len(plain + forced))]
    assert ran[:5] == [env[ENV[c[0]]] for c in plain], ran
    assert ran[5:] == [c[1] for c in forced], ran
    check([res[:5] for res in results], [(c, env[ENV[c]], *rest)
                                         for c, _, *rest in plain], size)
    check([res[5:] for res in results], forced, size)


@pytest.mark.parametrize("size", [3, 4])
def test_environment_is_read_when_a_communicator_is_made(world, transport, size):
    # The same world, the variable set and changed between Dups.
    for coll, names in NAMES.items():
        kind = {"allreduce": "i64-sum", "reduce": "i64-sum", "bcast": "",
                "allgather": "equal", "reduce_scatter": "ragged/i64-sum"}[coll]
        for name in names:
            cases = [(coll, None, 37, 11, kind)]
            results = world(size).run(r_env_cases, {ENV[coll]: name}, cases)
            ran = {res[0][1] for res in results}
            assert ran == {expected_algorithm(coll, name, size, kind)}, (coll, name, ran)
            check(results, [(coll, name, 37, 11, kind)], size)
    # Empty or "auto": the automatic choice, as with the variable unset.
    auto = world(size).run(r_env_cases, {}, [("allreduce", None, 37, 1,
                                              "i64-sum")])[0][0][1]
    results = world(size).run(r_env_cases, {ENV["allreduce"]: ""},
                              [("allreduce", None, 37, 1, "i64-sum")])
    assert results[0][0][1] == auto
    results = world(size).run(r_env_cases, {ENV["allreduce"]: "auto"},
                              [("allreduce", None, 37, 1, "i64-sum")])
    assert results[0][0][1] == auto


def test_unknown_names_raise_value_error(world):
    size = 3
    calls = ([(c, "tree-of-life", None) for c in NAMES]
             + [(c, None, "tree-of-life") for c in NAMES]
             + [("allreduce", 3, None), ("bcast", "ring", None),
                ("reduce_scatter", "bcube", None),
                ("allgather", "halving", None), ("reduce", "halving_doubling", None)])
    got = world(size).run(r_errors, calls)
    for msgs in got:
        assert msgs[-1] == [size * (size + 1) // 2] * 3, "the world broke"
        for (coll, algo, env), msg in zip(calls, msgs):
            assert msg is not None, f"{coll} {algo!r} {env!r}: no ValueError"
            names = _core.ALGORITHM_TABLES[coll]
            assert all(name in msg for name in names), msg
            assert coll in msg, msg
            if env is not None:
                assert ENV[coll] in msg, msg      # names the variable
            else:
                assert msg.startswith("algorithm:"), msg


def test_tables_and_names():
    assert _core.ALGORITHMS is _core.ALLREDUCE_ALGORITHMS     # the old name
    # Every collective with a node algorithm can force it ("shm"); gather,
    # scatter and alltoall have one pair algorithm ("direct") besides, and
    # a two-level one (ranks on several hosts: tests/system/test_two_level.py).
    for coll in ("gather", "scatter", "alltoall"):
        table = _core.ALGORITHM_TABLES[coll]
        assert set(table) == {"auto", "direct", "shm", "two_level"}, coll
        assert _core.ALGORITHM_ENV[coll] == f"GLOOCY_ALGORITHM_{coll.upper()}"
    for coll, names in NAMES.items():
        table = _core.ALGORITHM_TABLES[coll]
        assert set(table) == {"auto", "shm", *names, "two_level"}, coll
        assert _core.ALGORITHM_NAMES[table["shm"]] == "shm"
        assert _core.ALGORITHM_ENV[coll] == ENV[coll]
        for name in names:
            assert _core.ALGORITHM_NAMES[table[name]] == expected_algorithm(
                coll, name, 4, "equal")


def auto_choice(transport, coll, size, nbytes):
    """What "auto" runs: with every rank on one host (the shm worlds), the
    node segment's algorithm where it wins; with ranks on 2 pretend hosts
    (mix) and some host holding 2, the two-level one; else the table's."""
    return _core.auto_algorithm(coll, size, nbytes, node=transport == "shm",
                                hosts=min(size, 2) if transport == "mix" else 1)


def r_auto(comm, cases):
    """(collective, bytes) -> the algorithm "auto" picked."""
    out = []
    for coll, nbytes in cases:
        n = nbytes // 4
        if coll == "allreduce":
            comm.Allreduce(IN_PLACE, np.ones(n, np.float32))
        elif coll == "bcast":
            comm.Bcast(np.ones(n, np.float32), root=0)
        elif coll == "allgather":
            comm.Allgather(np.ones(n // comm.size, np.float32),
                           np.ones(n // comm.size * comm.size, np.float32))
        elif coll == "reduce_scatter":
            comm.Reduce_scatter_block(np.ones(n // comm.size * comm.size, np.float32),
                                      np.ones(n // comm.size, np.float32))
        elif coll == "reduce":
            comm.Reduce(np.ones(n, np.float32), np.ones(n, np.float32), root=0)
        elif coll == "gather":
            comm.Gather(np.ones(n, np.float32), np.ones(n * comm.size, np.float32))
        elif coll == "scatter":
            comm.Scatter(np.ones(n * comm.size, np.float32), np.ones(n, np.float32))
        elif coll == "alltoall":
            comm.Alltoall(np.ones(n * comm.size, np.float32),
                          np.ones(n * comm.size, np.float32))
        out.append(comm._ctx.last_algorithm)
    return out


@pytest.mark.parametrize("size", [2, 3, 4])
def test_automatic_choice_follows_the_table(world, transport, size):
    # The Context picks what auto_algorithm() (the documented table) says,
    # on both sides of every threshold.
    t = _core.ALGORITHM_THRESHOLDS
    small = t["allreduce_small"]
    step = 4 * size
    cases = [("allreduce", step), ("allreduce", small), ("allreduce", small + step),
             ("allreduce", small * t["allreduce_doubling_small_world"]),
             ("allreduce", small * t["allreduce_doubling_small_world"] + step),
             ("allreduce", t["allreduce_halving_max"]),
             ("allreduce", t["allreduce_halving_max"] + step),
             ("bcast", 4), ("bcast", t["bcast_scatter_min"]),
             ("bcast", 2 * MiB), ("bcast", 2 * MiB + 4),
             ("allgather", step), ("allgather", t["allgather_doubling_max"]),
             ("allgather", t["allgather_doubling_max"] + step),
             ("reduce_scatter", step), ("reduce_scatter", t["reduce_scatter_halving_max"]),
             ("reduce_scatter", t["reduce_scatter_halving_max"] + step),
             ("reduce", step), ("reduce", t["reduce_ring_min"]),
             ("reduce", t["node_reduce_min"] - 4), ("reduce", t["node_reduce_min"]),
             ("bcast", max(t["node_bcast_min"] - 4, 4)), ("bcast", t["node_bcast_min"]),
             ("gather", 4), ("gather", 1 << 20), ("scatter", 4), ("scatter", 1 << 20),
             ("alltoall", 4), ("alltoall", 1 << 20)]
    got = world(size).run(r_auto, cases)
    assert all(g == got[0] for g in got)
    # The bytes each call really moved (whole float32 blocks per rank).
    moved = [b // 4 // size * size * 4 if c in ("allgather", "reduce_scatter")
             else b // 4 * 4 for c, b in cases]
    want = [auto_choice(transport, c, size, m) for (c, _), m in zip(cases, moved)]
    assert got[0] == want, list(zip(cases, got[0], want))


KiB, MiB = 1 << 10, 1 << 20
AUTO_TABLE = [   # (collective, world size, bytes, choice): bench/README.md's table
    ("allreduce", 2, 4, "recursive_doubling"),
    ("allreduce", 5, 16, "recursive_doubling"),             # count < size
    ("allreduce", 7, 64 * KiB, "recursive_doubling"),
    ("allreduce", 2, 256 * KiB, "recursive_doubling"),
    ("allreduce", 3, 256 * KiB, "recursive_doubling"),
    ("allreduce", 3, 256 * KiB + 4, "ring"),
    ("allreduce", 2, 64 * MiB, "ring"),
    ("allreduce", 4, 64 * KiB + 4, "halving_doubling"),
    ("allreduce", 7, 4 * MiB, "halving_doubling"),
    ("allreduce", 4, 4 * MiB + 4, "ring"),
    ("bcast", 7, 64 * MiB, "binomial"),          # one host: never the chain
    ("bcast", 8, 16 * MiB - 1, "binomial"),
    ("bcast", 8, 16 * MiB, "scatter_allgather"),
    ("allgather", 4, 4 * MiB, "recursive_doubling"),
    ("allgather", 8, 1 * KiB, "recursive_doubling"),
    ("allgather", 4, 4 * MiB + 4, "ring"),
    ("allgather", 6, 4, "ring"),                            # not a power of two
    ("reduce_scatter", 3, 4 * MiB, "halving"),
    ("reduce_scatter", 7, 4 * MiB + 4, "ring"),
    ("reduce", 6, 64 * MiB, "binomial"),
    ("reduce", 8, 16 * MiB - 4, "binomial"),
    ("reduce", 8, 16 * MiB, "ring"),
]


AUTO_TABLE += [("gather", 5, 4, "direct"), ("scatter", 5, 64 * MiB, "direct"),
               ("alltoall", 3, 4, "direct")]
NODE_TABLE = [   # (collective, world size, bytes, choice) on one host
    ("allreduce", 2, 4, "shm"), ("bcast", 7, 64 * MiB, "shm"),
    ("allgather", 6, 4, "shm"), ("alltoall", 2, 4, "shm"), ("alltoall", 5, 64 * MiB, "shm"),
    ("reduce_scatter", 2, 8, "shm"), ("reduce_scatter", 7, 64 * MiB, "shm"),
    ("reduce", 2, 256 * KiB - 4, "binomial"), ("reduce", 2, 256 * KiB, "shm"),
    ("reduce", 8, 64 * MiB, "shm"),
    ("gather", 2, 4, "direct"), ("gather", 4, 64 * MiB, "direct"),  # forced only
    ("scatter", 2, 4, "direct"),
    ("allreduce", 1, 4, "recursive_doubling"),                       # no peers
]


@pytest.mark.parametrize("coll, size, nbytes, choice", AUTO_TABLE)
def test_automatic_choice_table(coll, size, nbytes, choice):
    assert _core.auto_algorithm(coll, size, nbytes) == choice


@pytest.mark.parametrize("coll, size, nbytes, choice", NODE_TABLE)
def test_automatic_choice_table_on_one_host(coll, size, nbytes, choice):
    assert _core.auto_algorithm(coll, size, nbytes, node=True) == choice


# -- NaN in MIN/MAX and MAXLOC/MINLOC, every allreduce algorithm, value-checked ------
#
# MIN/MAX propagate NaN as np.minimum/np.maximum do (README: the kernels'
# semantics are NumPy's), whatever the algorithm: the result is NaN where
# any rank has NaN and the exact minimum/maximum elsewhere. NaNs carry a
# different payload on each rank, so which NaN wins depends on the order of
# reduction, but every rank must end with the same bits. The newer types
# (float16, long double, (value, index) pairs) run through halving-doubling
# and bcube here too (bfloat16: at the end of test_dtypes_ops.py, whose
# ranks have ml_dtypes imported already).

NAN_ALGORITHMS = [None, *NAMES["allreduce"]]
NAN_DTYPES = ["float16", "float32", "float64", "longdouble"]


def nan_dtype(name):
    if name == "pair":
        return np.dtype([("v", "f8"), ("i", "i4")], align=True)
    return np.dtype(name)


def nan_input(seed, rank, n, name):
    """Quarters in [-12, 12] (exact in every type; no -0.0), ~15% NaN with a
    payload naming the rank, ~5% infinities."""
    rng = rng_for(seed, rank, n, "nan-" + name)
    x = rng.integers(-48, 49, n) / 4
    x[rng.random(n) < 0.05] = rng.choice([np.inf, -np.inf])
    nan = rng.random(n) < 0.15
    if name == "pair":
        out = np.zeros(n, nan_dtype(name))
        out["v"], out["i"] = x, rng.integers(0, 4, n)   # many ties
        out["v"][nan] = np.nan
        return out
    x = x.astype(nan_dtype(name))
    if name in ("float32", "float64"):                # payload: rank + 1
        bits = x.view(f"u{x.itemsize}")
        quiet = np.array([0x7FC00000 if name == "float32" else 0x7FF8000000000000],
                         bits.dtype)
        bits[nan] = quiet[0] + rank + 1
    else:
        x[nan] = np.nan
    return x


def r_nan_reductions(comm, cases):
    out = []
    for name, op, algo, n, seed in cases:
        x = nan_input(seed, comm.rank, n, name)
        comm.Allreduce(IN_PLACE, x, op=getattr(gloocy, op), algorithm=algo)
        out.append((x.tobytes(), comm._ctx.last_algorithm))
    return out


def nan_oracle(name, op, parts):
    """(values ignoring NaN, where the result must be NaN)."""
    nan = functools.reduce(np.logical_or, [np.isnan(p) for p in parts])
    return functools.reduce(np.fmin if op == "MIN" else np.fmax, parts), nan


@pytest.mark.parametrize("size", [3, 4, 6])
def test_min_max_with_nan_every_algorithm(world, size):
    cases = [(name, op, algo, n, 1000 * size + n + i)
             for i, name in enumerate(NAN_DTYPES) for op in ("MIN", "MAX")
             for algo in NAN_ALGORITHMS for n in (1, size + 1, 1001)]
    results = world(size).run(r_nan_reductions, cases)
    for c, (name, op, algo, n, seed) in enumerate(cases):
        what = f"{op} {name} algorithm={algo} n={n} size={size}"
        got = [results[r][c][0] for r in range(size)]
        assert all(g == got[0] for g in got) or name == "longdouble", \
            f"{what}: ranks got different bits"
        ran = results[0][c][1]
        assert algo is None or ran == algo, f"{what}: ran {ran}"
        parts = [nan_input(seed, r, n, name) for r in range(size)]
        want, nan = nan_oracle(name, op, parts)
        for r in range(size):
            mine = np.frombuffer(got[r], nan_dtype(name))
            np.testing.assert_array_equal(np.isnan(mine), nan, err_msg=f"{what}: rank {r}")
            assert np.array_equal(mine[~nan], want[~nan]), f"{what}: rank {r} values"
        if name == "longdouble":           # values, not padding bytes
            first = np.frombuffer(got[0], np.longdouble)
            for r in range(1, size):
                other = np.frombuffer(got[r], np.longdouble)
                assert np.array_equal(first, other, equal_nan=True), \
                    f"{what}: rank {r} differs from rank 0"


@pytest.mark.parametrize("size", [3, 4, 6])
def test_maxloc_minloc_with_nan_every_algorithm(world, size):
    # MPI leaves NaN to the implementation; gloocy's kernels compare as C
    # (and MPICH) do, so a NaN pair is kept or passed over depending on the
    # order of reduction. Required: every rank the same bits; where no rank
    # has NaN, the exact MAXLOC/MINLOC (the extreme value, then the smallest
    # index); elsewhere one of the ranks' own pairs.
    cases = [("pair", op, algo, n, 77 * size + n)
             for op in ("MAXLOC", "MINLOC") for algo in NAN_ALGORITHMS
             for n in (1, size + 1, 1001)]
    results = world(size).run(r_nan_reductions, cases)
    for c, (name, op, algo, n, seed) in enumerate(cases):
        what = f"{op} algorithm={algo} n={n} size={size}"
        got = [results[r][c][0] for r in range(size)]
        fields = [np.frombuffer(g, np.uint8).reshape(n, -1)[:, :12] for g in got]
        assert all(np.array_equal(f, fields[0]) for f in fields), \
            f"{what}: ranks got different bits"          # (padding aside)
        mine = np.frombuffer(got[0], nan_dtype(name))
        parts = [nan_input(seed, r, n, name) for r in range(size)]
        vals = np.array([p["v"] for p in parts])            # ranks x n
        idxs = np.array([p["i"] for p in parts])
        nan = np.isnan(vals).any(axis=0)
        best = vals.max(axis=0) if op == "MAXLOC" else vals.min(axis=0)
        tied = np.where(vals == best, idxs, np.iinfo(np.int32).max).min(axis=0)
        clean = ~nan
        assert np.array_equal(mine["v"][clean], best[clean]), f"{what}: values"
        assert np.array_equal(mine["i"][clean], tied[clean]), f"{what}: indices"
        same_v = (vals == mine["v"]) | (np.isnan(vals) & np.isnan(mine["v"]))
        from_a_rank = (same_v & (idxs == mine["i"])).any(axis=0)
        assert from_a_rank[nan].all(), \
            f"{what}: elements {np.flatnonzero(nan & ~from_a_rank)[:5]} come from no rank"


BCAST_HOSTS_TABLE = [   # (world size, bytes, choice) with one rank per host
    (2, 64 * MiB, "binomial"),                   # the chain is the same tree
    (3, 1 * MiB, "binomial"),                    # chain: 1-MiB segments, ...
    (3, 1 * MiB + 4, "chain"),                   # ... nseg * (depth - 1) > n - 2
    (4, 2 * MiB, "binomial"),
    (4, 2 * MiB + 4, "chain"),
    (7, 64 * MiB, "chain"),
    (8, 3 * MiB, "binomial"),
    (8, 3 * MiB + 4, "chain"),
    (256, 16 * MiB - 4, "binomial"),             # too short a pipeline for
    (256, 16 * MiB, "scatter_allgather"),        # 256 ranks
    (256, 64 * MiB, "chain"),
]


@pytest.mark.parametrize("size, nbytes, choice", BCAST_HOSTS_TABLE)
def test_automatic_bcast_across_hosts(size, nbytes, choice):
    assert _core.auto_algorithm("bcast", size, nbytes, hosts=size) == choice


def test_automatic_bcast_chain_only_across_hosts():
    # The chain's pipeline is counted in the context's segments; with every
    # rank on one host (over the pairs or through the node segment) the
    # tree or the segment.
    assert _core.auto_algorithm("bcast", 4, 4 * MiB, hosts=4) == "chain"
    assert _core.auto_algorithm("bcast", 4, 4 * MiB, hosts=4,
                                segment=2 * MiB) == "binomial"
    assert _core.auto_algorithm("bcast", 4, 4 * MiB, hosts=4,
                                segment=1 * MiB + 4) == "chain"
    assert _core.auto_algorithm("bcast", 4, 64 * MiB) == "binomial"
    assert _core.auto_algorithm("bcast", 4, 64 * MiB, node=True) == "shm"
