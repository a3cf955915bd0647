"""Start-up of many rank threads in one process over the TCP store
(issue 19): rank 0's size is asked of the store by one rank thread for all
those waiting with it, and when rank 0 never comes each rank is told so
within its own timeout (not one timeout after another)."""

import threading
import time

import numpy as np
import pytest

import gloocy
from gloocy.errors import RendezvousTimeout
from gloocy.rendezvous import TCPStore, TCPStoreServer
from store_queue import queued

SECRET = b"z" * 32


class CountingGets:
    """A store client that counts its gets of one key."""

    def __init__(self, inner, key, seen):
        self.inner, self.key, self.seen = inner, key, seen

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name != "get":
            return attr

        def get(key, *args, **kwargs):
            if key == self.key:
                self.seen.append(key)
            return attr(key, *args, **kwargs)
        return get


@pytest.fixture
def tcp(monkeypatch):
    monkeypatch.setenv("GLOOCY_TRANSPORT", "tcp")


def test_the_size_is_asked_once_for_the_ranks_waiting(tcp):
    size, job = 6, "size-once"
    seen = []
    with TCPStoreServer(secret=SECRET) as server:
        stores = [CountingGets(TCPStore(server.host, server.port, secret=SECRET,
                                        timeout=60.0), f"{job}/size", seen)
                  for _ in range(size)]
        comms, errors = [None] * size, []

        def rank_main(r):
            try:
                if r == 0:        # once the others all wait for its size
                    queued(stores[0].url, f"{job}/size", size - 2)
                comms[r] = gloocy.connect(r, size, stores[r], secret=SECRET, job=job,
                                          timeout=60.0)
                x = np.full(3, r, dtype=np.int64)
                comms[r].Allreduce(gloocy.IN_PLACE, x)
                assert (x == size * (size - 1) // 2).all()
            except BaseException as e:    # noqa: B036 -- shown below
                errors.append(e)
        threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        try:
            assert not errors, errors
            assert seen == [f"{job}/size"]      # one get for the five ranks
        finally:
            for c in comms:
                if c is not None:
                    c.Free()
            for s in stores:
                s.close()


def test_a_missing_rank_0_is_named_within_each_rank_s_timeout(tcp):
    size, job, timeout = 7, "no-rank-0", 2.0
    with TCPStoreServer(secret=SECRET) as server:
        stores = [TCPStore(server.host, server.port, secret=SECRET, timeout=60.0)
                  for _ in range(size)]
        errors, ended = [None] * size, [None] * size
        began = time.monotonic()

        def rank_main(r):
            try:
                gloocy.connect(r, size, stores[r], secret=SECRET, job=job,
                               timeout=timeout)
            except BaseException as e:    # noqa: B036 -- checked below
                errors[r] = e
            ended[r] = time.monotonic() - began
        threads = [threading.Thread(target=rank_main, args=(r,))
                   for r in range(1, size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for s in stores:
            s.close()
    for r in range(1, size):
        assert isinstance(errors[r], RendezvousTimeout), errors[r]
        assert f"rank {r}: rank 0 did not say the world's size" in str(errors[r])
    # one timeout each, side by side: six in a row would take 12 s
    assert max(ended[1:]) < 3 * timeout + 2.0, ended
