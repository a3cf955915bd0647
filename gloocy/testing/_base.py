"""The World both back ends share: choosing the back end, run/run_each,
the registry of open worlds (for hard timeouts and leak checks) and a
cache of live worlds."""

from __future__ import annotations

import atexit

from ._report import RankError, args_for, check_ranks, failure, ranks_text
from ._resources import Resources
from .faults import check_faults

DEFAULT_TIMEOUT = 30.0       # start-up and each run, seconds
DEFAULT_COMM_TIMEOUT = 60.0  # the communicator's default deadline (processes)
BACKENDS = ("threads", "processes")

open_worlds: list = []       # every world not closed yet, both back ends
close_leaks: list[str] = []  # what ranks kept after Free at close()


class World:
    """``World(size, backend="threads", **options)``: `size` ranks, each
    holding a live communicator, that stay up between calls.

    ``backend="threads"``: the ranks are threads of this process (starts in
    milliseconds; `fn` may be any callable, closures included).
    ``backend="processes"``: the ranks are processes (real process
    boundary; `fn` must be a module-level function and its arguments and
    results must pickle).

    ``world.run(fn, *args, timeout=None, ranks=None, check=True, grace=5.0)``
    calls ``fn(comm, *args)`` on every rank (or on `ranks`) and returns the
    results in rank order. A rank that raises gives ``RankFailure`` (an
    AssertionError whose message has every failing rank's traceback, each
    line prefixed ``[rank r]``) or, with ``check=False``, a ``RankError`` in
    that rank's slot. Once a rank has failed the others get `grace` more
    seconds. A rank still running at the deadline gives ``RankTimeout``
    with every hung rank's stacks; the world is then dead.
    """

    def __new__(cls, size=None, *args, backend="threads", **kwargs):
        if cls is World:
            if backend not in BACKENDS:
                raise ValueError(f"backend: {backend!r} is not one of "
                                 f"{', '.join(BACKENDS)}")
            if backend == "threads":
                from .threads import ThreadWorld as cls
            else:
                from .processes import ProcessWorld as cls
        return object.__new__(cls)

    # Set by the back ends.
    size: int
    _parent_resources = Resources()

    def run(self, fn, *args, timeout=None, ranks=None, check=True, grace=5.0,
            faults=()):
        """fn(comm, *args) on every rank (or `ranks`); results in that order.
        `faults`: see gloocy.testing.faults."""
        ranks = check_ranks(ranks, self.size, repr(self))
        check_faults(faults, self.size)
        return self._call(fn, {r: args for r in ranks}, ranks, timeout, check,
                          grace, list(faults))

    def run_each(self, fn, args_per_rank, *, timeout=None, ranks=None,
                 check=True, grace=5.0, faults=()):
        """fn(comm, *args_per_rank[r]) on every rank r (or `ranks`);
        `args_per_rank` is a list of `size` tuples or a dict rank -> tuple."""
        argmap, ranks = args_for(args_per_rank, self.size, ranks)
        ranks = check_ranks(ranks, self.size, repr(self))
        check_faults(faults, self.size)
        return self._call(fn, argmap, ranks, timeout, check, grace, list(faults))

    def link(self, a, b):
        """The LinkProxy between ranks a and b (see gloocy.testing.faults)."""
        if self._links is None:
            raise ValueError("this world has no link_faults")
        return self._links.get(a, b)

    def _rank_gone(self, rank):
        return self._dead[rank]

    def _describe(self):
        return ""

    def _check_usable(self, ranks):
        """RuntimeError unless every one of `ranks` can take a call."""
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        if self._timed_out:
            raise RuntimeError(f"{self!r} is dead: an earlier call timed out")
        dead = [r for r in ranks if self._rank_gone(r)]
        if dead:
            raise RuntimeError(f"{ranks_text(dead)} of {self!r} are dead")

    def _settle(self, fn, ranks, results, check):
        """`results` of a call, or RankFailure when some rank failed and
        `check`; a failure spoils the world (not handed out again)."""
        errors = {r: e for r, e in zip(ranks, results) if isinstance(e, RankError)}
        if errors:
            self._failed = True
            if check:
                raise failure(fn, errors, results)
        return results

    def __repr__(self):
        state = ("closed" if self._closed else "alive" if self.alive else "dead")
        env = f" env={self.env}" if self.env else ""
        return (f"<{type(self).__name__} size={self.size}{self._describe()}"
                f"{env} {state}>")

    @property
    def reusable(self):
        """Alive, and nothing failed or was killed since start-up."""
        return self.alive and not self._failed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_worlds_resources():
    """What the open worlds hold in this process: what each made while it
    started (store server, pipes, sockets and threads of thread ranks) and
    its rank processes."""
    held = Resources()
    for w in open_worlds:
        held = held | w._parent_resources | Resources(
            children=frozenset(getattr(w, "pids", ())))
    return held


def abort_all():
    """Stop every open world now (process ranks are SIGKILLed); they are
    dead afterwards. Safe in a signal handler (no waiting); close() or
    reap_dead() cleans up later."""
    for w in list(open_worlds):
        w._abort()


def reap_dead():
    """Close every open world that is not alive."""
    for w in list(open_worlds):
        if not w.alive:
            w.close(timeout=2.0)


def close_spoiled():
    """Close every open world that will not be handed out again (not
    ``reusable``), so that what it keeps is charged to the test that
    spoiled it."""
    for w in list(open_worlds):
        if not w.reusable:
            w.close(timeout=2.0)


class Worlds:
    """Live worlds keyed by (size, backend, options), replaced when they are
    no longer ``reusable``: ``worlds.get(size, env=None, *, backend=...,
    **options)``; ``worlds.close()`` closes all. At most `max_ranks` ranks
    stay up in all: a new world first closes the least recently used ones
    (a suite that asks for many kinds of world would otherwise keep them
    all, a rank process each, to its end)."""

    def __init__(self, *, timeout=DEFAULT_TIMEOUT, backend="threads",
                 max_ranks=64):
        self.timeout = timeout
        self.backend = backend
        self.max_ranks = max_ranks
        self._worlds: dict[tuple, World] = {}    # least recently used first

    def get(self, size, env=None, *, backend=None, **options):
        backend = backend or self.backend
        env = {str(k): str(v) for k, v in (env or {}).items()}
        key = (size, backend, tuple(sorted(env.items())),
               tuple(sorted(options.items())))
        w = self._worlds.pop(key, None)
        if w is not None and not w.reusable:
            w.close(timeout=2.0)
            w = None
        if w is None:
            self._make_room(size)
            w = World(size, backend=backend, env=env,
                      **{"timeout": self.timeout, **options})
        self._worlds[key] = w
        return w

    def _make_room(self, size):
        """Close the least recently used worlds until `size` more ranks fit."""
        while self._worlds and size + sum(k[0] for k in self._worlds) > self.max_ranks:
            self._worlds.pop(next(iter(self._worlds))).close(timeout=2.0)

    def close(self):
        for w in self._worlds.values():
            w.close()
        self._worlds.clear()


def _close_open_worlds():
    for w in list(open_worlds):
        w.close(timeout=2.0)


atexit.register(_close_open_worlds)   # the safety net: no rank outlives us
