"""Worlds of real rank processes for gloocy's tests.

A ``World`` is ``size`` worker processes, each holding a communicator built by
``gloocy.connect()`` through a TCP store that the test process serves. The
workers stay up between calls, so one world serves many tests (starting
Python + numpy + gloocy costs ~150 ms a process)::

    from harness import World

    def total(comm, n):                      # module level: pickled by reference
        x = np.full(n, comm.rank + 1.0)
        comm.Allreduce(gloocy.IN_PLACE, x)
        return float(x[0])

    with World(3, env={"GLOOCY_SEGMENT_BYTES": 64}) as w:
        assert w.run(total, 1000) == [6.0, 6.0, 6.0]

API
---
``World(size, *, env=None, timeout=30.0, comm_timeout=60.0)``
    Start the ranks and wait until every one is connected. ``env`` is added to
    each worker's environment before it imports gloocy (tuning knobs such as
    GLOOCY_SEGMENT_BYTES are read by ``connect``). ``timeout`` is the default
    deadline of start-up and of every ``run``; ``comm_timeout`` is the
    communicator's own default deadline.

``world.run(fn, *args, timeout=None, ranks=None, check=True, grace=5.0) -> list``
    Call ``fn(comm, *args)`` on every rank (or on ``ranks`` only) and return
    the results in rank order (in the order of ``ranks`` when given). ``fn``
    must be a module-level function (it is pickled by reference); arguments
    and results are pickled.

    - A rank that raises: with ``check`` (the default) ``RankFailure`` (an
      AssertionError) is raised, showing every failing rank's traceback and
      output; with ``check=False`` that rank's entry in the list is a
      ``RankError`` instead of a result.
    - Once some rank has failed, the others get ``grace`` more seconds
      (``None``: until the deadline) -- a rank that raised usually leaves its
      peers blocked in a collective.
    - A rank that does not finish by the deadline: every rank of the world is
      sent SIGUSR1 (the worker dumps its Python stacks), then SIGKILL; the world
      is dead and ``RankTimeout`` (a RankFailure) is raised even when
      ``check`` is False, naming the ranks and showing their stacks.
    - A rank process that dies during the call gives a ``RankError`` whose
      ``type_name`` is "ProcessDied" and whose ``exitcode`` is set.

``world.run_each(fn, args_per_rank, **kw) -> list``
    Like ``run``, but rank r calls ``fn(comm, *args_per_rank[r])``
    (``args_per_rank`` maps rank -> tuple: a list of size tuples or a dict).

``world.kill(rank, sig=signal.SIGKILL)``
    Send ``sig`` to rank's process; after SIGKILL the process is reaped and
    the rank is dead (``run`` refuses it; pass ``ranks=`` to use the others).
``world.pids``, ``world.size``, ``world.env``, ``world.store_url``, ``world.job``
``world.alive``      every rank process is up and the world has not timed out.
``world.reusable``   alive, and nothing failed or was killed since start-up
                     (what the test fixtures check before handing it out again).
``world.returncode(rank)``  the exit status (None while running; -N: signal N).
``world.log(rank)``  everything the rank printed (stdout and stderr).
``world.close(timeout=10.0) -> list``
    Workers call ``comm.Free()`` and exit; each is waited for (no zombies) and
    killed if it does not exit in time. Returns the exit codes. Idempotent.

``RankError`` attributes: ``rank``, ``type_name`` ("ValueError"), ``type_names``
(the exception class's MRO names: ``"TimeoutError" in e.type_names``),
``message``, ``traceback`` (text), ``exception`` (the unpickled exception, or
None), ``exitcode`` (for "ProcessDied"), ``output`` (what the rank printed
during the call); ``e.is_a("TimeoutError")``.
``RankFailure`` attributes: ``errors`` ({rank: RankError}), ``results`` (the
list ``run`` would have returned), ``hung`` (ranks that did not finish).

Leak checks
-----------
Each rank notes its file descriptors, threads and child processes right
after the world formed. After every call that returned on a rank, that rank
must hold nothing more, except what the world's communicator legitimately
keeps for the rest of its life: the eventfd it makes once its connections
are shared (a Dup), and the worker thread and shadow communicator (another
eventfd) of its nonblocking collectives. Growth fails the call with
``RankLeak`` (a RankFailure, whatever ``check`` says) and the world is not
handed out again. At ``close`` every rank frees its
communicator and must then hold no more than before ``gloocy.connect``;
what is left is recorded in ``close_leaks`` (checked after every test by
tests/conftest.py). ``resources()`` and ``grown()`` are the snapshot and the
comparison, for the test process too; ``open_worlds_resources()`` is what
the open worlds hold in the test process (their rank processes, store
server and pipes).

``Worlds()`` is a cache of live worlds keyed by (size, env, comm_timeout):
``worlds.get(size, env=None, comm_timeout=60.0)`` hands out a cached world while
it is ``reusable`` and replaces it otherwise; ``worlds.close()`` closes all.
``abort_all()`` SIGKILLs every rank of every open world (signal-safe: for hard
test timeouts); the worlds are then dead and ``reap_dead()`` (or ``close()``)
reaps them. ``close_spoiled()`` closes every open world that is not
``reusable``.
"""

