"""The node (shared-memory segment) algorithms of alltoall(v), gather(v),
scatter(v), reduce and reduce_scatter, forced by name, at world sizes 1-5,
against NumPy; with 4 KiB slots (GLOOCY_SHM_CHUNK_BYTES) so that a call
takes many steps; ranks that disagree on sizes, a call that only one rank
left early, a killed rank.

The worlds force "shm" with the GLOOCY_ALGORITHM_<COLLECTIVE> variables
(read at every call). Where there is no node segment (tcp, a mixed world,
one rank) the forced name falls back to the pair algorithm, which must
give the same results. A case is a tuple; every rank rebuilds its input
from the case's seed, and the test process predicts every rank's output
from the inputs of all.
"""

import functools
import time
import zlib

import numpy as np
import pytest

import gloocy
from gloocy import IN_PLACE
from gloocy import _core
from gloocy.testing.processes import ProcessWorld as World
from gloocy.testing.oracle import UFUNCS
from test_shm import kill_the_last_rank

TRANSPORTS = ("shm", "tcp", "mix")

SIZES = [1, 2, 3, 4, 5]
FORCE = {f"GLOOCY_ALGORITHM_{c.upper()}": "shm"
         for c in ("alltoall", "gather", "scatter", "reduce", "reduce_scatter")}
TINY_SLOTS = {"GLOOCY_SHM_CHUNK_BYTES": 4096}
# (dtype, op) of the reductions: exact in any order
REDUCTIONS = [("int64", "SUM"), ("int8", "PROD"), ("uint16", "BXOR"),
              ("float64", "SUM"), ("float32", "MAX"), ("bool", "LOR")]
MOVES = ["int8", "float64"]                 # data movement: element sizes 1, 8
COUNTS = [0, 1, 7, 1000, 5000]              # 5000 x 8 B: many 4 KiB slots


def rng(*key):
    return np.random.default_rng([zlib.crc32(repr(key).encode())])


def values(dtype, n, *key):
    g = rng(dtype, n, *key)
    if dtype == "bool":
        return g.random(n) < 0.3
    if dtype.startswith("float"):
        return g.integers(-1000, 1000, n).astype(dtype)     # sums stay exact
    info = np.iinfo(dtype)
    return g.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


def ragged(n, size, *key):
    """Block sizes 0..n, one of them 0 when there are several."""
    counts = rng("counts", n, size, *key).integers(0, n + 1, size).tolist()
    if size > 1:
        counts[zlib.crc32(repr(key).encode()) % size] = 0
    return counts


def matrix(n, size, seed):
    """counts[s][d]: elements rank s sends rank d (alltoallv)."""
    return [ragged(n, size, seed, s) for s in range(size)]


# -- rank side -------------------------------------------------------------------

