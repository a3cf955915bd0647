"""The thread back end: `size` ranks as threads of this process.

``ThreadWorld(size, *, transport=None, env=None, timeout=30.0,
comm_timeout=None, link_faults=None)`` (or ``World(size, ...)``, the
default back end). The ranks meet through an in-process store
(``HashStore``) and connect with a real transport: ``"auto"`` (the
default: shared-memory rings between the threads, and a node segment whose
collectives need no pair), ``"shm"`` (the same, required) or ``"tcp"``
(loopback sockets; what a world with `link_faults` uses, since the faults
sit on its sockets). Collectives release the GIL, so the ranks run
concurrently. A world of 8 and its first allreduce take about 10 ms over
shared memory, about 35 over TCP.

- ``run(fn, *args)``: each call starts one thread per rank that calls
  ``fn(comm, *args)``; `fn` can be any callable (closures too) and
  arguments and results are shared, not copied -- a rank that modifies an
  argument in place modifies every rank's.
  ``gloocy.testing.COMM_WORLD`` (or ``current_comm()``) is the running
  rank's communicator.
- What a rank prints (``print``, ``sys.stdout``/``sys.stderr`` writes) while
  it runs is captured per rank: shown with its traceback and in
  ``world.log(rank)``.
- While a world of more than 64 ranks runs a call, the process's GIL
  switch interval (sys.getswitchinterval) is scaled by ranks / 64, then put
  back: thousands of rank threads waiting for the GIL at 5 ms each would
  spend the CPUs asking for it (see _patient_gil).
- `env` is put in os.environ while the ranks connect (where gloocy reads its
  tuning knobs), then taken away again: worlds are built one at a time.
- `comm_timeout` (default: `timeout`) is every communicator's deadline. At a
  run's deadline the hung ranks' stacks are shown (RankTimeout) and the
  world is dead; a thread cannot be killed, so a hung rank thread is freed
  by its collective's deadline or when its peers leave (close()).
- A rank that raises an error of its own (not one gloocy tells its peers
  of, such as MismatchError) while other ranks still run is, 0.25 s later,
  treated as the crashed process it would be in a real job: its
  connections are dropped, the peers waiting for it get PeerLostError
  naming it, and the rank is dead (the world is not reused).
- ``kill(rank)`` drops the rank's connections without a goodbye: to its
  peers, it crashed (over shared memory too: a peer waiting for it in the
  node segment sees its connector closed and names it, PeerLostError).
"""

from __future__ import annotations

import io
import os
import queue
import secrets
import sys
import threading
import time
import traceback

from . import _base
from ._base import DEFAULT_TIMEOUT, World, open_worlds
from ._current import use_comm
from ._report import (CRASH_AFTER, OUTPUT_TAIL, check_started, RankError,
                      RankTimeout, fn_name, peers_not_told, timeout_text)
from ._resources import grown, resources
from .faults import Kill, LinkFaults, wrap

__all__ = ["ThreadWorld"]

TRANSPORTS = ("tcp", "shm", "auto")
_connecting = threading.Lock()   # os.environ is shared: one world connects at a time