from __future__ import annotations

import atexit
import faulthandler
import gc
import importlib
import os
import pickle
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import Connection, wait as _wait_conns
from pathlib import Path
from typing import NamedTuple

__all__ = ["World", "Worlds", "RankError", "RankFailure", "RankTimeout",
           "RankLeak", "abort_all", "reap_dead", "close_spoiled", "resources",
           "grown", "open_worlds_resources", "close_leaks"]

DEFAULT_TIMEOUT = 30.0       # start-up and each run, seconds
# In a World's env, TEST_HOSTS=k spreads the ranks over k pretend hosts: rank
# r gets GLOOCY_HOST_ID test-host-(r % k), so that only ranks of one pretend
# host share memory, and the others talk over TCP.
TEST_HOSTS = "GLOOCY_TEST_HOSTS"
DEFAULT_COMM_TIMEOUT = 60.0  # the communicator's default deadline
_OUTPUT_TAIL = 4000          # characters of a rank's output shown on failure
_STACK_DUMP_WAIT = 0.3       # seconds given to hung ranks to dump their stacks

_LEAK_WAIT = 2.0             # seconds a growth may take to go away (a thread ending)

_open_worlds: list["World"] = []   # for abort_all() and the atexit safety net
close_leaks: list[str] = []        # what ranks kept after Free at close()


# -- what a process holds ------------------------------------------------------

class Resources(NamedTuple):
    """What a process holds: fds as (number, what /proc says it is),
    Python threads, child pids."""
    fds: frozenset = frozenset()
    threads: frozenset = frozenset()
    children: frozenset = frozenset()

    def __or__(self, other):
        return Resources(*(a | b for a, b in zip(self, other)))

    def __sub__(self, other):
        return Resources(*(a - b for a, b in zip(self, other)))


def _fds():
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            fds.add((int(name), os.readlink(f"/proc/self/fd/{name}")))
        except OSError:
            pass                  # the directory listdir itself had open
    return frozenset(fds)


def _children():
    pids = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids.update(int(p) for p in f.read().split())
        except OSError:
            pass                  # a thread that just ended
    return frozenset(pids)


def resources():
    """What this process holds now (see Resources)."""
    return Resources(_fds(), frozenset(threading.enumerate()), _children())


