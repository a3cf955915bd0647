"""Single-copy node allgather (issue 16): each rank copies its own block
into its result, then reads the others' blocks from theirs with
process_vm_readv (gloocy/_cma.pxi). With the default
thresholds (blocks from 512 KiB where every rank of the host has a CPU,
from 4 MiB where they outnumber the CPUs) and with GLOOCY_CMA_MIN_BYTES; out of
place, in place and ragged (Allgatherv), send buffers overwritten as soon
as the call returns, one rank unwilling (GLOOCY_CMA=0 on it alone) and one
refused by the kernel. Every result is checked against the blocks the
senders made with NumPy.
"""

import os

import numpy as np
import pytest

import gloocy
from gloocy.testing.processes import ProcessWorld as World

from test_node_derived import _refuse_cross_memory_attach
from test_node_large import r_allgatherv

SHM = {"GLOOCY_TRANSPORT": "shm"}
SHM_ALLGATHER = {**SHM, "GLOOCY_ALGORITHM_ALLGATHER": "shm"}
BLOCK_MIN = 512 << 10          # NODE_ALLGATHER_CMA_BLOCK
CROWDED_BLOCK_MIN = 4 << 20    # NODE_ALLGATHER_CROWDED_BLOCK


def r_allgathers(comm, totals):
    """An Allgather of each of `totals` gathered bytes (float32 blocks)
    against NumPy: [(right, single copies so far)]."""
    got = []
    for total in totals:
        count = total // comm.size // 4
        mine = np.arange(count, dtype=np.float32) * (comm.rank + 2) + comm.rank
        want = np.concatenate([np.arange(count, dtype=np.float32) * (s + 2) + s
                               for s in range(comm.size)])
        out = np.full(want.size, -1, np.float32)
        comm.Allgather(mine, out)
        got.append((bool(np.array_equal(out, want)), comm._ctx.node.cma_calls))
    return got


@pytest.mark.parametrize("n", [2, 3])
def test_allgather_copies_once_from_512_kib_blocks_where_each_rank_has_a_cpu(
        n, monkeypatch):
    """With the default thresholds an allgather copies once from blocks of
    512 KiB where every rank of the host has a CPU (a page short: not),
    from 4 MiB blocks where they outnumber the CPUs; GLOOCY_CMA_MIN_BYTES
    sets the block size from which it does (1 GiB: none here). Right on
    every path."""
    from gloocy.waiting import usable_cpus
    monkeypatch.delenv("GLOOCY_CMA_MIN_BYTES", raising=False)
    block = BLOCK_MIN if n <= usable_cpus() else CROWDED_BLOCK_MIN
    totals = [n * (block - 4096), n * block, n * (block + 4096), 6 << 20]
    for env, threshold in (({}, n * block),
                           ({"GLOOCY_CMA_MIN_BYTES": str(1 << 30)}, n << 30),
                           ({"GLOOCY_CMA_MIN_BYTES": str(block + 4096)},
                            n * (block + 4096))):
        once = [t // n // 4 * 4 * n >= threshold for t in totals]
        want = [int(sum(once[:i + 1])) for i in range(len(once))]
        with World(n, env={**SHM_ALLGATHER, **env}) as w:
            got = w.run(r_allgathers, totals, timeout=90)
        for rank_got in got:
            assert [ok for ok, _ in rank_got] == [True] * len(totals), (env, got)
            assert [c for _, c in rank_got] == want, (env, got, usable_cpus())


# Single copies from 64 KiB gathered: blocks of odd sizes, one empty, some
# shorter than a page, ragged across the ranks.
CMA_SMALL = {"GLOOCY_CMA_MIN_BYTES": str(64 << 10)}
RAGGED = [[70001, 70001 + 4096], [0, 200003], [300007, 4095], [1 << 20, (1 << 20) + 1]]


@pytest.mark.parametrize("n", [2, 3])
def test_single_copy_allgatherv_at_odd_and_ragged_sizes(n):
    with World(n, env={**SHM_ALLGATHER, **CMA_SMALL}) as w:
        for sizes in RAGGED:
            sizes = (sizes * n)[:n]
            calls0 = w.run(r_cma_calls)
            for in_place in (False, True):
                got = w.run(r_allgatherv, sizes, in_place, timeout=60)
                assert got == [True] * n, (sizes, in_place, got)
            calls = w.run(r_cma_calls)
            assert [b - a for a, b in zip(calls0, calls)] == [2] * n, (sizes, calls)


def r_cma_calls(comm):
    return comm._ctx.node.cma_calls


def r_scribbled_send_buffers(comm, nbytes, calls):
    """`calls` allgathers of nbytes-byte blocks, each rank overwriting its
    send buffer the moment its call returns (a slower rank still reading
    it would get the scribble): the calls whose result was wrong."""
    r, n = comm.rank, comm.size
    want = np.concatenate([np.full(nbytes, s + 1, np.uint8) for s in range(n)])
    send = np.empty(nbytes, np.uint8)
    out = np.empty(n * nbytes, np.uint8)
    wrong = []
    for i in range(calls):
        send[:] = r + 1
        out[:] = 0
        comm.Allgather(send, out)
        send[:] = 255
        if not np.array_equal(out, want):
            wrong.append(i)
    return wrong, comm._ctx.node.cma_calls


def test_send_buffers_overwritten_after_the_call_never_reach_a_result():
    with World(2, env={**SHM_ALLGATHER, **CMA_SMALL}) as w:
        got = w.run(r_scribbled_send_buffers, 1 << 20, 40, timeout=90)
    for wrong, calls in got:
        assert wrong == [] and calls == 40, got


def r_unwilling_or_refused(comm, how, nbytes):
    """Rank 1 unwilling (GLOOCY_CMA=0 as its segment is made) or refused
    by the kernel (seccomp): allgathers out of place and in place on a Dup
    (right each, node.cma, single copies)."""
    if comm.rank == 1:
        if how == "unwilling":
            os.environ["GLOOCY_CMA"] = "0"
        else:
            _refuse_cross_memory_attach()
    c = comm.Dup()
    try:
        c.Barrier()                      # its segment, with rank 1's setting
        oks = []
        for in_place in (False, True, False):
            sizes = [nbytes + 13 * s for s in range(c.size)]
            oks.append(r_allgatherv(c, sizes, in_place))
        return oks, c._ctx.node.cma, c._ctx.node.cma_calls
    finally:
        c.Free()


@pytest.mark.parametrize("how", ["unwilling", "refused"])
def test_allgather_falls_back_to_the_slots_with_its_own_block_in_place(how):
    with World(3, env={**SHM_ALLGATHER, **CMA_SMALL}) as w:
        got = w.run(r_unwilling_or_refused, how, (1 << 20) + 1, timeout=90)
    for oks, cma, calls in got:
        assert oks == [True] * 3 and cma == -1 and calls == 0, got
