"""Fault injection for testing recovery code.

Faults at a call -- pass them to ``World.run(..., faults=[...])``; the
rank's communicator is then wrapped so that its `nth` call (1-based) of
method `call` misbehaves (calls on communicators made from it are not
watched):

- ``Kill(rank, call, nth=1)``: the rank dies there. In a process world the
  process is SIGKILLed; in a thread world its connections are dropped
  without a goodbye (what its peers see of a crash) and the thread ends
  with ``RankKilled``. The peers see ``PeerLostError`` naming the rank.
- ``Freeze(rank, call, nth=1, seconds=5.0)``: the rank stops there for
  `seconds` (its peers wait on it; give them a shorter timeout to see
  ``CollectiveTimeout``), then ends with ``RankFrozen``.
- ``Mismatch(rank, call, nth=1, instead="Barrier")``: the rank calls
  `instead` (a method name; Barrier/barrier with no arguments, anything
  else with the call's arguments) in place of `call`, to exercise mismatch
  handling.

Faults on a link -- ``World(size, link_faults=[(a, b), ...])`` routes the
TCP connection between ranks a and b through a proxy in this process (the
world uses the TCP transport; in a process world with ``hosts``, a and b
must be on two hosts, the proxy lives in the bridge's namespace and the
other links stay as they are); ``world.link(a, b)`` is that ``LinkProxy``:
``delay`` (seconds added to every chunk forwarded, either direction; set it
any time) and ``cut(after=0.0)`` (drop both sides now or after `after`
seconds: the two ranks see ``PeerLostError``).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from dataclasses import dataclass

__all__ = ["Kill", "Freeze", "Mismatch", "RankKilled", "RankFrozen",
           "LinkProxy", "FaultyComm"]


class RankKilled(Exception):
    """A thread rank stopped by a Kill fault."""


class RankFrozen(Exception):
    """A rank that a Freeze fault held, once released."""


@dataclass(frozen=True)
class _Fault:
    rank: int
    call: str
    nth: int = 1

    def __post_init__(self):
        if not isinstance(self.rank, int) or self.rank < 0:
            raise ValueError(f"rank: {self.rank!r} is not a rank")
        if not isinstance(self.nth, int) or self.nth < 1:
            raise ValueError(f"nth: {self.nth!r} must be an int >= 1")

    def where(self):
        return f"call {self.nth} of {self.call}"


@dataclass(frozen=True)
class Kill(_Fault):
    def fire(self, comm, method, args, kwargs):
        if os.environ.get("GLOOCY_TESTING_RANK_PROCESS"):
            os.kill(os.getpid(), signal.SIGKILL)
        comm._ctx.links.close(False)        # no goodbye: a crash to the peers
        raise RankKilled(f"rank {self.rank} killed at {self.where()} "
                         "(fault injected)")


@dataclass(frozen=True)
class Freeze(_Fault):
    seconds: float = 5.0

    def fire(self, comm, method, args, kwargs):
        time.sleep(self.seconds)
        raise RankFrozen(f"rank {self.rank} was frozen {self.seconds:g} s at "
                         f"{self.where()} (fault injected)")


@dataclass(frozen=True)
class Mismatch(_Fault):
    instead: str = "Barrier"

    def fire(self, comm, method, args, kwargs):
        other = getattr(comm, self.instead)
        if self.instead in ("Barrier", "barrier"):
            return other()
        return other(*args, **kwargs)


class FaultyComm:
    """`comm` with some of its calls turned into faults; everything else is
    the communicator's own."""

    def __init__(self, comm, faults):
        self._comm = comm
        self._faults = {(f.call, f.nth): f for f in faults}
        self._counts = {}

    def __getattr__(self, name):
        attr = getattr(self._comm, name)
        if not callable(attr) or not any(c == name for c, _ in self._faults):
            return attr

        def call(*args, **kwargs):
            n = self._counts[name] = self._counts.get(name, 0) + 1
            fault = self._faults.get((name, n))
            if fault is None:
                return attr(*args, **kwargs)
            return fault.fire(self._comm, attr, args, kwargs)
        return call

    def __repr__(self):
        return f"<FaultyComm {self._comm!r}>"


def wrap(comm, faults, rank):
    """`comm` itself, or a FaultyComm when some of `faults` are `rank`'s."""
    mine = [f for f in faults or () if f.rank == rank]
    return FaultyComm(comm, mine) if mine else comm