def _describe_child(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = "?"
    return f"{pid} ({cmd[:200] or 'a zombie'})"


def _growth_text(new):
    parts = []
    if new.fds:
        parts.append("fds " + ", ".join(f"{fd} -> {what}"
                                        for fd, what in sorted(new.fds)))
    if new.threads:
        parts.append("threads " + ", ".join(sorted(repr(t.name)
                                                   for t in new.threads)))
    if new.children:
        parts.append("child processes " + ", ".join(
            _describe_child(p) for p in sorted(new.children)))
    return "; ".join(parts)


def grown(before, allowed=lambda new: new, wait=_LEAK_WAIT):
    """What this process holds now and did not in `before` (a Resources),
    as text ("" if nothing). `allowed(new)` returns the part of the growth
    `new` that is not legitimate. A growth gets `wait` seconds (and a
    garbage collection) to go away: a thread that is ending, an fd held
    by a cycle of garbage are not leaks."""
    deadline = time.monotonic() + wait
    while True:
        new = allowed(resources() - before)
        if not any(new) or time.monotonic() >= deadline:
            return _growth_text(new)
        gc.collect()
        time.sleep(0.05)


def open_worlds_resources():
    """What the open worlds hold in this process: what each made while it
    started (its store server's thread and sockets, its pipes to the
    ranks) and its rank processes."""
    held = Resources()
    for w in _open_worlds:
        held = held | w._parent_resources | Resources(
            children=frozenset(w.pids))
    return held


# -- results and failures ------------------------------------------------------

class RankError:
    """What one rank raised (or how its process died) during a call."""

    def __init__(self, rank, type_name, message, traceback_text="", *,
                 type_names=(), exception=None, exitcode=None, output=""):
        self.rank = rank
        self.type_name = type_name
        self.type_names = tuple(type_names) or (type_name,)
        self.message = message
        self.traceback = traceback_text
        self.exception = exception
        self.exitcode = exitcode
        self.output = output

    def is_a(self, name):
        """True when the exception's class or one of its bases is called
        `name` (a class works too: its __name__ is used)."""
        return getattr(name, "__name__", name) in self.type_names

    def __repr__(self):
        return f"<RankError rank {self.rank}: {self.type_name}: {self.message}>"

    def describe(self):
        text = f"--- rank {self.rank}: {self.type_name}: {self.message}\n"
        if self.traceback:
            text += self.traceback.rstrip() + "\n"
        if self.output.strip():
            text += (f"--- rank {self.rank} output (last {_OUTPUT_TAIL} chars):\n"
                     f"{self.output[-_OUTPUT_TAIL:].rstrip()}\n")
        return text


class RankFailure(AssertionError):
    """One or more ranks raised; the message shows every traceback."""

    def __init__(self, message, errors=None, results=None, hung=()):
        super().__init__(message)
        self.errors = dict(errors or {})
        self.results = results
        self.hung = list(hung)


class RankTimeout(RankFailure):
    """Some ranks did not finish in time; the whole world was killed."""


class RankLeak(RankFailure):
    """Some ranks hold more fds, threads or child processes after a call
    than when the world formed."""


def _fn_name(fn):
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"


def _ranks_text(ranks):
    ranks = list(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))


# -- the parent side -----------------------------------------------------------

