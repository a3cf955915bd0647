"""Large one-host transfers (issue 16): the single-copy bcast where the root
writes a share while the others read the rest (gloocy/_cma.pxi; where
every rank has a CPU of its own, else the others read it all), and the
node reduce_scatter whose steps carry a piece of every block, reading the
input where it is. At sizes around the thresholds and page boundaries, at
odd sizes, N = 2, 3, 4, against NumPy; a reader killed while the root
writes into it; the fallback when cross-memory attach is refused.
"""

import os
import threading
import time

import numpy as np
import pytest

import gloocy
from gloocy.testing.processes import ProcessWorld as World

from test_node_derived import _refuse_cross_memory_attach, r_refused

SHM = {"GLOOCY_TRANSPORT": "shm"}
CMA_SMALL = {"GLOOCY_CMA_MIN_BYTES": 65536}
CMA_TINY = {"GLOOCY_CMA_MIN_BYTES": 8192}
SMALL_SLOTS = {"GLOOCY_SHM_CHUNK_BYTES": 8192}   # several steps per call


def r_bcasts(comm, sizes):
    """A bcast from every root at every size: [(root, nbytes)] of those
    whose result differs from the root's buffer; and the single copies."""
    wrong = []
    for nbytes in sizes:
        for root in range(comm.size):
            want = ((np.arange(nbytes, dtype=np.int64) * (root + 5) + nbytes)
                    % 253).astype(np.uint8)
            b = want.copy() if comm.rank == root else np.full(nbytes, 255, np.uint8)
            comm.Bcast(b, root=root)
            if not np.array_equal(b, want):
                wrong.append((root, nbytes))
    return wrong, comm._ctx.node.cma_calls


# around the threshold (8 KiB here), pieces of whole pages and not, fewer
# bytes than a page per rank (no piece: the readers read it all), odd sizes
BCAST_SIZES = [8191, 8192, 4096 * 3 + 1, 65537, (1 << 20) + 4095]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_single_copy_bcast_with_the_root_writing_a_share(n):
    with World(n, env={**SHM, **CMA_TINY}) as w:
        got = w.run(r_bcasts, BCAST_SIZES)
    big = [s for s in BCAST_SIZES if s >= 8192]
    for wrong, calls in got:
        assert wrong == [], got
        assert calls == n * len(big), got     # every large one copied once


@pytest.mark.parametrize("n", [2, 3])
def test_bcast_copies_once_from_128_kib_where_each_rank_has_a_cpu(n, monkeypatch):
    """With the default thresholds, a bcast of 128 KiB or more copies once
    where the host's ranks each have a CPU of their own, and from 2 MiB
    where they outnumber the CPUs; either way the data arrive whole."""
    from gloocy.waiting import usable_cpus
    monkeypatch.delenv("GLOOCY_CMA_MIN_BYTES", raising=False)
    sizes = [(128 << 10) - 1, 128 << 10, 1 << 20, 2 << 20]
    with World(n, env=SHM) as w:
        got = w.run(r_bcasts, sizes)
    threshold = 128 << 10 if n <= usable_cpus() else 2 << 20
    copied_once = [s for s in sizes if s >= threshold]
    for wrong, calls in got:
        assert wrong == [], got
        assert calls == n * len(copied_once), (got, threshold)


def r_reduce_scatter(comm, lens, in_place, dtype):
    """Reduce_scatter of lens (recvcounts) against the NumPy sum of every
    rank's input: True if ours is right."""
    total = sum(lens)
    inputs = [((np.arange(total) * (r + 3) + r) % 1000).astype(dtype)
              for r in range(comm.size)]
    want = np.sum(inputs, axis=0, dtype=dtype)
    lo = sum(lens[:comm.rank])
    mine = lens[comm.rank]
    if in_place:
        buf = inputs[comm.rank].copy()
        comm.Reduce_scatter(gloocy.IN_PLACE, buf, lens)
        out = buf[:mine]
    else:
        out = np.full(mine, -1, dtype)
        comm.Reduce_scatter(inputs[comm.rank], out, lens)
    return (bool(np.array_equal(out, want[lo:lo + mine])),
            comm._ctx.last_algorithm, comm._ctx.node.cma_calls)


CASES = {   # n: recvcounts per rank, several splits
    2: [[1, 1], [3000, 1], [0, 5001]],
    3: [[2047, 2048, 2049], [0, 0, 0]],
    4: [[1000, 0, 777, 3001], [20000] * 4],
}