class ThreadWorld(World):
    """``size`` rank threads with a live communicator each (see the module
    docstring)."""

    def __init__(self, size, *, transport=None, env=None,
                 timeout=DEFAULT_TIMEOUT, comm_timeout=None, link_faults=None,
                 backend="threads"):
        import gloocy
        from gloocy.rendezvous.hash_store import HashStore

        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        transport = _transport(transport, self.env, link_faults)
        self.size = size
        self.transport = transport
        self.timeout = float(timeout)
        self.comm_timeout = self.timeout if comm_timeout is None else float(comm_timeout)
        self.job = "threads-" + secrets.token_hex(6)
        self._secret = secrets.token_bytes(32)
        self._comms = [None] * size
        self._threads = {}            # rank -> its thread of the running call
        self._logs = [[] for _ in range(size)]
        self._dead = [False] * size
        self._timed_out = False
        self._failed = False
        self._closed = False
        self._links = None
        self._clients = [None] * size   # each rank's store client, till close()
        self._before = resources()
        _raise_fd_limit()
        self._store = HashStore(timeout=self.comm_timeout)
        open_worlds.append(self)
        try:
            if link_faults:
                if transport != "tcp":
                    raise ValueError(f"link_faults need transport='tcp' (their "
                                     f"default), not {transport!r}")
                self._links = LinkFaults(link_faults, size, self._lookup)
            # The proxies of link faults stand between a rank and the lower
            # ones it dials at start-up: connect eagerly then.
            eager = {"GLOOCY_CONNECT": "eager"} if link_faults else {}
            with _connecting, _environ({**self.env, **eager,
                                        "GLOOCY_TRANSPORT": transport}):
                self._connect(gloocy)
        except BaseException:
            self.close(timeout=2.0)
            raise
        self._parent_resources = resources() - self._before

    def _lookup(self, rank):
        return self._store.get(f"{self.job}/tcp/{rank}").decode()

    def _connect(self, gloocy):
        from .faults import redirected

        def connect(comm, rank):
            store = redirected(self._store.client(), self.job,
                               self._links.redirects(rank) if self._links else {})
            self._clients[rank] = store     # lazy connections need it: kept
            self._comms[rank] = gloocy.connect(
                rank, self.size, store, secret=self._secret, job=self.job,
                timeout=self.comm_timeout)
        results = self._start(connect, {r: () for r in range(self.size)},
                              list(range(self.size)), self.timeout, None,
                              "start-up (gloocy.connect)", capture=False)
        check_started(self, results)

    # -- properties ----------------------------------------------------------

    @property
    def alive(self):
        return not self._closed and not self._timed_out and not any(self._dead)

    @property
    def comms(self):
        """Every rank's communicator (use them only from rank threads)."""
        return list(self._comms)

    def log(self, rank):
        """Everything rank printed during its calls."""
        return "".join(self._logs[rank])

    def _describe(self):
        return f" {self.transport}"

    # -- calls ---------------------------------------------------------------

    def _call(self, fn, argmap, ranks, timeout, check, grace, faults):
        self._check_usable(ranks)
        before = resources()

        def body(comm, rank, *args):
            return fn(wrap(comm, faults, rank), *args)
        timeout = self.timeout if timeout is None else float(timeout)
        results = self._start(body, argmap, ranks, timeout, grace, fn_name(fn))
        # What the communicators made during the call (a Dup's eventfd, the
        # worker of nonblocking collectives) is theirs until close().
        self._parent_resources |= resources() - before
        if any(isinstance(f, Kill) for f in faults):
            self._failed = True
        return self._settle(fn, ranks, results, check)

    def _start(self, body, argmap, ranks, timeout, grace, what, capture=True):
        """body(comm, rank, *argmap[rank]) in a new thread per rank; the
        results in the order of `ranks`."""
        done = queue.SimpleQueue()
        results = {}

        def rank_main(rank, args):
            out = [] if capture else None
            _output.buffer = out
            use_comm(self._comms[rank])
            try:
                results[rank] = body(self._comms[rank], rank, *args)
            except BaseException as e:     # noqa: B036 -- reported, not lost
                results[rank] = RankError.from_exception(
                    rank, e, output="".join(out or ()))
            finally:
                _output.buffer = None
                if out:
                    self._logs[rank].extend(out)
                done.put(rank)

        start = time.monotonic()
        deadline = start + timeout
        crashed, crash_at = [], None     # ranks that raised their own errors
        with _capturing(capture), _patient_gil(len(ranks)):
            for r in ranks:
                t = threading.Thread(target=rank_main, args=(r, argmap[r]),
                                     name=f"gloocy-rank-{r}", daemon=True)
                self._threads[r] = t
                t.start()
            pending = set(ranks)
            while pending:
                now = time.monotonic()
                if crash_at is not None and now >= crash_at:
                    self._crash(crashed)
                    crashed, crash_at = [], None
                left = min(deadline, crash_at or deadline) - now
                if deadline - now <= 0:
                    break
                try:
                    r = done.get(timeout=max(left, 0.0))
                except queue.Empty:
                    continue
                pending.discard(r)
                if isinstance(results.get(r), RankError) and grace is not None:
                    deadline = min(deadline, time.monotonic() + grace)
                    if capture and peers_not_told(results[r]):
                        crashed.append(r)
                        crash_at = crash_at or time.monotonic() + CRASH_AFTER
        for r in set(ranks) - pending:
            self._threads[r].join()
        ordered = [results.get(r) for r in ranks]
        if pending:
            self._timed_out = True
            raise self._timeout(sorted(pending), ranks, results, ordered,
                                 time.monotonic() - start, timeout, grace, what)
        return ordered

    def _timeout(self, hung, ranks, results, ordered, waited, timeout, grace, what):
        frames = sys._current_frames()
        text, errors = timeout_text(hung, ranks, results, waited, timeout, grace,
                                    what, f"the thread world of {self.size} is dead")
        for r in hung:
            frame = frames.get(self._threads[r].ident)
            stack = "".join(traceback.format_stack(frame)) if frame else "(gone)\n"
            text += f"--- rank {r} (hung) stack:\n" + "".join(
                f"[rank {r}] {line}\n" for line in stack.rstrip().splitlines())
            out = self.log(r)
            if out.strip():
                text += (f"--- rank {r} output:\n"
                         f"{out[-OUTPUT_TAIL:].rstrip()}\n")
        return RankTimeout(text, errors, ordered, hung)

    # -- faults and shutdown -------------------------------------------------

    def _crash(self, ranks):
        """What a process that raised would do to its peers by exiting: drop
        `ranks`' connections without a goodbye (their threads have ended),
        so that the peers still waiting for them get PeerLostError naming
        them instead of waiting out the grace and the timeout."""
        for r in ranks:
            self._dead[r] = True
            self._comms[r]._ctx.links.close(False)

    def kill(self, rank):
        """Drop rank's connections without a goodbye (a crash, to its
        peers); the rank is dead. Only between calls."""
        t = self._threads.get(rank)
        if t is not None and t.is_alive():
            raise RuntimeError(f"rank {rank} is running a call; use a Kill fault")
        self._failed = True
        self._dead[rank] = True
        self._comms[rank]._ctx.links.close(False)

    def _abort(self):
        self._timed_out = True

    def close(self, timeout=10.0):
        """Free every communicator whose thread is idle; a hung rank thread
        is given `timeout` seconds to end first (its peers' leaving usually
        frees it). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._links is not None:
            self._links.close()
        busy = [r for r, t in self._threads.items() if t.is_alive()]
        for r, comm in enumerate(self._comms):
            if comm is not None and r not in busy:
                comm.Free()
        deadline = time.monotonic() + timeout
        for r in busy:
            self._threads[r].join(max(0.0, deadline - time.monotonic()))
            if not self._threads[r].is_alive() and self._comms[r] is not None:
                self._comms[r].Free()
        self._comms = [None] * self.size
        for client in self._clients:
            if client is not None:
                client.close()
        self._store.close()
        if self in open_worlds:
            open_worlds.remove(self)
        left = grown(self._before, lambda new: new - _base.open_worlds_resources(),
                     wait=1.0 if busy else 0.5)
        if left:
            _base.close_leaks.append(f"{self!r}: after close, this process "
                                     f"holds more than before it: {left}")


def _raise_fd_limit():
    """Raise this process's soft limit on open files to the hard one: each
    rank thread holds a few fds per peer it talks to, and a world of a
    thousand ranks passes the usual soft limit of 1,024."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and soft != resource.RLIM_INFINITY:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass              # (the limit stays; a rank that runs out says so)


