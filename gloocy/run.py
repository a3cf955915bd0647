"""gloocy-run: start N ranks of a program on this host.

    gloocy-run -n 4 prog.py args...        (a .py file runs with this Python)
    gloocy-run -n 4 python -m package ...   (any other command runs as given)

On M hosts, run one per host, like torchrun (node 0 serves the store, at an
address of its own the others can reach; all share GLOOCY_SECRET if set):

    gloocy-run --nnodes M --node-rank K --store HOST:PORT -n N prog.py

The launcher embeds the TCP store the ranks meet at and tells each rank
where it is through its environment (see ``ENV_VARS``). Output lines of
rank r are prefixed with "[r] ", standard input goes to rank 0, signals
are forwarded, and the first rank that fails stops the whole job.

Python ranks (``prog.py``, ``python -m module``, with this interpreter)
are forked from a server that has imported NumPy and gloocy already
(gloocy._forkserver); ``--no-fork-server`` or GLOOCY_FORK_SERVER=0 starts
each as a fresh interpreter instead.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from typing import BinaryIO

from gloocy._forkserver import ForkedRank, ForkServer, python_program
from gloocy.rendezvous import TCPStoreServer

__all__ = ["main", "run_job", "ENV_VARS", "GRACE"]

GRACE = 3.0  # seconds between SIGTERM (or a forwarded signal) and SIGKILL
LEAVE_WAIT = 15.0  # the longest node 0 keeps the store for the other nodes' ranks

ENV_VARS = (
    "GLOOCY_RANK", "GLOOCY_SIZE", "GLOOCY_LOCAL_RANK", "GLOOCY_LOCAL_SIZE",
    "GLOOCY_NODE_RANK", "GLOOCY_NNODES", "GLOOCY_STORE", "GLOOCY_SECRET",
    "GLOOCY_JOB_ID", "GLOOCY_LAUNCHER",
)

_print_lock = threading.Lock()  # one line at a time on the launcher's outputs


def _death_signal():
    """What each rank runs before exec: the kernel kills it if gloocy-run
    dies (even by SIGKILL), so no rank outlives its job. prctl is looked up
    here, once: a rank's child then only calls it (no import, no dlopen
    between its fork and its exec)."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def die_with_launcher():
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    return die_with_launcher


def _say(message: str) -> None:
    with _print_lock:
        try:
            sys.stderr.flush()
            sys.stderr.buffer.write(f"gloocy-run: {message}\n".encode())
            sys.stderr.buffer.flush()
        except (OSError, ValueError):
            pass