@pytest.mark.parametrize("n", sorted(CASES))
def test_node_reduce_scatter_at_odd_sizes(n):
    with World(n, env={**SHM, **SMALL_SLOTS}) as w:
        for lens in CASES[n]:
            for in_place, dtype in ((False, np.int64), (True, np.float32)):
                got = w.run(r_reduce_scatter, lens, in_place, dtype)
                assert all(ok for ok, _, _ in got), (lens, in_place, dtype, got)
                assert {a for _, a, _ in got} == {"shm"}, got


@pytest.mark.parametrize("n", sorted(CASES))
def test_single_copy_reduce_scatter_at_odd_sizes(n):
    # from 8 KiB of input by single copy (the slots: 8 KiB, so every case
    # with a block longer than a slot copies once)
    with World(n, env={**SHM, **SMALL_SLOTS, **CMA_TINY}) as w:
        calls = 0
        for lens in CASES[n] + [[70001 + 3 * j for j in range(n)]]:
            for in_place, dtype in ((False, np.int64), (True, np.float32)):
                got = w.run(r_reduce_scatter, lens, in_place, dtype)
                assert all(ok for ok, _, _ in got), (lens, in_place, dtype, got)
                once = max(lens) * np.dtype(dtype).itemsize > 8192
                assert {c for _, _, c in got} == {calls + once}, (lens, got)
                calls += once
        assert calls >= 2


def test_node_reduce_scatter_with_default_slots_at_large_sizes():
    # 3 ranks, 8 MiB inputs of float64: 32 steps of the default slots
    # (single copies off: they would take it)
    lens = [350001, 350000, 348575]
    with World(3, env={**SHM, "GLOOCY_CMA": "0"}) as w:
        got = w.run(r_reduce_scatter, lens, False, np.float64)
    assert all(ok for ok, _, _ in got), got


def r_bcast_until_lost(comm, nbytes, started):
    """Large bcasts from rank 0 until a peer is lost (the file `started`
    made after the first): (rank named, when, single copies)."""
    b = np.zeros(nbytes, np.uint8)
    try:
        while True:
            comm.Bcast(b, root=0)
            if comm.rank == 0 and not os.path.exists(started):
                open(started, "w").close()
    except gloocy.errors.PeerLostError as e:
        return e.rank, time.monotonic(), comm._ctx.node.cma_calls


def run_killing(w, victim, started, fn, *args):
    """w.run(fn, *args) while rank `victim` is killed 0.2 s after the file
    `started` appears (its ranks are in their calls): (each rank's result,
    [the time of the kill])."""
    killed_at = []

    def kill():
        deadline = time.monotonic() + 25
        while not os.path.exists(started) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        killed_at.append(time.monotonic())
        w.kill(victim)
    killer = threading.Thread(target=kill)
    killer.start()
    try:
        return w.run(fn, *args, timeout=30, check=False), killed_at
    finally:
        killer.join()


def test_a_reader_killed_while_the_root_writes_to_it_is_named(tmp_path):
    size, nbytes = 2, 32 << 20           # 2 ranks: the root writes a share
    started = str(tmp_path / "started")
    with World(size, env=SHM) as w:
        got, killed_at = run_killing(w, 1, started, r_bcast_until_lost, nbytes, started)
    for rank in (0,):                      # the survivor
        lost, noticed, calls = got[rank]
        assert lost == 1, got
        assert calls >= 1, got
        assert 0 <= noticed - killed_at[0] < 3.0, got


def test_refused_cross_memory_attach_still_bcasts_right():
    # rank 1 refused (seccomp): every rank falls back to the slots, and
    # the bcasts (root 1 included, whose writes fail first) are right.
    with World(3, env={**SHM, **CMA_SMALL}) as w:
        got = w.run(r_refused, (1 << 20) + 4097, timeout=60)
    for ok, cma, calls, _ in got:
        assert ok and cma == -1 and calls == 0, got


def r_reduce_scatter_refused(comm, lens):
    if comm.rank == 1:
        _refuse_cross_memory_attach()
    ok, _, calls = r_reduce_scatter(comm, lens, False, np.int64)
    return ok, comm._ctx.node.cma, calls