def run_case(comm, case):
    """One call; what this rank's output buffer holds afterwards (None:
    no output on this rank) and the algorithm that ran."""
    coll, dtype, op, n, seed, inplace = case
    r, size = comm.rank, comm.size
    root = seed % size
    out = None
    if coll == "alltoall":
        send = values(dtype, n * size, seed, r)
        out = np.zeros(n * size, dtype)
        if inplace:
            out[:] = send
            comm.Alltoall(IN_PLACE, out)
        else:
            comm.Alltoall(send, out)
    elif coll == "alltoallv":
        m = matrix(n, size, seed)
        scounts = m[r]
        rcounts = [m[s][r] for s in range(size)]
        rdispls = list(np.cumsum([0] + [c + 1 for c in rcounts])[:-1])   # gaps
        send = values(dtype, sum(scounts), seed, r)
        out = np.zeros(sum(rcounts) + size, dtype)
        comm.Alltoallv([send, scounts], [out, (rcounts, rdispls)])
    elif coll == "gather":
        mine = values(dtype, n, seed, r)
        out = np.zeros(n * size, dtype) if r == root else None
        if inplace and r == root:
            out[r * n:(r + 1) * n] = mine
            comm.Gather(IN_PLACE, out, root=root)
        else:
            comm.Gather(mine, out, root=root)
    elif coll == "gatherv":
        counts = ragged(n, size, seed)
        mine = values(dtype, counts[r], seed, r)
        out = np.zeros(sum(counts), dtype) if r == root else None
        comm.Gatherv(mine, [out, counts] if r == root else None, root=root)
    elif coll == "scatter":
        send = values(dtype, n * size, seed, root) if r == root else None
        out = np.zeros(n, dtype)
        if inplace and r == root:
            comm.Scatter(send, IN_PLACE, root=root)
            out[:] = send[r * n:(r + 1) * n]
        else:
            comm.Scatter(send, out, root=root)
    elif coll == "scatterv":
        counts = ragged(n, size, seed)
        send = values(dtype, sum(counts), seed, root) if r == root else None
        out = np.zeros(counts[r], dtype)
        comm.Scatterv([send, counts] if r == root else None, out, root=root)
    elif coll == "reduce":
        x = values(dtype, n, seed, r)
        out = np.zeros(n, dtype) if r == root else None
        if inplace and r == root:
            out[:] = x
            comm.Reduce(IN_PLACE, out, op=getattr(gloocy, op), root=root)
        else:
            comm.Reduce(x, out, op=getattr(gloocy, op), root=root)
    elif coll == "reduce_scatter_block":
        x = values(dtype, n * size, seed, r)
        out = np.zeros(n, dtype)
        if inplace:
            buf = x.copy()
            comm.Reduce_scatter_block(IN_PLACE, buf, op=getattr(gloocy, op))
            out[:] = buf[:n]
        else:
            comm.Reduce_scatter_block(x, out, op=getattr(gloocy, op))
    elif coll == "reduce_scatter":
        counts = ragged(n, size, seed)
        x = values(dtype, sum(counts), seed, r)
        out = np.zeros(counts[r], dtype)
        comm.Reduce_scatter(x, out, counts, op=getattr(gloocy, op))
    else:
        raise ValueError(coll)
    return (None if out is None else out.tobytes()), comm._ctx.last_algorithm


def r_cases(comm, cases):
    return [run_case(comm, case) for case in cases]


# -- the oracle ------------------------------------------------------------------

def expect(case, size):
    """Per rank: the bytes its output must hold (None: it has none)."""
    coll, dtype, op, n, seed, inplace = case
    root = seed % size
    if coll == "alltoall":
        sends = [values(dtype, n * size, seed, s) for s in range(size)]
        return [np.concatenate([sends[s][d * n:(d + 1) * n] for s in range(size)]).tobytes()
                for d in range(size)]
    if coll == "alltoallv":
        m = matrix(n, size, seed)
        sends = [values(dtype, sum(m[s]), seed, s) for s in range(size)]
        outs = []
        for d in range(size):
            parts = []
            for s in range(size):
                at = sum(m[s][:d])
                parts.append(sends[s][at:at + m[s][d]])
                parts.append(np.zeros(1, dtype))                   # the gap
            outs.append(np.concatenate(parts).tobytes())
        return outs
    if coll in ("gather", "gatherv"):
        counts = [n] * size if coll == "gather" else ragged(n, size, seed)
        whole = np.concatenate([values(dtype, counts[s], seed, s) for s in range(size)])
        return [whole.tobytes() if d == root else None for d in range(size)]
    if coll in ("scatter", "scatterv"):
        counts = [n] * size if coll == "scatter" else ragged(n, size, seed)
        send = values(dtype, sum(counts), seed, root)
        offs = np.cumsum([0] + counts)
        return [send[offs[d]:offs[d + 1]].tobytes() for d in range(size)]
    ufunc = UFUNCS[op]
    if coll == "reduce":
        parts = [values(dtype, n, seed, s) for s in range(size)]
        with np.errstate(all="ignore"):
            whole = functools.reduce(ufunc, parts).astype(dtype)
        return [whole.tobytes() if d == root else None for d in range(size)]
    counts = [n] * size if coll == "reduce_scatter_block" else ragged(n, size, seed)
    parts = [values(dtype, sum(counts), seed, s) for s in range(size)]
    with np.errstate(all="ignore"):
        whole = functools.reduce(ufunc, parts).astype(dtype)
    offs = np.cumsum([0] + counts)
    return [whole[offs[d]:offs[d + 1]].tobytes() for d in range(size)]