def _pump(pipe: BinaryIO, dest: BinaryIO, prefix: bytes) -> None:
    """Copy ``pipe`` to ``dest`` line by line, each line prefixed."""
    with pipe:
        for line in iter(pipe.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            with _print_lock:
                try:
                    dest.write(prefix + line)
                    dest.flush()
                except (OSError, ValueError):
                    pass  # our output is gone; keep draining so the rank never blocks


def _reap(rank: int, proc: subprocess.Popen, events: queue.SimpleQueue) -> None:
    events.put(("exit", rank, proc.wait()))


def _describe(rank: int, returncode: int) -> str:
    if returncode < 0:
        try:
            name = f" ({signal.Signals(-returncode).name})"
        except ValueError:
            name = ""
        return f"rank {rank} was killed by signal {-returncode}{name}"
    return f"rank {rank} exited with code {returncode}"


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _signal_all(procs: list[subprocess.Popen], sig: int) -> None:
    """Send ``sig`` to each live rank's process group (the rank and its children)."""
    for p in procs:
        if p.returncode is None:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _supervise(procs: list[subprocess.Popen], events: queue.SimpleQueue,
               timeout: float | None, result: int | None) -> int:
    """Wait for every rank; stop them all at the first failure, signal or timeout.

    ``result`` is the job's exit code once something decided it (None so far).
    """
    alive = len(procs)
    deadline = time.monotonic() + timeout if timeout is not None else None
    kill_at = None
    if result is not None:  # failed while starting the ranks
        _signal_all(procs, signal.SIGTERM)
        kill_at = time.monotonic() + GRACE

    while alive:
        wakeups = [t for t in (kill_at, deadline if result is None else None) if t is not None]
        wait = min(wakeups) - time.monotonic() if wakeups else 1.0
        try:
            event = events.get(timeout=min(max(wait, 0.0), 1.0))
        except queue.Empty:
            event = None
        now = time.monotonic()

        if event is not None and event[0] == "exit":
            _, rank, returncode = event
            alive -= 1
            if returncode != 0 and result is None:
                _say(_describe(rank, returncode))
                result = _exit_code(returncode)
                _signal_all(procs, signal.SIGTERM)
                kill_at = now + GRACE
        elif event is not None and event[0] == "signal":
            sig = event[1]
            if result is None:
                _say(f"got {signal.Signals(sig).name}, stopping {alive} rank(s)")
                result = 128 + sig
                _signal_all(procs, sig)
                kill_at = now + GRACE
            else:  # a second Ctrl-C: no more patience
                kill_at = now

        if result is None and deadline is not None and now >= deadline:
            _say(f"job timed out after {timeout:g} s")
            result = 124
            _signal_all(procs, signal.SIGTERM)
            kill_at = now + GRACE
        if kill_at is not None and now >= kill_at:
            _signal_all(procs, signal.SIGKILL)
            kill_at = None
    return result or 0


def _shared_job(store: str) -> tuple[bytes, str]:
    """Secret and job id every node of a multi-host job computes alike:
    GLOOCY_SECRET (hex) and GLOOCY_JOB_ID if set, else derived from the
    store's address (which keeps other jobs out, not attackers)."""
    job = os.environ.get("GLOOCY_JOB_ID") or hashlib.sha256(
        b"gloocy-job:" + store.encode()).hexdigest()[:16]
    text = os.environ.get("GLOOCY_SECRET", "")
    secret = bytes.fromhex(text) if text else hashlib.sha256(
        b"gloocy-secret:" + job.encode()).digest()
    return secret, job


def _serve(host: str, port: int, secret: bytes):
    try:
        return TCPStoreServer(host, port, secret=secret)
    except (OSError, ValueError) as e:
        _say(f"cannot start the store on {host!r} port {port}: {e}")
        return None


def _fork_ranks(forker: ForkServer, program: tuple, envs: list[tuple[int, dict]]):
    """Each (rank, env) forked by the server, with pipes for its output as
    Popen(stdout=PIPE, stderr=PIPE) makes them (our stdin for rank 0):
    ([(rank, ForkedRank)], the OSError that stopped the start or None).
    Every rank is asked for before the first answer is read."""
    kind, target, args = program
    asked, error = [], None
    for rank, env in envs:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        stdin = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if rank == 0:
                with contextlib.suppress(OSError):   # no stdin of ours: /dev/null
                    os.fstat(0)
                    os.dup2(0, stdin, inheritable=False)
            forker.request(kind, target, args, env=env, cwd=os.getcwd(),
                           stdin=stdin, stdout=out_w, stderr=err_w)
        except OSError as e:
            error = e
            os.close(out_r)
            os.close(err_r)
            break
        finally:
            for fd in (stdin, out_w, err_w):
                os.close(fd)
        asked.append((rank, out_r, err_r))
    started = []
    for rank, out_r, err_r in asked:
        try:
            pid = forker.pid()
        except OSError as e:
            error = error or e
            os.close(out_r)
            os.close(err_r)
            continue
        proc = ForkedRank(pid, os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))
        forker.track(proc)
        started.append((rank, proc))
    return started, error


def _exec_ranks(command: list[str], envs: list[tuple[int, dict]], before_exec):
    """Each (rank, env) started as ``command``: as _fork_ranks answers."""
    started = []
    for rank, env in envs:
        try:
            started.append((rank, subprocess.Popen(
                command, env=env,
                stdin=None if rank == 0 else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True,  # our signals, not the terminal's
                preexec_fn=before_exec)))
        except OSError as e:
            return started, e
    return started, None


