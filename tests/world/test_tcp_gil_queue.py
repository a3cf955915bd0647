"""The TCP transport's waits without the GIL (a dial's handshake, wait_fd)
take it back through _gil_queue.h's queue in a process of 16+ rank
connectors: _tcp counts them (lazy.Connector), and the count must come
back down as ranks end, or the queue would stay on (or off) wrongly."""

import numpy as np

import gloocy
from gloocy.testing import World
from gloocy.transport import _tcp

SIZE = 20                         # above the queue's threshold (16)


def test_rank_connectors_are_counted_while_they_live():
    before = _tcp.gil_queue_ranks(0)
    data = np.random.default_rng(7).integers(-500, 500, (SIZE, 9))

    def run(comm):
        comm.Barrier()                # every rank's connector is up
        live = _tcp.gil_queue_ranks(0)
        x = data[comm.Get_rank()].copy()
        comm.Allreduce(gloocy.IN_PLACE, x)   # dials through the queue
        return live, x

    with World(SIZE, transport="tcp", timeout=120.0) as w:
        results = w.run(run)
    for live, x in results:
        assert live == before + SIZE
        np.testing.assert_array_equal(x, data.sum(axis=0))
    assert _tcp.gil_queue_ranks(0) == before