class World:
    """``size`` rank processes with a live communicator each (see the module
    docstring for the API)."""

    def __init__(self, size, *, env=None, timeout=DEFAULT_TIMEOUT,
                 comm_timeout=DEFAULT_COMM_TIMEOUT):
        from gloocy.rendezvous import TCPStoreServer

        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        self.size = size
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.timeout = float(timeout)
        self.comm_timeout = float(comm_timeout)
        self.job = "harness-" + secrets.token_hex(6)
        self._secret = secrets.token_bytes(32)
        self._procs: list[subprocess.Popen | None] = [None] * size
        self._conns: list[Connection | None] = [None] * size
        self._dead = [False] * size      # killed / died / exited
        self._timed_out = False
        self._failed = False             # some call failed or a rank was killed
        self._closed = False
        self._leaks = {}                 # rank -> what it grew in the last call
        self._parent_resources = Resources()
        before = resources()
        self._logdir = Path(tempfile.mkdtemp(prefix="gloocy-world-"))
        self._server = TCPStoreServer(secret=self._secret).start()
        self.store_url = self._server.url
        _open_worlds.append(self)
        try:
            self._spawn()
        except BaseException:
            self.close(timeout=2.0)
            raise
        made = resources() - before
        self._parent_resources = made._replace(children=frozenset())

    # -- start-up ----------------------------------------------------------

    def _spawn(self):
        env = {**os.environ, **self.env}
        env.pop("PYTEST_CURRENT_TEST", None)
        hosts = int(env.pop(TEST_HOSTS, 0))
        for rank in range(self.size):
            if hosts:
                env["GLOOCY_HOST_ID"] = f"test-host-{rank % hosts}"
            parent, child = socket.socketpair()
            with open(self._logpath(rank), "wb") as log:
                try:
                    proc = subprocess.Popen(
                        [sys.executable, "-u", os.path.abspath(__file__),
                         "--worker", str(child.fileno())],
                        pass_fds=(child.fileno(),), env=env,
                        stdin=subprocess.DEVNULL, stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True)   # Ctrl-C goes to pytest only
                finally:
                    child.close()
            self._procs[rank] = proc
            self._conns[rank] = Connection(parent.detach())
            self._send(rank, ("init", dict(
                rank=rank, size=self.size, store=self.store_url,
                secret=self._secret, job=self.job,
                comm_timeout=self.comm_timeout)))
        results = self._collect(list(range(self.size)), self.timeout,
                                grace=None, what="start-up (gloocy.connect)")
        errors = {r: e for r, e in enumerate(results) if isinstance(e, RankError)}
        if errors:
            raise RankFailure(
                f"{_ranks_text(errors)} of a world of {self.size} failed to "
                "start:\n" + "".join(e.describe() for e in errors.values()),
                errors, results)
        self._failed = False

    def _logpath(self, rank):
        return self._logdir / f"rank{rank}.log"

    # -- properties ----------------------------------------------------------

    @property
    def pids(self):
        return [p.pid for p in self._procs if p is not None]

    @property
    def alive(self):
        return (not self._closed and not self._timed_out
                and not any(self._dead)
                and all(p is not None and p.poll() is None for p in self._procs))

    @property
    def reusable(self):
        return self.alive and not self._failed

    def returncode(self, rank):
        return self._procs[rank].poll()

    def log(self, rank):
        try:
            return self._logpath(rank).read_text(errors="replace")
        except OSError:
            return ""

    def _log_size(self, rank):
        try:
            return self._logpath(rank).stat().st_size
        except OSError:
            return 0

    def _log_since(self, rank, offset):
        try:
            with open(self._logpath(rank), "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def __repr__(self):
        state = ("closed" if self._closed else "alive" if self.alive else "dead")
        env = f" env={self.env}" if self.env else ""
        return f"<World size={self.size}{env} {state}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- calls ---------------------------------------------------------------

    def run(self, fn, *args, timeout=None, ranks=None, check=True, grace=5.0):
        """fn(comm, *args) on every rank (or `ranks`); results in that order."""
        ranks = list(range(self.size)) if ranks is None else list(ranks)
        return self._call(fn, {r: args for r in ranks}, ranks, timeout, check,
                          grace)

    def run_each(self, fn, args_per_rank, *, timeout=None, ranks=None,
                 check=True, grace=5.0):
        """fn(comm, *args_per_rank[r]) on every rank r (or `ranks`)."""
        if ranks is None:
            ranks = (sorted(args_per_rank) if isinstance(args_per_rank, dict)
                     else list(range(self.size)))
        if not isinstance(args_per_rank, dict) and len(args_per_rank) != self.size:
            raise ValueError(f"args_per_rank: expected {self.size} tuples, got "
                             f"{len(args_per_rank)}")
        argmap = {r: tuple(args_per_rank[r]) for r in ranks}
        return self._call(fn, argmap, list(ranks), timeout, check, grace)

    def _call(self, fn, argmap, ranks, timeout, check, grace):
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        if self._timed_out:
            raise RuntimeError(f"{self!r} is dead: an earlier call timed out")
        bad = [r for r in ranks if not 0 <= r < self.size]
        if bad or len(set(ranks)) != len(ranks):
            raise ValueError(f"ranks: {ranks} are not distinct ranks of a "
                             f"world of {self.size}")
        dead = [r for r in ranks if self._dead[r] or self._procs[r].poll() is not None]
        if dead:
            raise RuntimeError(f"{_ranks_text(dead)} of {self!r} are dead")
        ref = _module_ref(fn)
        try:
            blobs = {r: pickle.dumps((fn, a)) for r, a in argmap.items()}
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise TypeError(
                f"{_fn_name(fn)} and its arguments must pickle (fn must be a "
                f"module-level function): {e}") from None
        for r in ranks:
            self._send(r, ("run", ref, blobs[r]))
        timeout = self.timeout if timeout is None else float(timeout)
        self._leaks = {}
        results = self._collect(ranks, timeout, grace,
                                what=f"{_fn_name(fn)}")
        if self._leaks:
            self._failed = True       # not handed out again
            raise RankLeak(
                f"after {_fn_name(fn)}, ranks hold more than when the world "
                f"formed (what the world's communicator keeps aside):\n"
                + "".join(f"--- rank {r}: {text}\n"
                          for r, text in sorted(self._leaks.items())),
                results=results)
        errors = {r: e for r, e in zip(ranks, results) if isinstance(e, RankError)}
        if errors:
            self._failed = True
            if check:
                raise RankFailure(
                    f"{_ranks_text(errors)} failed in {_fn_name(fn)}:\n"
                    + "".join(e.describe() for e in errors.values()),
                    errors, results)
        return results

    def _send(self, rank, msg):
        try:
            self._conns[rank].send_bytes(pickle.dumps(msg))
        except OSError:
            pass      # the process is gone; _collect reports how it died

    def _collect(self, ranks, timeout, grace, what):
        """Wait for one reply from each of `ranks`; kill everything on timeout."""
        start = time.monotonic()
        deadline = start + timeout
        offsets = {r: self._log_size(r) for r in ranks}
        pending = {self._conns[r]: r for r in ranks}
        results = {}
        while pending:
            now = time.monotonic()
            if now >= deadline:
                break
            ready = _wait_conns(list(pending), timeout=deadline - now)
            for conn in ready:
                r = pending.pop(conn)
                results[r] = self._receive(r, offsets[r])
                if isinstance(results[r], RankError) and grace is not None:
                    deadline = min(deadline, time.monotonic() + grace)
        ordered = [results.get(r) for r in ranks]
        if pending:
            hung = sorted(pending.values())
            waited = time.monotonic() - start
            self._abort_hung(hung)
            errors = {r: e for r, e in results.items() if isinstance(e, RankError)}
            text = (f"{_ranks_text(hung)} did not finish {what} within "
                    f"{waited:.3g} s (timeout {timeout:g} s"
                    + (f", grace {grace:g} s after a failure" if errors else "")
                    + f"); every rank of the world of {self.size} was killed.\n")
            done = [r for r in ranks if r not in hung]
            if done:
                text += f"{_ranks_text(done)} finished.\n"
            text += "".join(e.describe() for e in errors.values())
            for r in hung:
                text += (f"--- rank {r} (hung) output and stacks:\n"
                         f"{self._log_since(r, offsets[r])[-_OUTPUT_TAIL:].rstrip()}\n")
            raise RankTimeout(text, errors, ordered, hung)
        return ordered

    def _receive(self, rank, log_offset):
        conn = self._conns[rank]
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            code = self._reap(rank, 5.0)
            self._dead[rank] = True
            self._failed = True
            how = (f"killed by signal {-code} ({signal.Signals(-code).name})"
                   if code is not None and code < 0 else f"exit status {code}")
            return RankError(rank, "ProcessDied", f"rank {rank}'s process died ({how})",
                             exitcode=code,
                             output=self._log_since(rank, log_offset))
        try:
            kind, payload, leaks = pickle.loads(data)
        except Exception as e:
            return RankError(rank, type(e).__name__,
                             f"cannot unpickle rank {rank}'s reply: {e}",
                             output=self._log_since(rank, log_offset))
        if leaks:
            self._leaks[rank] = leaks
        if kind == "ok":
            return payload
        try:
            exc = pickle.loads(payload["pickled"]) if payload["pickled"] else None
        except Exception:
            exc = None
        return RankError(rank, payload["type_name"], payload["message"],
                         payload["traceback"], type_names=payload["type_names"],
                         exception=exc, output=self._log_since(rank, log_offset))

    def _abort_hung(self, hung):
        """Dump the stacks of `hung` ranks into their logs, then kill all."""
        for r in hung:
            try:
                os.kill(self._procs[r].pid, signal.SIGUSR1)
            except OSError:
                pass
        time.sleep(_STACK_DUMP_WAIT)
        self._kill_all()
        self._timed_out = True
        for r in range(self.size):
            self._reap(r, 5.0)

    def _kill_all(self):
        """SIGKILL every rank process (no waiting: signal-handler safe)."""
        for r, p in enumerate(self._procs):
            if p is not None and p.returncode is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except OSError:
                    pass
            self._dead[r] = True

    def _reap(self, rank, timeout):
        p = self._procs[rank]
        if p is None:
            return None
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()

    # -- faults and shutdown ---------------------------------------------------

    def kill(self, rank, sig=signal.SIGKILL):
        """Send `sig` to rank's process; SIGKILL also reaps it."""
        p = self._procs[rank]
        self._failed = True
        if p.poll() is None:
            os.kill(p.pid, sig)
        if sig == signal.SIGKILL:
            p.wait()
            self._dead[rank] = True

    def close(self, timeout=10.0):
        """Free every communicator, let the workers exit, reap them."""
        if self._closed:
            return [p.returncode if p else None for p in self._procs]
        self._closed = True
        deadline = time.monotonic() + timeout + _LEAK_WAIT
        live = [r for r in range(self.size)
                if self._procs[r] is not None and self._procs[r].poll() is None
                and not self._dead[r]]
        for r in live:
            self._send(r, ("close", None))
        pending = {self._conns[r]: r for r in live}
        while pending and time.monotonic() < deadline:
            for conn in _wait_conns(list(pending),
                                    timeout=max(0.0, deadline - time.monotonic())):
                r = pending.pop(conn)
                try:
                    _, _, leaks = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    continue
                if leaks:
                    close_leaks.append(
                        f"{self!r}, rank {r}, after comm.Free() at close: "
                        f"holds more than before gloocy.connect: {leaks}")
        codes = []
        for r, p in enumerate(self._procs):
            if p is None:
                codes.append(None)
                continue
            try:
                p.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            codes.append(p.returncode)
        for conn in self._conns:
            if conn is not None:
                conn.close()
        self._server.close()
        shutil.rmtree(self._logdir, ignore_errors=True)
        if self in _open_worlds:
            _open_worlds.remove(self)
        return codes


def _module_ref(fn):
    """(module name, sys.path entry that imports it) for the worker."""
    name = getattr(fn, "__module__", None)
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if name is None or path is None:
        return (name, None)
    root = Path(path).resolve().parent
    if Path(path).stem == "__init__":
        root = root.parent
    for _ in range(name.count(".")):
        root = root.parent
    return (name, str(root))


def abort_all():
    """SIGKILL every rank of every open world; they are dead afterwards.
    Safe in a signal handler (no waiting); close() reaps them later."""
    for w in list(_open_worlds):
        w._kill_all()
        w._timed_out = True


def reap_dead():
    """Close (reap the processes of) every open world that is not alive."""
    for w in list(_open_worlds):
        if not w.alive:
            w.close(timeout=2.0)


def close_spoiled():
    """Close every open world that will not be handed out again (not
    ``reusable``: dead, or something failed in it), so that what its ranks
    keep after Free is charged to the test that spoiled it."""
    for w in list(_open_worlds):
        if not w.reusable:
            w.close(timeout=2.0)


class Worlds:
    """Live worlds keyed by (size, env, comm_timeout), replaced when they are
    no longer ``reusable``."""

    def __init__(self, *, timeout=DEFAULT_TIMEOUT):
        self.timeout = timeout
        self._worlds: dict[tuple, World] = {}

    def get(self, size, env=None, *, comm_timeout=DEFAULT_COMM_TIMEOUT):
        env = {str(k): str(v) for k, v in (env or {}).items()}
        key = (size, tuple(sorted(env.items())), float(comm_timeout))
        w = self._worlds.get(key)
        if w is not None and not w.reusable:
            w.close(timeout=2.0)
            w = None
        if w is None:
            w = self._worlds[key] = World(size, env=env, timeout=self.timeout,
                                          comm_timeout=comm_timeout)
        return w

    def close(self):
        for w in self._worlds.values():
            w.close()
        self._worlds.clear()


def _close_open_worlds():
    for w in list(_open_worlds):
        w.close(timeout=2.0)


atexit.register(_close_open_worlds)   # the safety net: no rank outlives the tests


# -- the worker side -------------------------------------------------------------

def _error_payload(exc):
    try:
        pickled = pickle.dumps(exc)
    except Exception:
        pickled = None
    return dict(type_name=type(exc).__name__,
                type_names=[c.__name__ for c in type(exc).__mro__],
                message=str(exc),
                traceback="".join(traceback.format_exception(exc)),
                pickled=pickled)


def _kept_by(comm):
    """allowed() for grown(): the part of a rank's growth since the world
    formed that the world's communicator does not keep for its lifetime:
    its context's eventfd, made once a Dup shares its connections, and,
    once a nonblocking collective ran, the worker thread and the shadow
    communicator (with an eventfd of its own) that run them."""
    def allowed(new):
        worker = getattr(comm, "_worker", None)
        threads = new.threads - {getattr(worker, "_thread", None)}
        kept = 1 + (getattr(comm, "_shadow", None) is not None)
        efds = sorted(f for f in new.fds if f[1] == "anon_inode:[eventfd]")
        return new._replace(threads=threads, fds=new.fds - set(efds[:kept]))
    return allowed


def _worker(fd):
    faulthandler.enable()                                   # crashes -> log
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # hangs -> log
    conn = Connection(fd)

    def reply(kind, payload, leaks=""):
        try:
            conn.send_bytes(pickle.dumps((kind, payload, leaks)))
        except Exception as e:          # an unpicklable result or exception
            conn.send_bytes(pickle.dumps(("err", _error_payload(TypeError(
                f"cannot send the {'result' if kind == 'ok' else 'error'} "
                f"back to the test: {e!r}")), leaks)))

    kind, cfg = pickle.loads(conn.recv_bytes())
    assert kind == "init", kind
    try:
        import gloocy
        unconnected = resources()
        comm = gloocy.connect(cfg["rank"], cfg["size"], cfg["store"],
                              secret=cfg["secret"], job=cfg["job"],
                              timeout=cfg["comm_timeout"], host_store=False)
        formed = resources()
    except BaseException as e:
        reply("err", _error_payload(e))
        return 1
    reply("ok", os.getpid())

    while True:
        try:
            kind, *body = pickle.loads(conn.recv_bytes())
        except EOFError:                # the test process went away
            comm.Free()
            return 0
        if kind == "close":
            try:
                comm.Free()
            except BaseException as e:
                reply("err", _error_payload(e))
                return 1
            reply("ok", None, grown(unconnected))
            return 0
        (modname, root), blob = body
        try:
            if root and root not in sys.path:
                sys.path.insert(0, root)
            if modname:
                importlib.import_module(modname)
            fn, args = pickle.loads(blob)
            result = fn(comm, *args)
        except BaseException as e:
            reply("err", _error_payload(e))
        else:
            reply("ok", result, grown(formed, _kept_by(comm)))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        sys.exit(_worker(int(sys.argv[2])))
    sys.exit("usage: harness.py --worker FD   (started by harness.World)")