def run_job(command: list[str], *, n: int, host: str = "127.0.0.1",
            timeout: float | None = None, nnodes: int = 1, node_rank: int = 0,
            store: str | None = None, fork_server: bool = True,
            forker: ForkServer | None = None) -> int:
    """Run ``command`` as ranks node_rank*n .. node_rank*n + n-1 of a job of
    nnodes*n ranks and return this node's exit code. ``fork_server``: fork
    Python ranks from a server that imported NumPy and gloocy already
    (gloocy._forkserver), else start each as a fresh interpreter;
    ``forker``: that server, started already (the caller closes it)."""
    if store is None:
        secret, job = secrets.token_bytes(32), secrets.token_hex(8)
        server = _serve(host, 0, secret)
    else:
        secret, job = _shared_job(store)
        url = urllib.parse.urlsplit(store)
        server = contextlib.nullcontext()
        if node_rank == 0 and url.scheme == "tcp":
            server = _serve(url.hostname, url.port, secret)
    if server is None:
        return 1
    events: queue.SimpleQueue = queue.SimpleQueue()  # put() is safe in signal handlers
    procs: list[subprocess.Popen | ForkedRank] = []
    threads: list[threading.Thread] = []
    result = None

    def on_signal(signum: int, frame: object) -> None:
        events.put(("signal", signum))

    with server.start() if isinstance(server, TCPStoreServer) else server:
        common = {
            "GLOOCY_SIZE": str(n * nnodes),
            "GLOOCY_LOCAL_SIZE": str(n),
            "GLOOCY_NODE_RANK": str(node_rank),
            "GLOOCY_NNODES": str(nnodes),
            "GLOOCY_STORE": store or server.url,
            "GLOOCY_SECRET": secret.hex(),  # in the environment, never on a command line
            "GLOOCY_JOB_ID": job,
            "GLOOCY_LAUNCHER": "gloocy-run",
            "PYTHONUNBUFFERED": "1",
        }
        # Installed before the first rank starts, so no signal is lost.
        in_main = threading.current_thread() is threading.main_thread()
        handled = (signal.SIGINT, signal.SIGTERM) if in_main else ()
        old = {s: signal.signal(s, on_signal) for s in handled}
        die_with_launcher = _death_signal()
        program = python_program(command) if fork_server else None
        ours = forker is None
        try:
            if program is not None and ours:
                forker = ForkServer.start(dict(os.environ, **common), die_with_launcher)
            envs = [(node_rank * n + local,
                     dict(os.environ, **common, GLOOCY_RANK=str(node_rank * n + local),
                          GLOOCY_LOCAL_RANK=str(local))) for local in range(n)]
            if forker is not None:
                started, error = _fork_ranks(forker, program, envs)
            else:
                started, error = _exec_ranks(command, envs, die_with_launcher)
            if error is not None:
                _say(f"cannot start {command[0]!r}: {error.strerror or error}")
                result = 127 if isinstance(error, FileNotFoundError) else 126
            for rank, p in started:
                procs.append(p)
                prefix = f"[{rank}] ".encode()
                for target, args in ((_pump, (p.stdout, sys.stdout.buffer, prefix)),
                                     (_pump, (p.stderr, sys.stderr.buffer, prefix)),
                                     (_reap, (rank, p, events))):
                    threads.append(threading.Thread(target=target, args=args, daemon=True))
                    threads[-1].start()
            result = _supervise(procs, events, timeout, result)
            if result == 0 and nnodes > 1 and isinstance(server, TCPStoreServer):
                _let_the_others_leave(server, events)
        finally:
            # Ranks are reaped by now (unless we are unwinding an error); kill
            # anything they left in their process groups, then drain the output.
            _signal_all(procs, signal.SIGKILL)
            for p in procs:
                p.wait()
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if forker is not None and ours:
                forker.close()
            end = time.monotonic() + 5.0
            for t in threads:
                t.join(max(end - time.monotonic(), 0))
            for s, h in old.items():
                signal.signal(s, h)
    return result


