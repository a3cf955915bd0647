"""Small bcasts on one host run over the shared-memory pairs (a binomial
tree) beside the node segment, which the other collectives go through
(gloocy/_node.pxi: node_pair_call, node_watch, node_check_pair_calls).
When ranks call a tree bcast and a collective through the segment at the
same point, each side must see the other's call at once, not wait to the
deadline, and every rank's MismatchError must name both calls: whether the
bcast's root or one of its readers is the odd one out, at N = 2, 3, 4,
against a barrier, an allreduce, object collectives and a bcast large
enough to go through the segment.
"""

import time

import numpy as np
import pytest

import gloocy
from gloocy import _core
from gloocy.testing.processes import ProcessWorld as World

SHM = {"GLOOCY_TRANSPORT": "shm"}
TIMEOUT = 60.0              # the calls' deadline: a mismatch must come long before
PROMPT = 15.0               # generous for a loaded 2-core machine, far below TIMEOUT
SMALL = _core.ALGORITHM_THRESHOLDS["node_bcast_min"] // 2
LARGE = _core.ALGORITHM_THRESHOLDS["node_bcast_min"]

# The odd rank's call through the segment: (what it does, how messages name it)
OTHERS = {
    "barrier": (lambda comm, x: comm.Barrier(timeout=TIMEOUT), "barrier"),
    "allreduce": (lambda comm, x: comm.Allreduce(gloocy.IN_PLACE, x, timeout=TIMEOUT),
                  "allreduce"),
    "bcast-large": (lambda comm, x: comm.Bcast(np.zeros(LARGE, np.uint8), root=0,
                                               timeout=TIMEOUT), "bcast"),
    "objects": (lambda comm, x: comm.allreduce(comm.rank), "allreduce of objects"),
}


def r_tree_against_segment(comm, odd, other):
    """Every rank but `odd` bcasts SMALL bytes from root 0 (the tree over the
    pairs); `odd` makes call `other` through the segment, all after a
    barrier. A rank whose call ends then calls Barrier. Each rank: (error
    class, message, seconds to it, the sequence number of the calls after
    the barrier, the algorithm of its bcast, which call raised)."""
    seq = comm._ctx.seq + 1
    x = np.ones(SMALL // 8)
    t0 = time.monotonic()
    where = "before"        # a rank slow to leave the barrier may hear of it there
    try:
        # over the pairs: a barrier in the segment would leave "shm" in
        # last_algorithm for a bcast that raises before it records its choice
        comm.Barrier(timeout=TIMEOUT, algorithm="recursive_doubling")
        where = "call"
        if comm.rank == odd:
            OTHERS[other][0](comm, x)
        elif other == "objects":
            comm.bcast({"a": 1}, root=0)
        else:
            comm.Bcast(x, root=0, timeout=TIMEOUT)
        where = "after"
        algorithm = comm._ctx.last_algorithm      # the call's, not the barrier's
        comm.Barrier(timeout=TIMEOUT)
    except gloocy.errors.GloocyError as e:
        error, message = type(e).__name__, str(e)
    else:
        error, message = "no error", ""
    if where != "after":
        # set as a bcast chooses; still the first barrier's if it raised before
        algorithm = comm._ctx.last_algorithm
    return (error, message, time.monotonic() - t0, seq, algorithm, where)


def check(got, odd, other):
    name = OTHERS[other][1]
    assert all(isinstance(g, tuple) for g in got), got     # no rank crashed
    for rank, (error, message, took, seq, algorithm, where) in enumerate(got):
        assert error == "MismatchError", (rank, got)
        assert took < PROMPT, (rank, got)
        if rank != odd and where != "before":        # never the segment
            assert algorithm in ("binomial", "recursive_doubling"), (rank, got)
        # both calls, at the same point: the first call after the barrier
        if other == "objects":
            assert f"bcast of objects #{seq}" in message, (rank, message)
            assert "count=" not in message.partition("; rank ")[0], (rank, message)
        else:
            assert f"bcast #{seq} (count={SMALL}" in message, (rank, message)
        if other == "bcast-large":
            assert f"bcast #{seq} (count={LARGE}" in message, (rank, message)
        else:
            assert f"{name} #{seq}" in message, (rank, message)
    # someone ran the tree and someone else heard of it in the segment
    assert any(g[5] != "before" for g in got), got


@pytest.mark.parametrize("other", sorted(OTHERS))
@pytest.mark.parametrize("size", [2, 3, 4])
def test_the_root_in_the_segment_and_the_readers_in_the_tree(size, other):
    with World(size, env=SHM) as w:
        got = w.run(r_tree_against_segment, 0, other, check=False, timeout=120)
    check(got, 0, other)


@pytest.mark.parametrize("other", sorted(OTHERS))
@pytest.mark.parametrize("size", [2, 3, 4])
def test_a_reader_in_the_segment_and_the_root_in_the_tree(size, other):
    # the last rank: a leaf of the tree (its parent is not the root at 4)
    with World(size, env=SHM) as w:
        got = w.run(r_tree_against_segment, size - 1, other, check=False,
                    timeout=120)
    check(got, size - 1, other)


def r_different_algorithms(comm):
    """Rank 0 bcasts 8 bytes through the segment, the others over the tree
    (each asked for its own algorithm); then a barrier. Each rank's error."""
    x = np.ones(1)
    seq = comm._ctx.seq
    try:
        comm.Bcast(x, root=0, timeout=TIMEOUT,
                   algorithm="shm" if comm.rank == 0 else "binomial")
        comm.Barrier(timeout=TIMEOUT)
    except gloocy.errors.GloocyError as e:
        return type(e).__name__, str(e), seq
    return "no error", "", seq


@pytest.mark.parametrize("size", [2, 3])
def test_ranks_that_ask_for_different_bcast_algorithms_are_told(size):
    with World(size, env=SHM) as w:
        got = w.run(r_different_algorithms, check=False, timeout=120)
    for rank, (error, message, seq) in enumerate(got):
        assert error == "MismatchError", (rank, got)
        assert f"bcast #{seq} (count=8, root=0)" in message, (rank, message)
        assert "asked for different algorithms" in message, (rank, message)
