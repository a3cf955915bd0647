"""Single-copy node alltoall (issue 16): past its first step through the
slots, each rank reads its block from every peer's send buffer with
process_vm_readv (gloocy/_cma.pxi). Here with the default thresholds (no
GLOOCY_CMA_MIN_BYTES): streams just below, at and past the segment's
threshold (Node.alltoall_cma_min), N = 2, 3 and 4 (4 ranks on this 2-CPU machine
outnumber the CPUs), the world and derived communicators (Split by
parity, Split_type), in place, a non-contiguous datatype (packed, then the
same path), a rank killed mid-copy, and the fallback when the kernel
refuses cross-memory attach on one rank. Every result is checked against
the blocks the senders made with NumPy.
"""

import os
import time

import numpy as np
import pytest

import gloocy
from gloocy import MPI, datatypes
from gloocy.testing.processes import ProcessWorld as World

from test_node_derived import _refuse_cross_memory_attach
from test_node_large import r_alltoallv, run_killing

SHM = {"GLOOCY_TRANSPORT": "shm"}


def _alltoall(comm, b, in_place):
    """One Alltoall of b-byte blocks: (right against the senders' blocks,
    single copies made)."""
    before = comm._ctx.node.cma_calls
    ok, after = r_alltoallv(comm, [[b] * comm.size] * comm.size, in_place)
    return ok, after - before


def r_around_threshold(comm, how):
    """Alltoalls whose streams (a rank's blocks for the others, end to
    end) are 64 bytes short of the segment's threshold, at it and a page
    and a byte past it, in and out of place, on the world or a derived
    communicator: [(stream bytes, in place, right, copied once)]."""
    c = comm
    if how == "parity":
        c = comm.Split(comm.rank % 2, comm.rank)
    elif how == "shared":
        c = comm.Split_type(MPI.COMM_TYPE_SHARED, key=-comm.rank)
    try:
        c.Barrier()                    # its node segment is made at a first call
        n, at = c.size, c._ctx.node.alltoall_cma_min
        got = []
        for stream in (at - 64, at, at + 4097):
            b = -(-stream // (n - 1))
            for in_place in (False, True):
                got.append((b * (n - 1) >= at, in_place) + _alltoall(c, b, in_place))
        return got
    finally:
        if c is not comm:
            c.Free()


def _check_threshold(got):
    for rows in got:
        assert rows, got
        for past, in_place, ok, once in rows:
            assert ok, (past, in_place, got)
            assert once == (1 if past else 0), (past, in_place, got)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_alltoall_copies_once_from_the_default_threshold(n):
    with World(n, env=SHM) as w:
        _check_threshold(w.run(r_around_threshold, "world", timeout=90))


@pytest.mark.parametrize("how", ["parity", "shared"])
def test_alltoall_on_derived_communicators_copies_once(how):
    # 4 ranks: the parity split makes two communicators of 2, Split_type
    # one of 4 (ranks reversed); each has a node segment of its own
    with World(4, env=SHM) as w:
        _check_threshold(w.run(r_around_threshold, how, timeout=90))


def r_vector_alltoall(comm, items):
    """Alltoall of `items` items per block of a vector type (every other
    int32: half the buffer is gaps, packed before the exchange): (right,
    copied once, gaps untouched)."""
    r, n = comm.rank, comm.size
    vec = datatypes.INT32_T.Create_vector(1, 1, 2).Create_resized(0, 8).Commit()
    send = np.full(2 * items * n, -1, np.int32)
    send[0::2] = np.concatenate([np.arange(items, dtype=np.int32) * (r + 1) + d * 7
                                 for d in range(n)])
    out = np.full_like(send, -2)
    before = comm._ctx.node.cma_calls
    comm.Alltoall([send, items, vec], [out, items, vec])
    want = np.concatenate([np.arange(items, dtype=np.int32) * (s + 1) + r * 7
                           for s in range(n)])
    vec.Free()
    return (bool(np.array_equal(out[0::2], want)), comm._ctx.node.cma_calls - before,
            bool((out[1::2] == -2).all()))


def test_non_contiguous_alltoall_is_packed_and_copies_once():
    # 3 ranks, 512 Ki items a block: a 2 MiB block packed, a 4 MiB stream
    with World(3, env=SHM) as w:
        got = w.run(r_vector_alltoall, 512 << 10, timeout=90)
    assert got == [(True, 1, True)] * 3, got


def r_alltoall_until_lost(comm, nbytes, started):
    """Large alltoalls until a peer is lost (the file `started` made after
    the first): (rank named, when, single-copy calls)."""
    n = comm.size
    send = np.zeros(nbytes, np.uint8)
    out = np.empty_like(send)
    try:
        while True:
            comm.Alltoall(send, out)
            if comm.rank == 0 and not os.path.exists(started):
                open(started, "w").close()
    except gloocy.errors.PeerLostError as e:
        return e.rank, time.monotonic(), comm._ctx.node.cma_calls


def test_a_rank_killed_during_a_single_copy_alltoall_is_named(tmp_path):
    size, nbytes = 3, 48 << 20         # 32 MiB streams: most of a call copies once
    started = str(tmp_path / "started")
    with World(size, env=SHM) as w:
        got, killed_at = run_killing(w, 1, started, r_alltoall_until_lost, nbytes, started)
    for rank in (0, 2):                    # the survivors
        lost, noticed, calls = got[rank]
        assert lost == 1, got
        assert calls >= 1, got             # single copies ran before
        assert 0 <= noticed - killed_at[0] < 3.0, got


def r_refused_alltoall(comm, b):
    """Rank 1 is refused process_vm_readv (seccomp): an Alltoall past the
    threshold, in place and not, and a ragged Alltoallv: ([right], cma,
    single copies)."""
    if comm.rank == 1:
        _refuse_cross_memory_attach()
    n = comm.size
    counts = [[(s * 7919 + d * 4099) % 3 * b // 2 for d in range(n)] for s in range(n)]
    oks = [_alltoall(comm, b, False)[0], _alltoall(comm, b, True)[0],
           r_alltoallv(comm, counts, False)[0]]
    return oks, comm._ctx.node.cma, comm._ctx.node.cma_calls


def test_refused_cross_memory_attach_still_alltoalls_right():
    # 3 ranks, 1 MiB + 1 blocks: streams of 2 MiB + 2, past the threshold
    with World(3, env=SHM) as w:
        got = w.run(r_refused_alltoall, (1 << 20) + 1, timeout=90)
    for oks, cma, calls in got:
        assert oks == [True] * 3 and cma == -1 and calls == 0, got