def _let_the_others_leave(server: TCPStoreServer, events: queue.SimpleQueue) -> None:
    """Node 0 serves the store, and its ranks are done: the other nodes'
    ranks may still need it (connections are made on first use, and a rank
    leaving says so there). Keep it until their clients have gone, for up
    to LEAVE_WAIT seconds (a rank that finds it gone as it leaves waits a
    few seconds, not the job's deadline: lazy.py), or until a signal comes."""
    end = time.monotonic() + LEAVE_WAIT
    while time.monotonic() < end:
        if server.wait_clients(0, 0.2):
            return
        try:
            event = events.get_nowait()
        except queue.Empty:
            continue
        if event[0] == "signal":
            return


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gloocy-run", allow_abbrev=False,
        description="Run N ranks of a program on this host with gloocy.",
        epilog="A program ending in .py runs with the current Python; "
               "anything else runs as given.")
    parser.add_argument("-n", "-np", "--np", dest="n", type=int, required=True,
                        metavar="N", help="number of ranks (>= 1)")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="wall-clock limit of the whole job in seconds; "
                             "past it every rank is killed and the exit code is 124")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address the embedded store binds to (default: 127.0.0.1)")
    parser.add_argument("--nnodes", type=int, default=1, metavar="M",
                        help="hosts in the job, one gloocy-run on each (default: 1)")
    parser.add_argument("--node-rank", type=int, default=0, metavar="K",
                        help="this host's number, 0..M-1; node 0 serves the store")
    parser.add_argument("--store", metavar="URL",
                        help="where the ranks meet: HOST:PORT (tcp://; node 0 "
                             "serves it at that address), or a redis://, "
                             "file:// store URL; needed when M > 1")
    parser.add_argument("--fork-server", action=argparse.BooleanOptionalAction,
                        default=os.environ.get("GLOOCY_FORK_SERVER", "1").lower()
                        not in ("0", "no", "false", "off"),
                        help="fork Python ranks from a process that imported "
                             "NumPy and gloocy already (default: on, unless "
                             "GLOOCY_FORK_SERVER=0); off: a fresh interpreter each")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="program and its arguments")
    return parser


def main(argv: list[str] | None = None, *, fork_here: bool = False) -> int:
    """gloocy-run's command line. ``fork_here``: the fork server may be
    this process, forked before the job starts (only from the entry
    point: in the server's children, this call ends as their program does)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        command = args.command
        if command[:1] == ["--"]:
            command = command[1:]
        if not command:
            parser.error("missing the program to run")
        if args.n < 1:
            parser.error(f"-n must be >= 1, got {args.n}")
        if args.timeout is not None and not args.timeout > 0:
            parser.error(f"--timeout must be > 0, got {args.timeout}")
        if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
            parser.error(f"--node-rank must be in 0..{args.nnodes - 1} and "
                         f"--nnodes >= 1, got {args.node_rank} and {args.nnodes}")
        if args.nnodes > 1 and args.store is None:
            parser.error("--nnodes > 1 needs --store HOST:PORT (node 0's address)")
        store = args.store
        if store is not None and "://" not in store:
            store = f"tcp://{store}"
    except SystemExit as e:  # usage errors (2) and --help (0)
        return e.code if isinstance(e.code, int) else 0
    if command[0].endswith(".py"):
        command = [sys.executable, *command]
    forker = None
    if fork_here and args.fork_server and _started_plain() \
            and threading.active_count() == 1 and python_program(command) is not None:
        forker = ForkServer.fork(_death_signal())   # (a rank never returns from it)
    try:
        return run_job(command, n=args.n, host=args.host, timeout=args.timeout,
                       nnodes=args.nnodes, node_rank=args.node_rank, store=store,
                       fork_server=args.fork_server, forker=forker)
    finally:
        if forker is not None:
            forker.close()


def _started_plain() -> bool:
    """Whether this interpreter has no options of its own (``python -m
    gloocy.run`` or the gloocy-run script): a rank forked from it is then
    the interpreter ``python prog.py`` starts, flags included."""
    rest = sys.orig_argv[1:]
    return bool(rest) and (rest[0] == "-m" or not rest[0].startswith("-"))


def console() -> int:
    """The ``gloocy-run`` command: its fork server is this process, forked
    once the arguments are read, so no rank waits for a second import of
    NumPy and gloocy."""
    return main(fork_here=True)


if __name__ == "__main__":
    sys.exit(console())