def check_faults(faults, size):
    for f in faults or ():
        if not isinstance(f, _Fault):
            raise TypeError(f"faults: {f!r} is not a Kill, Freeze or Mismatch")
        if f.rank >= size:
            raise ValueError(f"faults: rank {f.rank} is not in a world of {size}")


# -- links -------------------------------------------------------------------

class LinkProxy:
    """Forwards the TCP connection between two ranks; `delay` slows it,
    `cut()` drops it. `lookup()` gives the lower rank's listening address
    ("host:port") when the higher one connects."""

    def __init__(self, low, high, lookup, *, bind="127.0.0.1",
                 make_socket=socket.socket):
        self.low, self.high = low, high
        self.delay = 0.0
        self._lookup = lookup
        # make_socket(family): where the proxy's sockets are made, e.g. in
        # the bridge's network namespace of a world with hosts (a socket
        # stays in the namespace it was made in)
        self._make_socket = make_socket
        self._socks = []
        self._cut = False
        self._lock = threading.Lock()
        self._listener = make_socket(socket.AF_INET)
        self._listener.bind((bind, 0))
        self._listener.listen(4)
        self.address = "%s:%d" % (bind, self._listener.getsockname()[1])
        self._thread = threading.Thread(target=self._accept, daemon=True,
                                        name=f"gloocy-link-{low}-{high}")
        self._thread.start()

    def _accept(self):
        try:
            inner, _ = self._listener.accept()
        except OSError:
            return                        # closed before the ranks connected
        host, _, port = self._lookup().rpartition(":")
        host = host.strip("[]")
        try:
            outer = self._make_socket(socket.AF_INET6 if ":" in host
                                      else socket.AF_INET)
        except OSError:
            inner.close()
            return
        try:
            outer.connect((host, int(port)))
        except OSError:
            outer.close()
            inner.close()
            return
        with self._lock:
            self._socks = [inner, outer]
            if self._cut:
                self._drop()
                return
        for src, dst in ((inner, outer), (outer, inner)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True,
                             name=f"gloocy-link-{self.low}-{self.high}").start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if self.delay:
                    time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _drop(self):
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self, after=0.0):
        """Drop the connection (both ranks lose each other) now, or after
        `after` seconds."""
        if after > 0:
            timer = threading.Timer(after, self.cut)
            timer.daemon = True
            timer.start()
            return
        with self._lock:
            self._cut = True
            self._drop()

    def close(self):
        self.cut()
        self._listener.close()
        for s in self._socks:
            s.close()

    def __repr__(self):
        state = "cut" if self._cut else f"delay {self.delay:g} s"
        return f"<LinkProxy ranks {self.low}-{self.high} {state}>"


def check_pair(pair, size):
    """(lower, higher) rank of a link_faults entry; ValueError unless it is
    two distinct ranks of a world of `size`."""
    try:
        a, b = sorted(pair)
        ok = all(isinstance(r, int) for r in (a, b)) and 0 <= a < b < size
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"link_faults: {pair!r} is not a pair of distinct "
                         f"ranks of a world of {size}")
    return a, b


class LinkFaults:
    """The proxies of a world's faulty links, by pair of ranks."""

    def __init__(self, pairs, size, lookup, **where):
        """`where`: LinkProxy's bind= and make_socket= (default: loopback
        in this process's namespace)."""
        self.proxies = {}
        for pair in pairs:
            a, b = check_pair(pair, size)
            self.proxies[a, b] = LinkProxy(a, b, lambda a=a: lookup(a), **where)

    def redirects(self, rank):
        """{lower rank: proxy address} for the connections `rank` makes."""
        return {a: p.address for (a, b), p in self.proxies.items() if b == rank}

    def get(self, a, b):
        try:
            return self.proxies[tuple(sorted((a, b)))]
        except KeyError:
            raise ValueError(f"ranks {a} and {b}: no proxy on their link "
                             "(list the pair in link_faults=)") from None

    def close(self):
        for p in self.proxies.values():
            p.close()


class _Redirected:
    """A store client whose answers for some ranks' listening addresses are
    the proxies' instead."""

    def __init__(self, store, job, redirects):
        self._store = store
        self._keys = {f"{job}/tcp/{peer}": addr.encode()
                      for peer, addr in redirects.items()}

    def get(self, key, *args, **kwargs):
        value = self._store.get(key, *args, **kwargs)   # waits for the peer
        return self._keys.get(key, value)

    def __getattr__(self, name):
        return getattr(self._store, name)


def redirected(store, job, redirects):
    return _Redirected(store, job, redirects) if redirects else store
