"""The node exchanges' steps carry whole chunks (issue 16): a slot holds
its chunk and, past it, room for the head of an alltoallv (node_headroom),
so that a stream of k chunks takes k steps, not k + 1 for the head's bytes.
Through slots of 8 KiB, no single copies, N = 2 and 3, against NumPy; the
step count is read from the node (Node.step)."""

import numpy as np
import pytest

from gloocy.testing.processes import ProcessWorld as World

CHUNK = 8192
SLOTS_ONLY = {"GLOOCY_TRANSPORT": "shm", "GLOOCY_SHM_CHUNK_BYTES": CHUNK,
              "GLOOCY_CMA_MIN_BYTES": 1 << 40, "GLOOCY_ALGORITHM_ALLTOALL": "shm",
              "GLOOCY_ALGORITHM_GATHER": "shm", "GLOOCY_ALGORITHM_SCATTER": "shm"}


def block(s, d, n):
    """What rank s sends rank d: n bytes no other block has."""
    return ((np.arange(n, dtype=np.int64) * (2 * s + 5) + 3 * d + n) % 249).astype(np.uint8)


def r_alltoallv(comm, counts):
    """Alltoallv with counts[s][d] bytes from rank s to rank d: (right
    against the senders' blocks, node steps the call took)."""
    r, size = comm.rank, comm.size
    send = np.concatenate([block(r, d, counts[r][d]) for d in range(size)])
    want = np.concatenate([block(s, r, counts[s][r]) for s in range(size)])
    out = np.full(want.size, 255, np.uint8)
    before = comm._ctx.node.step
    comm.Alltoallv([send, counts[r]], [out, [counts[s][r] for s in range(size)]])
    return bool(np.array_equal(out, want)), comm._ctx.node.step - before


def r_gatherv_scatterv(comm, sizes):
    """Gatherv to root 0 of sizes[s] bytes from rank s, then Scatterv of
    the result back: (both right, node steps of each)."""
    r = comm.rank
    mine = block(r, 0, sizes[r])
    out = np.full(sum(sizes), 255, np.uint8) if r == 0 else None
    before = comm._ctx.node.step
    comm.Gatherv(mine, [out, sizes] if r == 0 else None, root=0)
    gathered = comm._ctx.node.step - before
    ok = r != 0 or bool(np.array_equal(out, np.concatenate(
        [block(s, 0, sizes[s]) for s in range(comm.size)])))
    back = np.full(sizes[r], 255, np.uint8)
    before = comm._ctx.node.step
    comm.Scatterv([out, sizes] if r == 0 else None, back, root=0)
    return ok and bool(np.array_equal(back, mine)), gathered, comm._ctx.node.step - before


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_an_alltoall_of_k_chunks_a_stream_takes_k_steps(n, chunks):
    """Each rank's stream (its blocks for the others) is `chunks` x CHUNK
    bytes; one byte more takes one step more."""
    per = chunks * CHUNK // (n - 1)
    with World(n, env=SLOTS_ONLY) as w:
        got = w.run(r_alltoallv, [[per] * n] * n)
        assert got == [(True, chunks)] * n, got
        got = w.run(r_alltoallv, [[per + (d == (s + 1) % n) for d in range(n)]
                                  for s in range(n)])
        assert got == [(True, chunks + 1)] * n, got


@pytest.mark.parametrize("n", [2, 3])
def test_uneven_alltoallv_through_whole_chunk_steps(n):
    """Ragged blocks (some empty, the longest stream 2.5 chunks): every
    rank takes as many steps as the longest stream needs chunks."""
    counts = [[(s * 5003 + d * 3001) % 9000 * (s != d or s == 1) for d in range(n)]
              for s in range(n)]
    longest = max(sum(row) - row[s] for s, row in enumerate(counts))
    with World(n, env=SLOTS_ONLY) as w:
        got = w.run(r_alltoallv, counts)
    assert got == [(True, -(-longest // CHUNK))] * n, (got, longest)


@pytest.mark.parametrize("n", [2, 3])
def test_gatherv_and_scatterv_of_whole_chunks(n):
    """Blocks of exactly two chunks: two steps each way (the root's scatter
    stream holds the others' blocks end to end)."""
    sizes = [2 * CHUNK] * n
    with World(n, env=SLOTS_ONLY) as w:
        got = w.run(r_gatherv_scatterv, sizes)
    scatter_steps = 2 * (n - 1)
    assert [ok for ok, _, _ in got] == [True] * n, got
    assert {g for _, g, _ in got} == {2}, got
    assert {s for _, _, s in got} == {scatter_steps}, got