def check(results, cases, size, node):
    for i, case in enumerate(cases):
        ran = {results[r][i][1] for r in range(size)}
        assert ran == {"shm" if node else pair_name(case[0])}, (case, ran)
        for r, want in enumerate(expect(case, size)):
            assert results[r][i][0] == want, f"{case} at size {size}: rank {r} is wrong"


def pair_name(coll):
    """What a forced "shm" falls back to without a node segment."""
    return {"alltoall": "direct", "alltoallv": "direct", "gather": "direct",
            "gatherv": "direct", "scatter": "direct", "scatterv": "direct",
            "reduce": "binomial", "reduce_scatter_block": "halving",
            "reduce_scatter": "halving"}[coll]


def all_cases(counts, seed=0):
    cases = []
    for n in counts:
        for coll in ("alltoall", "alltoallv", "gather", "gatherv", "scatter", "scatterv"):
            for dtype in MOVES:
                for inplace in ((False, True) if coll in ("alltoall", "gather", "scatter")
                                else (False,)):
                    seed += 1
                    cases.append((coll, dtype, None, n, seed, inplace))
        for coll in ("reduce", "reduce_scatter_block", "reduce_scatter"):
            for dtype, op in REDUCTIONS:
                for inplace in ((False, True) if coll != "reduce_scatter" else (False,)):
                    seed += 1
                    cases.append((coll, dtype, op, n, seed, inplace))
    return cases


@pytest.mark.parametrize("size", SIZES)
def test_node_algorithms_against_numpy(world, transport, size):
    cases = all_cases(COUNTS)
    node = transport == "shm" and size > 1
    check(world(size, **FORCE).run(r_cases, cases), cases, size, node)


@pytest.mark.transports("shm")
@pytest.mark.parametrize("size", [2, 3, 5])
def test_node_algorithms_through_4k_slots(world, size):
    # Sizes around a slot's room and far past it: every stream crosses
    # many steps, blocks start and end inside steps.
    cases = all_cases([500, 511, 512, 513, 1023, 20000], seed=1000)
    check(world(size, **FORCE, **TINY_SLOTS).run(r_cases, cases), cases, size, True)


@pytest.mark.transports("shm")
def test_large_reduce_goes_through_the_segment_in_steps(world):
    # Beyond a slot (default 256 KiB): the reduce's many-step path, where
    # every rank reduces a part and the root collects them, automatic at
    # this size; and a reduce_scatter as large.
    size, n = 3, 100_000                    # 800 KB of int64 / float64
    cases = [("reduce", "int64", "SUM", n, 7, False), ("reduce", "float64", "SUM", n, 8, True),
             ("reduce_scatter_block", "int64", "SUM", n, 9, False)]
    check(world(size).run(r_cases, cases), cases, size, True)


# -- the choice is visible and overridable -------------------------------------------

def r_choices(comm):
    """last_algorithm after automatic and forced calls."""
    out = []
    x = np.ones(4 * comm.size, np.float32)
    y = np.ones(4 * comm.size, np.float32)
    ctx = comm._ctx
    sizes = [16] * comm.size
    for algo in (None, "direct", "shm"):
        ctx.alltoallv(x, sizes, None, y, sizes, None, algorithm=algo)
        out.append(ctx.last_algorithm)
        ctx.gatherv(x[:4], y if comm.rank == 0 else None, sizes, None, 0, algorithm=algo)
        out.append(ctx.last_algorithm)
        ctx.scatterv(x if comm.rank == 0 else None, y[:4], sizes, None, 0, algorithm=algo)
        out.append(ctx.last_algorithm)
    for algo in (None, "binomial", "shm"):
        comm.Reduce(x, y, root=0, algorithm=algo)
        out.append(ctx.last_algorithm)
    for algo in (None, "ring", "shm"):
        comm.Reduce_scatter_block(x, y[:4], algorithm=algo)
        out.append(ctx.last_algorithm)
    for algo in ("ring", "shm"):
        comm.Allreduce(IN_PLACE, x, algorithm=algo)
        out.append(ctx.last_algorithm)
    return out


