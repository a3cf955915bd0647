"""Intracomm.Spawn and Spawn_multiple: the root starts the children as its
own subprocesses, a world of their own that meets at a port the root
serves (their environment says where, see `child_environment`); as
gloocy.MPI makes their COMM_WORLD they Connect to it (dynamic.join_parent)
while the parents Accept, watching that no child died first.

The root reaps its children: a thread waits for each, and at exit those
still running get a grace period, then SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import threading
import time

from gloocy import dynamic
from gloocy.errors import (ERR_ARG, ERR_SPAWN, SUCCESS, ArgumentError,
                           GloocyError)

__all__ = ["spawn", "child_environment"]

EXIT_GRACE = 10.0       # seconds children may still run once we exit
CONNECTED_GRACE = 2.0   # the same for children still connected to us
KILL_GRACE = 3.0        # between SIGTERM and SIGKILL

# Variables by which a launcher tells a process its place in a job: the
# children are a job of their own, so none of the parents' may leak to them.
_LAUNCHER_VARS = (
    "GLOOCY_RANK", "GLOOCY_SIZE", "GLOOCY_LOCAL_RANK", "GLOOCY_LOCAL_SIZE",
    "GLOOCY_NODE_RANK", "GLOOCY_NNODES", "GLOOCY_STORE", "GLOOCY_SECRET",
    "GLOOCY_JOB_ID", "GLOOCY_LAUNCHER", "GLOOCY_APPNUM", dynamic.ENV_PARENT,
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "SLURM_NTASKS",
    "PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "PMIX_RANK",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
)

_children = []                          # (Popen, its intercomm) not yet reaped
_children_lock = threading.Lock()


# -- arguments -----------------------------------------------------------------

def _as_list(value, count, name, default):
    """A per-command argument of Spawn_multiple: one value for all, or a
    sequence of exactly `count`."""
    if value is None:
        return [default] * count
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ArgumentError(f"{name}: expected {count} entries (one per "
                                f"command), got {len(value)}", ERR_ARG)
        return list(value)
    if name == "args":
        raise ArgumentError(f"args: expected a sequence of {count} argument "
                            f"lists, got {value!r}", ERR_ARG)
    return [value] * count


def _commands(command, args, maxprocs, info, multiple):
    """[(argv, count, info)] of each command, checked."""
    if multiple:
        if isinstance(command, (str, bytes)) or not isinstance(command, (list, tuple)):
            raise ArgumentError(f"command: expected a sequence of commands, "
                                f"got {command!r}", ERR_ARG)
        count = len(command)
        args = _as_list(args, count, "args", None)
        maxprocs = _as_list(maxprocs, count, "maxprocs", 1)
        info = _as_list(info, count, "info", None)
    out = []
    for cmd, argv, n, inf in zip(command, args, maxprocs, info):
        if not isinstance(cmd, (str, os.PathLike)):
            raise ArgumentError(f"command: expected a str, got {cmd!r}", ERR_ARG)
        if argv is None:
            argv = []
        elif isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
            raise ArgumentError(f"args: expected a sequence of str, got "
                                f"{argv!r}", ERR_ARG)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ArgumentError(f"maxprocs: expected a positive int, got {n!r}",
                                ERR_SPAWN)
        out.append(([os.fspath(cmd)] + [os.fspath(a) for a in argv], n, inf))
    if not out:
        raise ArgumentError("command: no command to spawn", ERR_ARG)
    return out


def _hint(info, key):
    if info is None or not info:
        return None
    return info.get(key)


def _executable(argv0, info):
    """The command as run: searched in the info's "path" if given."""
    path = _hint(info, "path")
    if path and os.sep not in argv0:
        found = shutil.which(argv0, path=path.replace(":", os.pathsep))
        if found:
            return found
    return argv0


# -- the children ----------------------------------------------------------------

def child_environment(base, *, rank, size, appnum, port):
    """The environment of child `rank` of `size`: ours without any
    launcher's variables, plus those making it a world of its own over
    the port's store and telling it the parents' port."""
    env = {k: v for k, v in base.items() if k not in _LAUNCHER_VARS}
    env.update(
        GLOOCY_RANK=str(rank), GLOOCY_SIZE=str(size),
        GLOOCY_LOCAL_RANK=str(rank), GLOOCY_LOCAL_SIZE=str(size),
        GLOOCY_STORE=port.url, GLOOCY_SECRET=port.secret.hex(),
        GLOOCY_JOB_ID=f"{port.prefix}/world",
        GLOOCY_LAUNCHER="gloocy-run",   # the store is served: no rank serves it
        GLOOCY_APPNUM=str(appnum))
    env[dynamic.ENV_PARENT] = port.name
    env[dynamic.ENV_NAMES] = dynamic.name_service()
    return env


