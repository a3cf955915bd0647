"""gloocy-run: start N ranks of a program on this host.

    gloocy-run -n 4 prog.py args...        (a .py file runs with this Python)
    gloocy-run -n 4 python -m package ...   (any other command runs as given)

The launcher embeds the TCP store the ranks meet at and tells each rank
where it is through its environment (see ``ENV_VARS``). Output lines of
rank r are prefixed with "[r] ", standard input goes to rank 0, signals
are forwarded, and the first rank that fails stops the whole job.
"""

from __future__ import annotations

import argparse
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from typing import BinaryIO

from gloocy.rendezvous import TCPStoreServer

__all__ = ["main", "run_job", "ENV_VARS", "GRACE"]

GRACE = 3.0  # seconds between SIGTERM (or a forwarded signal) and SIGKILL

ENV_VARS = (
    "GLOOCY_RANK", "GLOOCY_SIZE", "GLOOCY_LOCAL_RANK", "GLOOCY_LOCAL_SIZE",
    "GLOOCY_STORE", "GLOOCY_SECRET", "GLOOCY_JOB_ID", "GLOOCY_LAUNCHER",
)

_print_lock = threading.Lock()  # one line at a time on the launcher's outputs


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


def run_job(command: list[str], *, n: int, host: str = "127.0.0.1",
            timeout: float | None = None) -> int:
    """Run ``command`` as ranks 0..n-1 and return the job's exit code."""
    secret = secrets.token_bytes(32)
    events: queue.SimpleQueue = queue.SimpleQueue()  # put() is safe in signal handlers
    procs: list[subprocess.Popen] = []
    threads: list[threading.Thread] = []
    result = None

    def on_signal(signum: int, frame: object) -> None:
        events.put(("signal", signum))

    try:
        server = TCPStoreServer(host, 0, secret=secret)
    except (OSError, ValueError) as e:
        _say(f"cannot start the store on {host!r}: {e}")
        return 1
    with server.start():
        common = {
            "GLOOCY_SIZE": str(n),
            "GLOOCY_LOCAL_SIZE": str(n),
            "GLOOCY_STORE": server.url,
            "GLOOCY_SECRET": secret.hex(),  # in the environment, never on a command line
            "GLOOCY_JOB_ID": secrets.token_hex(8),
            "GLOOCY_LAUNCHER": "gloocy-run",
            "PYTHONUNBUFFERED": "1",
        }
        # Installed before the first rank starts, so no signal is lost.
        in_main = threading.current_thread() is threading.main_thread()
        handled = (signal.SIGINT, signal.SIGTERM) if in_main else ()
        old = {s: signal.signal(s, on_signal) for s in handled}
        try:
            for rank in range(n):
                env = dict(os.environ, **common,
                           GLOOCY_RANK=str(rank), GLOOCY_LOCAL_RANK=str(rank))
                try:
                    p = subprocess.Popen(
                        command, env=env,
                        stdin=None if rank == 0 else subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        start_new_session=True)  # our signals, not the terminal's
                except OSError as e:
                    _say(f"cannot start {command[0]!r}: {e.strerror or e}")
                    result = 127 if isinstance(e, FileNotFoundError) else 126
                    break
                procs.append(p)
                prefix = f"[{rank}] ".encode()
                for target, args in ((_pump, (p.stdout, sys.stdout.buffer, prefix)),
                                     (_pump, (p.stderr, sys.stderr.buffer, prefix)),
                                     (_reap, (rank, p, events))):
                    threads.append(threading.Thread(target=target, args=args, daemon=True))
                    threads[-1].start()
            result = _supervise(procs, events, timeout, result)
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
            end = time.monotonic() + 5.0
            for t in threads:
                t.join(max(end - time.monotonic(), 0))
            for s, h in old.items():
                signal.signal(s, h)
    return result


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
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="program and its arguments")
    return parser


def main(argv: list[str] | None = None) -> int:
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
    except SystemExit as e:  # usage errors (2) and --help (0)
        return e.code if isinstance(e.code, int) else 0
    if command[0].endswith(".py"):
        command = [sys.executable, *command]
    return run_job(command, n=args.n, host=args.host, timeout=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
