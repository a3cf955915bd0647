"""Hundreds of thread ranks of one process over TCP: the rank threads take
the GIL back through the queue of _gil_queue.h (a process of more than 16
contexts) and sleep a slice per 64 ranks between unwoken looks
(_engine.pxi, sleep_slice_ms). The results are checked against NumPy, the
connections against the peers recursive doubling needs, and a late rank
still gets every other rank a timeout at the communicator's deadline."""

import time

import numpy as np

import gloocy
from gloocy.errors import CollectiveTimeout
from gloocy.testing import World

SIZE = 256                        # a power of two: recursive doubling's peers
                                  # are rank ^ 2**k, log2(SIZE) of them


def test_barrier_and_allreduce_of_256_thread_ranks_over_tcp():
    data = np.random.default_rng(19).integers(-1000, 1000, (SIZE, 40))

    def run(comm):
        r = comm.Get_rank()
        comm.Barrier()
        x = data[r].copy()
        comm.Allreduce(gloocy.IN_PLACE, x)
        y = data[r].astype(np.float64)
        comm.Allreduce(gloocy.IN_PLACE, y, op=gloocy.MAX)
        return x, y, sorted(comm._ctx.links.connected)

    with World(SIZE, transport="tcp", timeout=240.0) as w:
        results = w.run(run)
    want_sum, want_max = data.sum(axis=0), data.max(axis=0).astype(np.float64)
    bound = 2 * (SIZE.bit_length() - 1) + 2
    for r, (x, y, peers) in enumerate(results):
        np.testing.assert_array_equal(x, want_sum)
        np.testing.assert_array_equal(y, want_max)
        assert peers == sorted(r ^ (1 << k) for k in range(SIZE.bit_length() - 1)), r
        assert len(peers) <= bound


def test_a_late_rank_times_the_others_out_at_their_deadline():
    """128 ranks (slices of 300 ms for rank threads): rank 7 never calls
    the barrier; every other rank's barrier raises CollectiveTimeout after
    the communicator's 3 s, not a slice or more later."""
    late, deadline = 7, 3.0

    def run(comm):
        if comm.Get_rank() == late:
            return None
        t = time.monotonic()
        try:
            comm.Barrier()
        except CollectiveTimeout as e:
            return time.monotonic() - t, str(e)
        return time.monotonic() - t, "no error"

    with World(128, transport="tcp", timeout=120.0, comm_timeout=deadline) as w:
        results = w.run(run)
    for r, got in enumerate(results):
        if r == late:
            continue
        took, why = got
        assert why != "no error", r
        # the deadline, and a generous margin for a loaded 2-core machine,
        # well under the 1 s slice it would take to oversleep it twice
        assert deadline - 0.05 <= took < deadline + 1.5, (r, took, why)
