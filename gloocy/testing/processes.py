"""The process back end: `size` rank processes, each holding a
communicator built by ``gloocy.connect()`` through a TCP store that this
process serves. The workers stay up between calls, so one world serves many
tests (starting Python + numpy + gloocy costs ~150 ms a process).

``ProcessWorld(size, *, env=None, timeout=30.0, comm_timeout=60.0,
link_faults=None, hosts=None)`` (or ``World(size, backend="processes", ...)``):
``env`` is added to each worker's environment before it imports gloocy
(tuning knobs such as GLOOCY_SEGMENT_BYTES are read by ``connect``);
``timeout`` is the default deadline of start-up and of every ``run``;
``comm_timeout`` is the communicator's own default deadline; ``hosts``
(e.g. ``[3, 1]``: ranks 0-2 on one host, rank 3 on another) puts the
ranks in network namespaces, one per host (gloocy.testing.netns: needs
root and iproute2; ``world.netns`` is its ``Hosts``, for link limits and
byte counters, ``world.netns.cut(i, j)`` cuts two hosts apart silently;
the store is served on the namespaces' bridge). ``link_faults``: see
gloocy.testing.faults (with ``hosts``, only between ranks of two hosts,
and only those links go through a proxy). In a rank,
``gloocy.testing.COMM_WORLD``, ``gloocy.init()`` and ``gloocy.MPI.COMM_WORLD``
are the rank's communicator too.

Beyond ``run``/``run_each`` (see gloocy.testing.World):

- A rank that does not finish by the deadline: every rank is sent SIGUSR1
  (the worker dumps its Python stacks), then SIGKILL; the world is dead and
  ``RankTimeout`` is raised even when ``check`` is False, with the stacks.
- A rank that raises an error of its own (not one gloocy tells its peers
  of, such as MismatchError) while other ranks still run is, 0.25 s later,
  killed, as an uncaught error would end it in a real job: the peers
  waiting for it get PeerLostError naming it, and the rank is dead.
- A rank process that dies during the call gives a ``RankError`` whose
  ``type_name`` is "ProcessDied" and whose ``exitcode`` is set.
- ``kill(rank, sig=SIGKILL)``, ``pids``, ``alive``, ``reusable``,
  ``returncode(rank)``, ``log(rank)`` (everything the rank printed),
  ``close(timeout=10.0) -> exit codes``.
- In the env, ``GLOOCY_TEST_HOSTS=k`` spreads the ranks over k pretend
  hosts: shared memory only between ranks of one, TCP across.

Leak checks: each rank notes its fds, threads and child processes right
after the world formed; after a call it must hold nothing more, except what
the world's communicator keeps for life (the eventfd of a Dup), or the
call fails with ``RankLeak``. At close each rank frees its communicator and must
hold no more than before ``gloocy.connect``; what is left goes to
``gloocy.testing.close_leaks``.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import os
import pickle
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection, wait as _wait_conns
from pathlib import Path

from . import _base
from ._base import DEFAULT_COMM_TIMEOUT, DEFAULT_TIMEOUT, World, open_worlds
from ._report import (CRASH_AFTER, OUTPUT_TAIL, check_started, RankError,
                      RankLeak, RankTimeout, error_payload, fn_name,
                      peers_not_told, timeout_text)
from ._resources import LEAK_WAIT, Resources, grown, resources
from .faults import LinkFaults, check_pair, wrap

__all__ = ["ProcessWorld", "TEST_HOSTS"]

# In a World's env, TEST_HOSTS=k spreads the ranks over k pretend hosts: rank
# r gets GLOOCY_HOST_ID test-host-(r % k), so that only ranks of one pretend
# host share memory, and the others talk over TCP.
TEST_HOSTS = "GLOOCY_TEST_HOSTS"
_STACK_DUMP_WAIT = 0.3       # seconds given to hung ranks to dump their stacks


class ProcessWorld(World):
    """``size`` rank processes with a live communicator each (see the module
    docstring for the API)."""

    def __init__(self, size, *, env=None, timeout=DEFAULT_TIMEOUT,
                 comm_timeout=DEFAULT_COMM_TIMEOUT, link_faults=None,
                 hosts=None, backend="processes"):
        from gloocy.rendezvous import TCPStoreServer

        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        self.size = size
        self._host_of = _host_of(hosts, size)
        for pair in (link_faults or ()) if hosts else ():
            a, b = check_pair(pair, size)
            if self._host_of[a] == self._host_of[b]:
                raise ValueError(
                    f"link_faults: ranks {a} and {b} are on one host (host "
                    f"{self._host_of[a]}): they share memory, not a link")
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.timeout = float(timeout)
        self.comm_timeout = float(comm_timeout)
        self.job = "world-" + secrets.token_hex(6)
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
        self.netns = self._server = self._links = None
        open_worlds.append(self)
        try:
            if hosts:
                from .netns import Hosts
                self.netns = Hosts(len(hosts))
                self._server = self.netns.serve_in(lambda: TCPStoreServer(
                    self.netns.bridge_addr, secret=self._secret))
            else:
                self._server = TCPStoreServer(secret=self._secret)
            self._server.start()
            self.store_url = self._server.url
            if link_faults and hosts:
                # The proxies live in the bridge's namespace, which every
                # host reaches; only the faulty links go through them (the
                # others are direct: TCP across hosts, shared memory within)
                self._links = LinkFaults(
                    link_faults, size, self._lookup, bind=self.netns.bridge_addr,
                    make_socket=lambda family: self.netns.serve_in(
                        lambda: socket.socket(family)))
            elif link_faults:
                self._links = LinkFaults(link_faults, size, self._lookup)
                self.env.setdefault("GLOOCY_TRANSPORT", "tcp")
            if link_faults:
                # the proxies stand where a rank dials the lower ones at start-up
                self.env.setdefault("GLOOCY_CONNECT", "eager")
            self._spawn()
        except BaseException:
            self.close(timeout=2.0)
            raise
        made = resources() - before
        self._parent_resources = made._replace(children=frozenset())

    # -- start-up ----------------------------------------------------------

    def _lookup(self, rank):
        """Rank's listening address, as it published it (for link proxies)."""
        from gloocy.rendezvous import connect as store_client

        def get():
            with store_client(self.store_url, secret=self._secret,
                              timeout=self.timeout) as store:
                return store.get(f"{self.job}/tcp/{rank}").decode()
        # with hosts, the store is served in the bridge's namespace
        return self.netns.serve_in(get) if self.netns else get()


    def _spawn(self):
        env = {**os.environ, **self.env, "GLOOCY_TESTING_RANK_PROCESS": "1"}
        # The workers import this gloocy, and the test's modules as this
        # process does (its sys.path: test folders, conftest's folder).
        here = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(
            [here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env.pop("PYTEST_CURRENT_TEST", None)
        hosts = int(env.pop(TEST_HOSTS, 0))
        for rank in range(self.size):
            if hosts:
                env["GLOOCY_HOST_ID"] = f"test-host-{rank % hosts}"
            parent, child = socket.socketpair()
            with open(self._logpath(rank), "wb") as log:
                try:
                    proc = subprocess.Popen(
                        self._prefix(rank) +
                        [sys.executable, "-u", "-c", _WORKER_MAIN,
                         str(child.fileno())],
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
                comm_timeout=self.comm_timeout, sys_path=list(sys.path),
                redirects=self._links.redirects(rank) if self._links else {})))
        results = self._collect(list(range(self.size)), dict.fromkeys(
                                    range(self.size), 0), self.timeout,
                                grace=None, what="start-up (gloocy.connect)")
        check_started(self, results)
        self._failed = False

    def _prefix(self, rank):
        """The command prefix that starts rank on its host."""
        if self.netns is None:
            return []
        return self.netns.exec_prefix(self._host_of[rank])

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

    def _rank_gone(self, rank):
        return self._dead[rank] or self._procs[rank].poll() is not None

    # -- calls ---------------------------------------------------------------

    def _call(self, fn, argmap, ranks, timeout, check, grace, faults):
        self._check_usable(ranks)
        ref = _module_ref(fn)
        try:
            blobs = {r: pickle.dumps((fn, a, [f for f in faults if f.rank == r]))
                     for r, a in argmap.items()}
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise TypeError(
                f"{fn_name(fn)} and its arguments must pickle (fn must be a "
                f"module-level function): {e}") from None
        offsets = {r: self._log_size(r) for r in ranks}   # before they run
        for r in ranks:
            self._send(r, ("run", ref, blobs[r]))
        timeout = self.timeout if timeout is None else float(timeout)
        self._leaks = {}
        results = self._collect(ranks, offsets, timeout, grace,
                                what=f"{fn_name(fn)}")
        if self._leaks:
            self._failed = True       # not handed out again
            raise RankLeak(
                f"after {fn_name(fn)}, ranks hold more than when the world "
                f"formed (what the world's communicator keeps aside):\n"
                + "".join(f"--- rank {r}: {text}\n"
                          for r, text in sorted(self._leaks.items())),
                results=results)
        return self._settle(fn, ranks, results, check)

    def _send(self, rank, msg):
        try:
            self._conns[rank].send_bytes(pickle.dumps(msg))
        except OSError:
            pass      # the process is gone; _collect reports how it died

    def _collect(self, ranks, offsets, timeout, grace, what):
        """Wait for one reply from each of `ranks`; kill everything on
        timeout. offsets: where each rank's log stood before it was sent
        what it answers (a fast rank may print before we get here)."""
        start = time.monotonic()
        deadline = start + timeout
        pending = {self._conns[r]: r for r in ranks}
        results = {}
        crashed, crash_at = [], None     # ranks that raised their own errors
        while pending:
            now = time.monotonic()
            if crash_at is not None and now >= crash_at:
                self._crash(crashed)
                crashed, crash_at = [], None
            if now >= deadline:
                break
            ready = _wait_conns(list(pending),
                                timeout=min(deadline, crash_at or deadline) - now)
            for conn in ready:
                r = pending.pop(conn)
                results[r] = self._receive(r, offsets[r])
                if isinstance(results[r], RankError) and grace is not None:
                    deadline = min(deadline, time.monotonic() + grace)
                    if peers_not_told(results[r]):
                        crashed.append(r)
                        crash_at = crash_at or time.monotonic() + CRASH_AFTER
        ordered = [results.get(r) for r in ranks]
        if pending:
            hung = sorted(pending.values())
            waited = time.monotonic() - start
            self._abort_hung(hung)
            text, errors = timeout_text(
                hung, ranks, results, waited, timeout, grace, what,
                f"every rank of the world of {self.size} was killed")
            for r in hung:
                text += (f"--- rank {r} (hung) output and stacks:\n"
                         f"{self._log_since(r, offsets[r])[-OUTPUT_TAIL:].rstrip()}\n")
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

    def _crash(self, ranks):
        """End `ranks`' processes (they raised, and wait for the next call)
        as an uncaught error would in a real job, so that the peers still
        waiting for them get PeerLostError naming them."""
        for r in ranks:
            p = self._procs[r]
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait()
            self._dead[r] = True
            self._failed = True

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

    def _abort(self):
        self._kill_all()
        self._timed_out = True

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
        deadline = time.monotonic() + timeout + LEAK_WAIT
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
                    _base.close_leaks.append(
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
        if self._server is not None:
            self._server.close()
        if self._links is not None:
            self._links.close()
        if self.netns is not None:
            self.netns.close()
        shutil.rmtree(self._logdir, ignore_errors=True)
        if self in open_worlds:
            open_worlds.remove(self)
        return codes


def _host_of(hosts, size):
    """Each rank's host index under ``hosts`` (ranks per host, in rank
    order); None for no namespaces."""
    if hosts is None:
        return None
    hosts = list(hosts)
    if not hosts or any(not isinstance(k, int) or k < 1 for k in hosts) \
            or sum(hosts) != size:
        raise ValueError(f"hosts: expected positive ints summing to the "
                         f"size {size}, got {hosts!r}")
    return [h for h, k in enumerate(hosts) for _ in range(k)]


def _module_ref(fn):
    """(module name, sys.path entry that imports it) for the worker."""
    name = getattr(fn, "__module__", None)
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if name is None or path is None:
        return (name, None)
    if name == "__main__":             # a script: the worker runs it as a module
        return (name, str(Path(path).resolve()))
    root = Path(path).resolve().parent
    if Path(path).stem == "__init__":
        root = root.parent
    for _ in range(name.count(".")):
        root = root.parent
    return (name, str(root))


def _not_kept_for_life(new, comm):
    """allowed() for grown(): the part of a rank's growth since the world
    formed that the world's communicator does not keep for its lifetime:
    an eventfd for each context it keeps over the shared connections (its
    own, made once a Dup shares them; where the ranks span hosts, the
    two-level collectives' two: _hier.pxi), and the connections made on
    first use, with what a transport's library holds for them where the
    test names it (``GLOOCY_TEST_HELD_FDS=module:function``, a function
    returning those fds: the libibverbs stand-in's, whose objects hold fds
    where a real HCA's live in the kernel). All must be gone at close."""
    links = comm._ctx.links.connection_fds() | _held_by_transport()
    rest = {f for f in new.fds if f[0] not in links}
    efds = sorted(f for f in rest if f[1] == "anon_inode:[eventfd]")
    return new._replace(fds=rest - set(efds[:3]))


def _held_by_transport():
    name = os.environ.get("GLOOCY_TEST_HELD_FDS", "")
    if not name:
        return set()
    module, _, fn = name.partition(":")
    return set(getattr(importlib.import_module(module), fn)())


def _import_main(path):
    """The test's script as this worker's __main__ (as multiprocessing does:
    under the name __mp_main__, so that its `if __name__ == "__main__"`
    block does not run)."""
    if getattr(sys.modules["__main__"], "__file__", None) == path:
        return
    spec = importlib.util.spec_from_file_location("__mp_main__", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["__mp_main__"] = module
    spec.loader.exec_module(module)
    module.__file__ = path
    sys.modules["__main__"] = module


def _worker(fd):
    faulthandler.enable()                                   # crashes -> log
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # hangs -> log
    conn = Connection(fd)

    def reply(kind, payload, leaks=""):
        try:
            conn.send_bytes(pickle.dumps((kind, payload, leaks)))
        except Exception as e:          # an unpicklable result or exception
            conn.send_bytes(pickle.dumps(("err", error_payload(TypeError(
                f"cannot send the {'result' if kind == 'ok' else 'error'} "
                f"back to the test: {e!r}")), leaks)))

    kind, cfg = pickle.loads(conn.recv_bytes())
    assert kind == "init", kind
    sys.path[:0] = [p for p in cfg["sys_path"] if p not in sys.path]
    try:
        import gloocy
        from ._current import use_comm
        unconnected = resources()
        store = cfg["store"]
        if cfg["redirects"]:            # some links go through a fault proxy
            from gloocy.rendezvous import connect as store_client
            from .faults import redirected
            store = redirected(store_client(store, secret=cfg["secret"],
                                            timeout=cfg["comm_timeout"]),
                               cfg["job"], cfg["redirects"])
        try:
            comm = gloocy.connect(cfg["rank"], cfg["size"], store,
                                  secret=cfg["secret"], job=cfg["job"],
                                  timeout=cfg["comm_timeout"], host_store=False)
        finally:
            if not isinstance(store, str):
                store.close()
        use_comm(comm)                  # gloocy.testing.COMM_WORLD
        gloocy._world = comm            # gloocy.init(), gloocy.MPI.COMM_WORLD
        formed = resources()
    except BaseException as e:
        reply("err", error_payload(e))
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
                reply("err", error_payload(e))
                return 1
            reply("ok", None, grown(unconnected))
            return 0
        (modname, root), blob = body
        try:
            if modname == "__main__":
                _import_main(root)
            elif modname:
                if root and root not in sys.path:
                    sys.path.insert(0, root)
                importlib.import_module(modname)
            fn, args, faults = pickle.loads(blob)
            result = fn(wrap(comm, faults, cfg["rank"]), *args)
        except BaseException as e:
            reply("err", error_payload(e))
        else:
            reply("ok", result, grown(formed, lambda new: _not_kept_for_life(new, comm)))


# The worker's command line: the rank's end of the socket pair is argv[1].
_WORKER_MAIN = ("import sys; from gloocy.testing.processes import _worker; "
                "sys.exit(_worker(int(sys.argv[1])))")
