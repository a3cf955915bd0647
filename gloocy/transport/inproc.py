"""Pairs between ranks that live in one process (rank threads: gloocy.testing's
thread worlds, bench/scale_world.py), made in memory: no socket, no
handshake, no file descriptor (see _shm.pyx's inproc_pair).

Every open Connector of this process is listed here by (job tag, rank). The
first of two such ranks to want their pair makes both ends at once, with
both Connectors' locks held (the lower rank's first), and hands the peer's
end over as a pair the peer dialed (Connector.arrive's path). So a pair is
made once even when both ranks want it at the same moment.

GLOOCY_INPROC_PAIRS=0 turns this off (such ranks then connect as ranks of
one host do: TCP, then shared memory); GLOOCY_TRANSPORT=tcp and ibverbs
do too. A forked child starts with an empty list: its parent's ranks are
not in it.
"""

import hmac
import os
import threading
import weakref

from gloocy.transport import shm
from gloocy.transport._shm import Waker, inproc_pair

__all__ = ["enabled", "register", "unregister", "connector_of", "make_pair", "new_waker"]

_MODES = ("auto", "shm")          # GLOOCY_TRANSPORT modes that take shared memory
_live = {}                        # (tag, rank) -> weakref to its Connector
_lock = threading.Lock()


def _forget_after_fork():
    global _lock
    _live.clear()
    _lock = threading.Lock()      # (it may have been held by another thread)


os.register_at_fork(after_in_child=_forget_after_fork)


def enabled(mode):
    """Whether ranks under GLOOCY_TRANSPORT `mode` pair up in memory with
    the ranks of their process (GLOOCY_INPROC_PAIRS, default 1)."""
    text = os.environ.get("GLOOCY_INPROC_PAIRS", "1")
    if text not in ("0", "1"):
        raise ValueError(f"GLOOCY_INPROC_PAIRS={text!r}: must be 0 or 1")
    return text == "1" and mode in _MODES


def register(connector):
    """List `connector` (open, of this process) for its job's other ranks here."""
    with _lock:
        _live[connector.tag, connector.rank] = weakref.ref(connector)


def unregister(connector):
    with _lock:
        ref = _live.get((connector.tag, connector.rank))
        if ref is not None and ref() in (connector, None):
            del _live[connector.tag, connector.rank]


def connector_of(connector, peer):
    """The open Connector of rank `peer` of `connector`'s job in this
    process, if it takes in-process pairs and claims our host (same
    secret, same host id: GLOOCY_HOST_ID may make ranks of one process
    stand for several hosts), else None."""
    with _lock:
        ref = _live.get((connector.tag, peer))
    other = ref() if ref is not None else None
    if (other is None or other is connector or other.inproc is None
            or other.host_frame != connector.host_frame      # (GLOOCY_HOST_ID)
            or not hmac.compare_digest(other.secret, connector.secret)):
        return None
    return other


def make_pair(ours, theirs, rings):
    """(our end, their end) of the pair between the ranks of Connectors
    `ours` and `theirs`, over rings of `rings` bytes (a full ring instead
    where the process still has one of shm.FULL_PAIRS to spend, as between
    processes)."""
    full = (rings < shm.DEFAULT_RING and not shm._ring_forced() and shm._take_full())
    try:
        return inproc_pair(shm.DEFAULT_RING if full else rings, ours.rank, theirs.rank,
                           ours.inproc, theirs.inproc)
    except BaseException:
        if full:
            shm._give_back_full()
        raise


def new_waker():
    """A rank's Waker (its eventfd is made only if it sleeps in poll(2))."""
    return Waker()
