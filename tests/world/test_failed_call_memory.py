"""A call that fails leaves no pair pointing at its freed transfers.

A collective's transfers (Xfer) live in its own frames or in memory it
frees as it returns; the pairs they were posted on forget them in fail().
Until then nothing may read them. These tests make a late peer's frame
arrive while the failed rank traces its timeout (it reads the pairs for
TRACE_GRACE): a pair still holding the freed receive walked it (Pair.claim)
and crashed (Bus error, SIGSEGV). glibc's MALLOC_PERTURB_ fills freed memory
(with its per-thread cache off: cached chunks are not filled), so a walk
into it follows a wild pointer at once instead of by chance under load.
"""

import time

import numpy as np
import pytest

import gloocy
from conftest import TRANSPORT_ENV
from gloocy.testing.processes import ProcessWorld as World

TRANSPORTS = ("shm", "tcp", "mix")

LATE_S = 1.1        # the late rank comes this long after the barrier ...
TIMEOUT_S = 1.0     # ... just after the other rank's call timed out, while
                    # it listens for reasons (TRACE_GRACE, 0.3 s)


@pytest.fixture
def world(transport):
    env = dict(TRANSPORT_ENV[transport], MALLOC_PERTURB_="165",
               GLIBC_TUNABLES="glibc.malloc.tcache_count=0")
    w = World(2, env=env)
    yield w
    w.close()


def late_root(comm, collective):
    """Rank 0 (root) comes late; rank 1's receive from it, in memory freed
    when its call timed out, was still posted when rank 0's frame came."""
    comm.Barrier()
    x = np.arange(8, dtype=np.float64)
    got = np.zeros(4)
    if comm.rank == 0:
        time.sleep(LATE_S)
    try:
        if collective == "scatter":
            comm.Scatter(x if comm.rank == 0 else None, got, root=0,
                         timeout=TIMEOUT_S if comm.rank else 30.0,
                         algorithm="direct")
        else:
            comm.Gather(got, x if comm.rank == 1 else None, root=1,
                        timeout=TIMEOUT_S if comm.rank else 30.0,
                        algorithm="direct")
    except gloocy.errors.GloocyError as e:
        return type(e).__name__, str(e), getattr(e, "culprit", None)
    return "no error", "", None


@pytest.mark.parametrize("collective", ["scatter", "gather"])
def test_a_timed_out_receive_is_forgotten_before_a_late_frame_comes(world, collective):
    """Rank 1 times out receiving from rank 0, whose frame comes during
    rank 1's trace of the timeout: rank 1 names rank 0 (it lived to tell),
    rank 0 either finished its send or was told of rank 1's timeout."""
    got = world.run(late_root, collective, timeout=60)
    name, message, culprit = got[1]
    assert name == "CollectiveTimeout", message
    assert "timed out waiting for rank(s) 0" in message, message
    assert culprit == 0, message
    name0, message0, _ = got[0]
    assert name0 in ("no error", "CollectiveTimeout"), message0
    if name0 == "CollectiveTimeout":
        assert "stopped when rank 1 timed out" in message0, message0
