"""Watching the ranks of one process queue for a store key (shared_wait:
one asks the store, the others wait for its answer)."""

import time

from gloocy.rendezvous import shared_wait


def queued(url, key, n, within=30.0):
    """Until n ranks wait behind the one asking the store for `key`."""
    until = time.monotonic() + within
    while time.monotonic() < until:
        with shared_wait._lock:
            turns = shared_wait._pending.get((url, key))
            if turns is not None and len(turns.waiting) == n:
                return
        time.sleep(0.01)
    raise AssertionError(f"{n} ranks did not queue for {key}")