def _start(commands, port):
    """Start every child; on a failure, stop those started and raise."""
    total = sum(n for _, n, _ in commands)
    started = []
    try:
        rank = 0
        for appnum, (argv, n, info) in enumerate(commands):
            for _ in range(n):
                env = child_environment(os.environ, rank=rank, size=total,
                                        appnum=appnum, port=port)
                for line in (_hint(info, "env") or "").splitlines():
                    key, sep, value = line.partition("=")
                    if sep and key:
                        env[key.strip()] = value
                try:
                    proc = subprocess.Popen(
                        [_executable(argv[0], info)] + argv[1:], env=env,
                        cwd=_hint(info, "wdir") or None,
                        stdin=subprocess.DEVNULL)
                except OSError as e:
                    raise GloocyError(f"Spawn: cannot start {argv[0]!r}: "
                                      f"{e.strerror or e}", ERR_SPAWN) from None
                started.append((proc, argv[0], rank))
                rank += 1
    except BaseException:
        _stop([p for p, _, _ in started])
        raise
    return started


def _watcher(started):
    """What the root calls while it waits for the children: raises if one
    of them has exited (it can no longer join)."""
    def watch():
        for proc, command, rank in started:
            code = proc.poll()
            if code is not None:
                raise GloocyError(f"Spawn: child {rank} ({command!r}, pid "
                                  f"{proc.pid}) exited with status {code} "
                                  "before joining its parents", ERR_SPAWN)
    return watch


def _stop(procs, grace=0.0):
    """Wait up to `grace` seconds, then SIGTERM, then SIGKILL: none left."""
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    alive = [p for p in procs if p.poll() is None]
    for proc in alive:
        proc.terminate()
    deadline = time.monotonic() + KILL_GRACE
    for proc in alive:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _reap_in_background(procs, inter):
    """A thread waits for the children, so none lingers as a zombie."""
    entries = [(proc, inter) for proc in procs]
    with _children_lock:
        _children.extend(entries)

    def reap():
        for entry in entries:
            entry[0].wait()
            with _children_lock:
                if entry in _children:
                    _children.remove(entry)
    threading.Thread(target=reap, name="gloocy-spawn-reaper",
                     daemon=True).start()


@atexit.register
def _stop_children():
    """At exit: children still connected to us are told we leave (their
    intercommunicator closes) and get a short grace; those that
    disconnected, independent now, a longer one; then SIGTERM, SIGKILL."""
    with _children_lock:
        entries = list(_children)
    connected = [proc for proc, inter in entries if inter]
    for inter in {id(i): i for _, i in entries if i}.values():
        try:
            inter._leave()
        except Exception:
            pass
    _stop(connected, CONNECTED_GRACE)
    _stop([proc for proc, _ in entries if proc not in connected], EXIT_GRACE)


# -- Spawn -----------------------------------------------------------------------

def spawn(comm, command, args, maxprocs, info, root, errcodes, timeout,
          multiple):
    """Intracomm.Spawn (one command) / Spawn_multiple: the intercommunicator
    to the children. Collective over comm; arguments matter at root."""
    dynamic._check_intracomm(comm, root, "Spawn")
    timeout = dynamic._timeout(comm, timeout)
    server = None
    started = []

    def start_at_root():
        nonlocal server, started
        commands = _commands(command, args, maxprocs, info, multiple)
        name = dynamic.open_port()
        server = name
        started = _start(commands, dynamic.Port.parse(name))
        return name, [n for _, n, _ in commands]

    try:
        port_name, counts = dynamic.share_outcome(comm, root, start_at_root)
        watch = _watcher(started) if started else None
        inter = dynamic.meet(comm, port_name, root, True, timeout, watch,
                             f"the {sum(counts)} spawned processes (within "
                             f"{timeout:g} s; do they import gloocy.MPI?)")
    except BaseException:
        if started:
            _stop([p for p, _, _ in started])
        raise
    finally:
        if server is not None:
            dynamic.close_port(server)
    if started:
        _reap_in_background([p for p, _, _ in started], inter)
    if errcodes is not None:
        codes = [[SUCCESS] * n for n in counts]
        errcodes[:] = codes if multiple else codes[0]
    return inter