def _transport(transport, env, link_faults):
    """The transport a world uses: `transport`, else the env's
    GLOOCY_TRANSPORT, else shared memory ("auto"), or TCP for link faults."""
    named = env.get("GLOOCY_TRANSPORT")
    if transport is None:
        transport = named or ("tcp" if link_faults else "auto")
    elif named is not None and named != transport:
        raise ValueError(f"transport={transport!r} and env GLOOCY_TRANSPORT="
                         f"{named!r} disagree")
    if transport not in TRANSPORTS:
        raise ValueError(f"transport: {transport!r} is not one of "
                         f"{', '.join(TRANSPORTS)}")
    return transport


# -- the GIL's switch interval -------------------------------------------------

# A thread that waits for the GIL wakes every switch interval (5 ms) to ask
# the holder to let go, taking the GIL's mutex each time. When a collective
# ends, every rank thread of a world wants the GIL back at once: at 4,096
# ranks, 800,000 such wake-ups a second fought over that mutex, and phases
# whose work takes a second took 10-50 s (a Split of 4,096 into 64 groups:
# 28 s in the median rank at 5 ms, 1.8 s at 0.5 s). Rank threads let go of
# the GIL at each call anyway; so while a world of more than RANKS_PER_SLICE
# rank threads runs, the interval grows with its size, keeping the wake-ups
# per second of a world of RANKS_PER_SLICE.
RANKS_PER_SLICE = 64
_patience_lock = threading.Lock()
_patience = []          # the intervals the running calls asked for
_usual_interval = None  # the interval before the first of them


class _patient_gil:
    """A longer switch interval while `ranks` rank threads run."""

    def __init__(self, ranks):
        self.ranks = ranks
        self.want = None

    def __enter__(self):
        global _usual_interval
        if self.ranks <= RANKS_PER_SLICE:
            return
        with _patience_lock:
            if not _patience:
                _usual_interval = sys.getswitchinterval()
            self.want = _usual_interval * self.ranks / RANKS_PER_SLICE
            _patience.append(self.want)
            sys.setswitchinterval(max(_patience))

    def __exit__(self, *exc):
        if self.want is None:
            return
        with _patience_lock:
            _patience.remove(self.want)
            sys.setswitchinterval(max(_patience, default=_usual_interval))


class _environ:
    """Put `env` in os.environ for a while."""

    def __init__(self, env):
        self.env = env

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- per-rank output -----------------------------------------------------------

_output = threading.local()      # .buffer: the running rank's list of writes
_capture_lock = threading.Lock()
_capture_users = 0


class _Router(io.TextIOBase):
    """sys.stdout/sys.stderr while thread ranks run: a rank thread's writes
    go to its buffer, everybody else's to the stream it replaced."""

    def __init__(self, inner):
        self.inner = inner

    def write(self, text):
        buffer = getattr(_output, "buffer", None)
        if buffer is None:
            return self.inner.write(text)
        buffer.append(text)
        return len(text)

    def flush(self):
        if getattr(_output, "buffer", None) is None:
            self.inner.flush()

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _capturing:
    def __init__(self, on):
        self.on = on

    def __enter__(self):
        global _capture_users
        if not self.on:
            return
        with _capture_lock:
            if _capture_users == 0:
                sys.stdout, sys.stderr = _Router(sys.stdout), _Router(sys.stderr)
            _capture_users += 1

    def __exit__(self, *exc):
        global _capture_users
        if not self.on:
            return
        with _capture_lock:
            _capture_users -= 1
            if _capture_users == 0:
                for name in ("stdout", "stderr"):
                    stream = getattr(sys, name)
                    if isinstance(stream, _Router):
                        setattr(sys, name, stream.inner)
