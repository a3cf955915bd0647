"""The rank threads of one process at start-up: their store operations
one rank at a time, and one store wait for all, after which they go on in
turn.

When every rank of a job waits for one key (rank 0's go at start-up) and
hundreds of them are threads of one process (a simulated world), they
would all be woken at once by their store replies and queue for the GIL
together. CPython wakes each thread queued for the GIL every switch
interval (5 ms), and those wake-ups, fighting over the GIL's own mutex,
made 512 rank threads take seconds to get through a millisecond of work
each (4,096 ranks in 8 processes: 14 million context switches, 100+ CPU
seconds in rendezvous; bench/results/scale/rendezvous-cpu.md).

So one rank of the process asks the store; the others wait on locks of
their own (no GIL wanted while they wait) and are let go one at a time,
each by the one before once it is through the work that follows
(`pass_on`). Likewise the store operations that wait for no other rank
(`one_at_a_time`): the ranks started together queue on a lock, not for
the GIL. Stores other than the TCP store's client (those with no `url`)
are used by every rank as before.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque

__all__ = ["get_once", "nothing_to_pass", "one_at_a_time"]

_lock = threading.Lock()
_pending = {}       # (store url, key) -> _Turns whose value one rank is fetching
_turns = {}         # store url -> the lock of one_at_a_time


@contextlib.contextmanager
def one_at_a_time(store, timeout=None):
    """A context in which one rank thread of this process at a time uses
    `store` (its url's). Only for operations that wait for no other rank
    (one that did would hold up the ranks queued behind it). After
    `timeout` seconds of queueing (default: the store's) a rank goes ahead
    unqueued."""
    url = getattr(store, "url", None)
    if not isinstance(url, str):
        yield
        return
    with _lock:
        turn = _turns.get(url)
        if turn is None:
            turn = _turns[url] = threading.Lock()
    if timeout is None:
        timeout = getattr(store, "timeout", None) or 300.0
    mine = turn.acquire(timeout=timeout)
    try:
        yield
    finally:
        if mine:
            turn.release()


class _Turns:
    __slots__ = ("value", "waiting")

    def __init__(self):
        self.value = None         # the value, once fetched (None: fetch it yourself)
        self.waiting = deque()    # the locks of the ranks waiting, first come first


def nothing_to_pass():
    """The pass_on() of a rank no other waits behind."""


def get_once(store, key, fetch, deadline):
    """(value, pass_on): `fetch()` (the store's value of `key`) asked by
    one rank thread of this process for all those waiting with it. Every
    caller must call pass_on() once through its work that follows (even if
    that fails): it lets the next waiting rank go. A rank whose wait
    reaches `deadline` asks the store itself (fetch() then names the
    failure)."""
    url = getattr(store, "url", None)
    if not isinstance(url, str):
        return fetch(), nothing_to_pass
    k = (url, key)
    with _lock:
        turns = _pending.get(k)
        if turns is None:
            turns = _pending[k] = _Turns()
            mine = None
        else:
            mine = threading.Lock()
            mine.acquire()
            turns.waiting.append(mine)
    pass_on = _passer(turns)
    if mine is None:                  # we ask the store
        try:
            value = fetch()
        except BaseException:
            with _lock:
                del _pending[k]
            pass_on()                 # the next one asks for itself
            raise
        with _lock:
            turns.value = value
            del _pending[k]           # later comers ask the store (it has the key)
        return value, pass_on
    if not mine.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
        with _lock:
            try:
                turns.waiting.remove(mine)
                handed = False
            except ValueError:        # let go just now: ours is the turn
                handed = True
        if not handed:
            return fetch(), nothing_to_pass
        mine.acquire()
    if turns.value is not None:
        return turns.value, pass_on
    try:
        return fetch(), pass_on
    except BaseException:
        pass_on()
        raise


def _passer(turns):
    """pass_on() for one rank of `turns`: lets the next waiting rank go
    (once, however often it is called)."""
    done = []

    def pass_on():
        if done:
            return
        done.append(True)
        with _lock:
            nxt = turns.waiting.popleft() if turns.waiting else None
        if nxt is not None:
            nxt.release()
    return pass_on