def test_refused_cross_memory_attach_still_reduce_scatters_right():
    # Blocks of ~800 KB need more than one 256 KiB slot, the case in which
    # a reduce_scatter tries single copies (3 ranks on 2 CPUs would get
    # 1 MiB slots by default).
    with World(3, env={**SHM, **CMA_SMALL, "GLOOCY_SHM_CHUNK_BYTES": 1 << 18}) as w:
        got = w.run(r_reduce_scatter_refused, [100001, 99999, 100003], timeout=60)
    for ok, cma, calls in got:
        assert ok and cma == -1 and calls == 0, got


# -- single-copy alltoall(v) after a first step through the slots ---------------

def block(s, d, n):
    """What rank s sends rank d: n bytes no other block has."""
    return ((np.arange(n, dtype=np.int64) * (2 * s + 3) + 7 * d + n) % 251).astype(np.uint8)


def r_alltoallv(comm, counts, in_place):
    """Alltoall(v) with counts[s][d] bytes from rank s to rank d (all rows
    alike: Alltoall, in place if asked), against the blocks the senders
    made: True if right; and the single copies made."""
    r, size = comm.rank, comm.size
    send = np.concatenate([block(r, d, counts[r][d]) for d in range(size)])
    want = np.concatenate([block(s, r, counts[s][r]) for s in range(size)])
    if all(row == counts[0] for row in counts) and len(set(counts[0])) == 1:
        if in_place:
            out = send.copy()
            comm.Alltoall(gloocy.IN_PLACE, out)
        else:
            out = np.full(want.size, 255, np.uint8)
            comm.Alltoall(send, out)
    else:
        out = np.full(want.size, 255, np.uint8)
        comm.Alltoallv([send, counts[r]], [out, [counts[s][r] for s in range(size)]])
    return bool(np.array_equal(out, want)), comm._ctx.node.cma_calls


# Slots of 8 KiB: the first step carries the first 8 KiB of every rank's
# stream (its blocks for the others, end to end; at N = 2 and 3 the head
# fits in the slot's room past its chunk), single copies the rest from
# 8 KiB of stream on. Blocks that end inside the first step, at its edge,
# just past it, straddle it, or start after it.
A2A_BLOCKS = [4000, 7900, 8064, 8192, 8193, 12289, 30001]


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("in_place", [False, True])
def test_single_copy_alltoall_reads_only_what_the_slots_did_not_bring(n, in_place):
    env = {**SHM, **CMA_TINY, **SMALL_SLOTS, "GLOOCY_ALGORITHM_ALLTOALL": "shm"}
    with World(n, env=env) as w:
        calls = 0
        for b in A2A_BLOCKS:
            got = w.run(r_alltoallv, [[b] * n] * n, in_place)
            assert all(ok for ok, _ in got), (b, got)
            calls = got[0][1]
        # ragged, some blocks empty: block sizes differ by sender and receiver
        ragged = [[(s * 7919 + d * 4099) % 20000 * (s != d or s == 1)
                   for d in range(n)] for s in range(n)]
        got = w.run(r_alltoallv, ragged, False)
        assert all(ok for ok, _ in got), got
    # the calls whose streams (b x (n - 1) bytes) reach GLOOCY_CMA_MIN_BYTES
    # (8192: a stream that just fills the first step's room too) copied once
    assert calls == sum(b * (n - 1) >= 8192 for b in A2A_BLOCKS), calls


def r_reduce_scatter_blocks(comm, blocks):
    """A Reduce_scatter_block of each of `blocks` bytes a block (float64),
    against NumPy's sum: [(right, single copies so far)]."""
    got = []
    for nbytes in blocks:
        count = nbytes // 8
        inputs = [np.arange(count * comm.size, dtype=np.float64) * (s + 1) + s
                  for s in range(comm.size)]
        want = np.sum(inputs, axis=0)[comm.rank * count:(comm.rank + 1) * count]
        out = np.full(count, -1.0)
        comm.Reduce_scatter_block(inputs[comm.rank], out)
        got.append((bool(np.array_equal(out, want)), comm._ctx.node.cma_calls))
    return got


RS_BLOCKS = [384 << 10, 768 << 10, 4 << 20]