def test_last_algorithm_and_overrides(world, transport):
    got = world(3).run(r_choices)
    assert all(g == got[0] for g in got)
    shm = "shm" if transport == "shm" else None
    assert got[0] == [
        shm or "direct", "direct", "direct",          # alltoall, gather, scatter: auto
        "direct", "direct", "direct",
        shm or "direct", shm or "direct", shm or "direct",
        "binomial", "binomial", shm or "binomial",    # small reduce: the tree
        shm or "halving", "ring", shm or "halving",
        "ring", shm or "recursive_doubling"]


# -- how long a wait spins adapts ----------------------------------------------------

def r_spin_adapts(comm, late_s, late_calls):
    """Rank 1 comes `late_s` late to `late_calls` allreduces, then the ranks
    call allreduces promptly until every rank spins the whole spin_ns
    again: (this rank's spin after the late calls, its spin when all found
    it whole, the prompt calls made, whether every sum was right)."""
    ctx, node = comm._ctx, comm._ctx.node
    n, r = comm.size, comm.rank
    ok = True
    for i in range(late_calls):
        if r == 1:
            time.sleep(late_s)
        x = np.arange(7, dtype=np.int64) * (r + 1) + i
        comm.Allreduce(IN_PLACE, x)
        ok &= x.tolist() == (np.arange(7) * n * (n + 1) // 2 + n * i).tolist()
    shrunk = node.spin_now
    for prompt in range(1, 20001):
        seen = node.spin_now            # this call's own wait may change it
        flag = np.array([seen == ctx.spin_ns, r], np.int64)
        comm.Allreduce(IN_PLACE, flag)
        ok &= int(flag[1]) == n * (n - 1) // 2
        if flag[0] == n:
            break
    return shrunk, seen, prompt, ok


@pytest.mark.transports("shm")
def test_a_wait_spins_less_after_sleeping_and_all_again_once_peers_are_prompt(world):
    # Rank 0 waits 20 ms for rank 1 eight times: each wait outlasts its spin
    # and halves the next one's (50 us down to its floor). Prompt calls end in
    # their spin and double it, or a full-length probe spin ends in time:
    # the spin is whole again.
    got = world(2, GLOOCY_SPIN_US="50").run(r_spin_adapts, 0.02, 8)
    (shrunk0, end0, prompt, ok0), (shrunk1, end1, _, ok1) = got
    assert ok0 and ok1
    assert shrunk0 <= 50_000 // 4, got
    assert end0 == end1 == 50_000 and prompt < 20000, got


# -- errors ----------------------------------------------------------------------

def r_disagree(comm, coll):
    """Rank 1 gets its sizes wrong; every rank's error (or "ok")."""
    r, size = comm.rank, comm.size
    extra = 1 if r == 1 else 0
    x = np.zeros(64, np.uint8)
    y = np.zeros(64, np.uint8)
    ctx = comm._ctx
    try:
        if coll == "alltoall":                 # rank 1 expects 2 bytes from rank 0
            ctx.alltoallv(x, [1] * size, None, y, [1 + extra] + [1] * (size - 1), None,
                          algorithm="shm")
        elif coll == "gather":                 # rank 1 sends 2 bytes, root wants 1
            ctx.gatherv(x[:1 + extra], y if r == 0 else None, [1] * size, None, 0,
                        algorithm="shm")
        elif coll == "scatter":                # rank 1 wants 2 bytes, root sends 1
            ctx.scatterv(x if r == 0 else None, y[:1 + extra], [1] * size, None, 0,
                         algorithm="shm")
        elif coll == "reduce_scatter":         # same total, split otherwise
            counts = [2] * size
            if r == 1:
                counts[0], counts[1] = 1, 3
            ctx.reduce_scatter(np.zeros(2 * size), np.zeros(3), counts, 1,
                               algorithm="shm")
        comm.Barrier(timeout=10)
    except gloocy.GloocyError as e:
        return type(e).__name__, str(e)
    return "ok", ""


@pytest.mark.transports("shm")
@pytest.mark.parametrize("coll", ["alltoall", "gather", "scatter", "reduce_scatter"])
def test_ranks_that_disagree_on_sizes_all_name_it(coll):
    with World(3, env={"GLOOCY_TRANSPORT": "shm"}) as w:
        got = w.run(r_disagree, coll, timeout=60)
    # Every rank reads every head, so each names the same pair (a scatter's
    # root reads nothing and leaves: it hears of it from the others in its
    # next call, the barrier).
    want = {"alltoall": "rank 0 sends 1 bytes to rank 1, which expects 2",
            "gather": "rank 1 sends 2 bytes to rank 0, which expects 1",
            "scatter": "rank 0 sends 1 bytes to rank 1, which expects 2",
            "reduce_scatter": "splits the total otherwise"}[coll]
    for rank, (kind, msg) in enumerate(got):
        assert kind == "MismatchError", (rank, msg)
        assert want in msg and "the ranks disagree on the counts" in msg, (rank, msg)


def r_left_early(comm):
    """The root of a node bcast and a non-root of a node reduce both leave
    their step without waiting (they read nothing in it); rank 0 called the
    bcast, rank 1 the reduce: neither compares fingerprints in that call."""
    out = []
    x = np.ones(4)
    try:
        if comm.rank == 0:
            comm.Bcast(x, root=0, algorithm="shm")
            out.append(("ok", ""))
        else:
            comm.Reduce(x, None, root=0, algorithm="shm")
    except gloocy.GloocyError as e:
        out.append((type(e).__name__, str(e)))
    try:
        comm.Barrier(timeout=10)
        out.append(("ok", ""))
    except gloocy.GloocyError as e:
        out.append((type(e).__name__, str(e)))
    return out


@pytest.mark.transports("shm")
def test_a_rank_that_left_a_step_early_hears_of_a_mismatch_next():
    with World(2, env={"GLOOCY_TRANSPORT": "shm"}) as w:
        got = w.run(r_left_early, timeout=60)
    # The first to find it (in the barrier) tells the other, which may
    # still be finishing its first call: each rank's first error names both.
    for rank, calls in enumerate(got):
        kind, msg = next(c for c in calls if c[0] != "ok")
        assert kind == "MismatchError", calls
        assert "rank 0 called bcast" in msg and "rank 1 called reduce" in msg, calls


def r_wait_in(comm, coll):
    """Block in a node `coll` whose last rank never comes: (the rank named
    as lost, when)."""
    n = comm.size
    x = np.ones(1000 * n)
    try:
        if coll == "alltoall":
            comm.Alltoall(x, np.zeros_like(x))
        elif coll == "reduce_scatter":
            comm.Reduce_scatter_block(x, np.zeros(1000))
        elif coll == "gather":
            comm.Gather(x[:1000], np.zeros_like(x) if comm.rank == 0 else None, root=0)
    except gloocy.errors.PeerLostError as e:
        return e.rank, time.monotonic()
    return None, time.monotonic()


@pytest.mark.transports("shm")
@pytest.mark.parametrize("coll", ["alltoall", "reduce_scatter", "gather"])
def test_a_killed_rank_is_named_in_a_node_collective(coll):
    env = {"GLOOCY_TRANSPORT": "shm", **FORCE}
    for lost, after in kill_the_last_rank(env, coll, fn=r_wait_in):
        assert lost == 2
        assert 0 <= after < 3.0      # far below the deadline