@pytest.mark.parametrize("n", [2, 3])
def test_reduce_scatter_copies_once_from_1_mib_where_each_rank_has_a_cpu(n, monkeypatch):
    """With the default thresholds, a reduce_scatter copies once from 1 MiB
    of input where every rank of the host has a CPU, from 2 MiB where they
    outnumber the CPUs (and only when a block is longer than a slot, 256
    KiB or 1 MiB then); GLOOCY_CMA_MIN_BYTES forces its threshold. The
    data arrive whole on every path."""
    from gloocy.transport.shm import chunk_bytes
    from gloocy.waiting import usable_cpus
    monkeypatch.delenv("GLOOCY_CMA_MIN_BYTES", raising=False)
    monkeypatch.delenv("GLOOCY_SHM_CHUNK_BYTES", raising=False)
    chunk = chunk_bytes(n)
    for env, threshold in (({}, 1 << 20 if n <= usable_cpus() else 2 << 20),
                           ({"GLOOCY_CMA_MIN_BYTES": str(2 << 20)}, 2 << 20)):
        once = [b * n >= threshold and b > chunk for b in RS_BLOCKS]
        want = [int(sum(once[:i + 1])) for i in range(len(once))]
        with World(n, env={**SHM, **env,
                           "GLOOCY_ALGORITHM_REDUCE_SCATTER": "shm"}) as w:
            got = w.run(r_reduce_scatter_blocks, RS_BLOCKS)
        for rank_got in got:
            assert [ok for ok, _ in rank_got] == [True] * len(RS_BLOCKS), (env, got)
            assert [c for _, c in rank_got] == want, (env, got, chunk, usable_cpus())


def r_gather_scatter(comm, counts, root):
    """Gatherv of counts[s] bytes from each rank s to `root`, then Scatterv
    of the same blocks back out from it: (gathered right at the root,
    scattered right everywhere, single copies so far)."""
    r, size = comm.rank, comm.size
    mine = block(r, root, counts[r])
    want = np.concatenate([block(s, root, counts[s]) for s in range(size)])
    out = np.full(want.size, 255, np.uint8) if r == root else None
    comm.Gatherv(mine, [out, counts] if r == root else None, root=root)
    gathered = bool(np.array_equal(out, want)) if r == root else True
    back = np.full(counts[r], 255, np.uint8)
    comm.Scatterv([want, counts] if r == root else None, back, root=root)
    return gathered, bool(np.array_equal(back, mine)), comm._ctx.node.cma_calls


# Around the first step's room (8 KiB slots less a 64-128 byte head): blocks
# that end inside it, at its edge for either head, just past it, straddle it.
GS_BLOCKS = [4000, 8064, 8128, 8129, 12289, 30001]


@pytest.mark.parametrize("n", [2, 3])
def test_single_copy_gather_and_scatter_read_only_what_the_slots_did_not_bring(n):
    env = {**SHM, **CMA_TINY, **SMALL_SLOTS, "GLOOCY_ALGORITHM_GATHER": "shm",
           "GLOOCY_ALGORITHM_SCATTER": "shm"}
    with World(n, env=env) as w:
        for b in GS_BLOCKS:
            for root in range(n):
                got = w.run(r_gather_scatter, [b] * n, root)
                assert all(g and s for g, s, _ in got), (b, root, got)
        ragged = [(s * 7919 + 4099) % 20000 * (s != 1) for s in range(n)]
        got = w.run(r_gather_scatter, ragged, n - 1)
        assert all(g and s for g, s, _ in got), got
    assert got[0][2] > 0          # some of them copied once


# -- ranks kept on CPUs of their own (node_spread) ------------------------------

def _on_cpu(cpu):
    """Move this thread to `cpu` and give it back its mask: it stays there
    until the scheduler moves it."""
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    os.sched_setaffinity(0, mask)


def r_crowded_allgathers(comm, tries):
    """`tries` times: both ranks put on one CPU, then an allgather by
    single copies, checked against NumPy. (all right, the mask as it was
    after each, times moved, the segment spreads)."""
    node = comm._ctx.node
    mask = os.sched_getaffinity(0)
    right, kept = True, True
    for i in range(tries):
        _on_cpu(min(mask))
        mine = np.full(1 << 14, comm.rank + i, np.float64)
        out = np.zeros(mine.size * comm.size)
        comm.Allgather(mine, out)
        right &= bool(np.array_equal(out, np.repeat(np.arange(comm.size) + i, mine.size)))
        kept &= os.sched_getaffinity(0) == mask
        time.sleep(0.002)         # past the rate limit of moves
    return right, kept, node.moves, node.spread


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                    reason="needs 2 CPUs in this process's affinity mask")
def test_a_rank_that_shares_a_cpu_with_a_lower_one_moves_and_keeps_its_mask():
    env = {**SHM, **CMA_TINY}
    with World(2, env={**env, "GLOOCY_SPREAD": "1"}, timeout=300) as w:
        (r0, k0, m0, s0), (r1, k1, m1, s1) = w.run(r_crowded_allgathers, 16)
    assert r0 and r1 and k0 and k1 and s0 and s1
    assert m0 == 0                # the lowest rank never moves
    # The other moved when it found rank 0 on its CPU; the scheduler may
    # have moved it first (under load, often: 1 move in 8 tries was seen).
    assert m1 >= 1, m1
    with World(2, env=env, timeout=300) as w:     # by default, it stays
        got = w.run(r_crowded_allgathers, 5)
    assert all(r and k and m == 0 and not s for r, k, m, s in got), got


def r_spread_and_allgather(comm):
    sub = comm.Split(comm.rank % 2, comm.rank)     # a derived communicator
    mine = np.full(1 << 14, sub.rank + 1, np.float64)
    out = np.zeros(mine.size * sub.size)
    sub.Allgather(mine, out)
    right = bool(np.array_equal(out, np.repeat(np.arange(sub.size) + 1.0, mine.size)))
    node = sub._ctx.node                  # None in a world of one: no segment
    got = (comm._ctx.node.spread, node is not None and node.spread, sub.size, right,
           os.sched_getaffinity(0))
    sub.Free()
    return got


@pytest.mark.parametrize("n", [3, 4])
def test_spread_only_where_the_ranks_do_not_outnumber_the_cpus(n):
    """Asked for, node_spread is on in a segment whose ranks have a CPU
    each (this process's mask decides), off where they outnumber them; a
    Split's segment decides by its own size."""
    with World(n, env={**SHM, **CMA_TINY, "GLOOCY_SPREAD": "1"}, timeout=300) as w:
        got = w.run(r_spread_and_allgather)
    for world_spread, sub_spread, sub_size, right, mask in got:
        assert right
        assert world_spread == (n <= len(mask)), got
        assert sub_spread == (1 < sub_size <= len(mask)), got


# -- results streamed past the caches (gloocy/_copy.h) ---------------------------

STREAM_ALWAYS = {"GLOOCY_STREAM_MIN_BYTES": 0}


def r_allgatherv(comm, sizes, in_place):
    """Allgatherv of sizes[s] bytes from rank s (blocks end to end, one
    byte apart, so that no block starts on a line boundary past the first),
    against the blocks the senders made: True if right."""
    r, size = comm.rank, comm.size
    offs = [sum(sizes[:s]) + s for s in range(size)]
    want = np.full(offs[-1] + sizes[-1] + 1, 255, np.uint8)
    for s in range(size):
        want[offs[s]:offs[s] + sizes[s]] = block(s, 0, sizes[s])
    out = np.full(want.size, 255, np.uint8)
    if in_place:
        out[offs[r]:offs[r] + sizes[r]] = block(r, 0, sizes[r])
        comm.Allgatherv(gloocy.IN_PLACE, [out, (sizes, offs)])
    else:
        comm.Allgatherv(block(r, 0, sizes[r]), [out, (sizes, offs)])
    return bool(np.array_equal(out, want))


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("cma", ["0", "1"])
def test_streamed_allgather_and_alltoall_match_numpy(n, cma):
    """Every copy into the result streamed (threshold 0), through slots of
    8 KiB (pieces that start anywhere in a line) or by single copies: blocks
    shorter than a page (plain copies), odd, and several slots long."""
    env = {**SHM, **STREAM_ALWAYS, **SMALL_SLOTS, **CMA_TINY, "GLOOCY_CMA": cma,
           "GLOOCY_ALGORITHM_ALLTOALL": "shm", "GLOOCY_ALGORITHM_ALLGATHER": "shm"}
    with World(n, env=env) as w:
        for b in A2A_BLOCKS:
            for in_place in (False, True):
                got = w.run(r_alltoallv, [[b] * n] * n, in_place)
                assert all(ok for ok, _ in got), (b, in_place, got)
            sizes = [b + 13 * s for s in range(n)]
            for in_place in (False, True):
                got = w.run(r_allgatherv, sizes, in_place)
                assert all(got), (sizes, in_place, got)
        ragged = [[(s * 7919 + d * 4099) % 20000 * (s != d or s == 1)
                   for d in range(n)] for s in range(n)]
        got = w.run(r_alltoallv, ragged, False)
        assert all(ok for ok, _ in got), got
