"""gloocy-run's fork server: Python ranks forked from a parent that has
already imported NumPy and gloocy, so that N ranks on a few cores do not
each pay for those imports (most of a rank's start-up).

The server is either the launcher itself, forked as gloocy-run starts
(``ForkServer.fork``: the launcher has imported NumPy and gloocy already,
so no rank waits for a second import), or a fresh interpreter started with
the job's environment (``ForkServer.start``, for ``run_job`` called from a
program). It imports ``PRELOAD`` -- no communicator, store client,
socket or thread of its own is made -- then forks one child per request
on its socket. A child becomes what ``python prog.py args`` (or ``python
-m module args``) would have been: its own session and parent-death
signal, the rank's environment (os.environ and the C environment), cwd,
the three descriptors sent with the request as stdin/stdout/stderr,
sys.argv, sys.path[0], a fresh ``__main__``, NumPy's global random state
reseeded (``random`` reseeds itself after a fork); then it runs the
program and leaves through the interpreter's own exit (non-daemon threads
joined, atexit handlers run, streams flushed). The server reports each
child's pid, and its exit status once reaped, to the launcher.

What a fork cannot give: the hash seed (str hashes) is the server's, the
same in every rank; variables NumPy reads as it is imported (its BLAS's
thread counts) are the launcher's, not those a program puts in os.environ
first; modules in PRELOAD come from the launcher's sys.path,
not from the program's directory (the launcher falls back to exec when
that directory holds a numpy or gloocy of its own); settings read when
those modules are imported are read before the program runs, so none of
them may be read then (tests/system/test_fork_server.py checks it).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

__all__ = ["PRELOAD", "ForkServer", "ForkedRank", "python_program"]

# What `from gloocy import MPI` imports, less gloocy.MPI itself (whose
# import joins the job).
PRELOAD = ("numpy", "gloocy", "gloocy.rendezvous.env", "gloocy.rendezvous.tcp_store",
           "gloocy.rma.constants", "gloocy.session")
_MAX_MESSAGE = 1 << 20  # a request: environment, argv and cwd
READY_TIMEOUT = 60.0    # seconds the server may take to import PRELOAD


def python_program(command: list[str]) -> tuple[str, str, list[str]] | None:
    """("path", prog, args) for ``[python, prog, *args]`` and ("module",
    name, args) for ``[python, -m, name, *args]`` when python is this
    interpreter (same file, same directory: a venv's python links to its
    base, whose site-packages differ); None for anything else, interpreter
    options included."""
    found = shutil.which(command[0])
    if found is None or os.path.dirname(os.path.abspath(found)) != \
            os.path.dirname(os.path.abspath(sys.executable)):
        return None
    try:
        if not os.path.samefile(found, sys.executable):
            return None
    except OSError:
        return None
    rest = command[1:]
    if len(rest) >= 2 and rest[0] == "-m" and not rest[1].startswith("-"):
        kind, target, args, first = "module", rest[1], rest[2:], os.getcwd()
    elif rest and not rest[0].startswith("-") and os.path.isfile(rest[0]):
        kind, target, args = "path", rest[0], rest[1:]
        first = os.path.dirname(os.path.realpath(rest[0]))
    else:
        return None
    for name in {m.partition(".")[0] for m in PRELOAD}:   # shadowed by the program's own?
        if any(os.path.exists(os.path.join(first, name + ext)) for ext in ("", ".py")):
            return None
    return kind, target, args


# -- the launcher's side ---------------------------------------------------------

class ForkedRank:
    """What the launcher holds of a forked rank (Popen's pid, returncode,
    wait, stdout and stderr)."""

    def __init__(self, pid: int, stdout, stderr):
        self.pid, self.stdout, self.stderr = pid, stdout, stderr
        self.returncode: int | None = None
        self._done = threading.Event()

    def wait(self) -> int:
        self._done.wait()
        return self.returncode

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._done.set()


class ForkServer:
    """A fork server for one job: ``start(env)`` (None when it could not
    start); ``request(...)`` a rank, ``pid()`` its answer, ``track`` the
    rank; ``close()`` once every rank is reaped."""

    def __init__(self, proc: subprocess.Popen, sock: socket.socket):
        self._proc, self._sock = proc, sock
        self._ranks: dict[int, ForkedRank] = {}
        self._early: dict[int, int] = {}        # exits reported before track()
        self._replies: list = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name="gloocy-run-fork-server")
        self._reader.start()

    @classmethod
    def fork(cls, before_serving) -> "ForkServer | None":
        """The server as a fork of this process, which must have no other
        thread. In the parent: the server (None if it could not start).
        In the server's children this call does not return: it raises the
        rank's SystemExit (or its exception), so it is made where nothing
        between it and the interpreter's top level catches that or cleans
        up after it (gloocy-run's entry point)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            return None
        if pid == 0:
            ours.close()
            os.setsid()                         # as start_new_session
            before_serving()
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.closerange(3, theirs.fileno())   # the launcher's other descriptors
            os.closerange(theirs.fileno() + 1, os.sysconf("SC_OPEN_MAX"))
            if not sys.flags.safe_path:
                del sys.path[0]                 # the launcher's directory, not a rank's
            server = os.getpid()
            try:
                # _serve's socket owns the descriptor from here: `theirs`,
                # left owning it too, would close it again as a rank's
                # program ends, by then another file of the rank's own.
                _serve(theirs.detach())
            except BaseException as e:
                if os.getpid() != server:
                    raise                       # a rank's end: the interpreter's own exit
                # The server's end, which must not unwind into the launcher's code.
                os._exit(0 if isinstance(e, SystemExit) else 1)
        theirs.close()
        return cls._ready(_Forked(pid), ours)

    @classmethod
    def start(cls, env: dict, before_exec=None) -> "ForkServer | None":
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            try:
                proc = subprocess.Popen(
                    # (without -c's sys.path entry, the cwd: a rank would not
                    # import gloocy or NumPy from there)
                    [sys.executable, "-c", "import sys; del sys.path[0]; "
                     "from gloocy._forkserver import _serve; "
                     f"_serve({theirs.fileno()})"],
                    env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    pass_fds=(theirs.fileno(),), start_new_session=True,
                    preexec_fn=before_exec)
            except OSError:
                ours.close()
                return None
        return cls._ready(proc, ours)

    @classmethod
    def _ready(cls, proc, ours: socket.socket) -> "ForkServer | None":
        """The server once it says it imported PRELOAD; None if it died."""
        ours.settimeout(READY_TIMEOUT)
        try:
            ready = ours.recv(_MAX_MESSAGE)     # after its imports; b"" if it died
        except OSError:                         # (socket.timeout too)
            ready = b""
        if not ready:
            ours.close()
            proc.kill()
            proc.wait()
            return None
        ours.settimeout(None)
        return cls(proc, ours)

    def request(self, kind: str, target: str, args: list[str], *, env: dict,
                cwd: str, stdin: int, stdout: int, stderr: int) -> None:
        """Ask for a rank with these descriptors as its 0, 1, 2 (they may
        be closed once this returns); ``pid()`` answers, in order. Asking
        for every rank before the first answer saves a round trip each,
        which on a loaded machine costs two waits for a core."""
        message = json.dumps({"kind": kind, "target": target, "args": args,
                              "env": env, "cwd": cwd}).encode()
        socket.send_fds(self._sock, [message], [stdin, stdout, stderr])

    def pid(self) -> int:
        """The pid of the rank of the oldest request not answered yet."""
        with self._cond:
            while not self._replies:
                self._cond.wait()
            reply = self._replies.pop(0)
        if "error" in reply:
            raise OSError(reply.get("errno", 0), reply["error"])
        return reply["pid"]

    def track(self, rank: ForkedRank) -> None:
        """Report ``rank``'s exit to it (also if it came already)."""
        with self._cond:
            self._ranks[rank.pid] = rank
            code = self._early.pop(rank.pid, None)
        if code is not None:
            rank._exited(code)

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(_MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            with self._cond:
                if "exit" in message:
                    pid, code = message["exit"]
                    rank = self._ranks.pop(pid, None)
                    if rank is None:
                        self._early[pid] = code
                else:
                    self._replies.append(message)
                    self._cond.notify_all()
                    continue
            if rank is not None:
                rank._exited(code)
        # The server is gone, and its children with it (their parent-death
        # signal): none will be reported any more.
        with self._cond:
            left, self._ranks = list(self._ranks.values()), {}
            self._replies.append({"error": "the fork server exited"})
            self._cond.notify_all()
        for rank in left:
            rank._exited(-signal.SIGKILL)

    def close(self) -> None:
        """The server leaves once its socket closes."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self._proc.wait(5.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(5.0)


class _Forked:
    """A forked server as ``close()`` waits for it (Popen's wait and kill)."""

    def __init__(self, pid: int):
        self.pid = pid

    def wait(self, timeout: float | None = None) -> None:
        end = None if timeout is None else time.monotonic() + timeout
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired("fork server", timeout)
            time.sleep(0.005)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)


# -- the server's side -----------------------------------------------------------

def _serve(fd: int) -> None:
    """The server's main loop; returns only in a child, into the program."""
    sock = socket.socket(fileno=fd)
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)
    import ctypes
    prctl = ctypes.CDLL(None, use_errno=True).prctl   # looked up once, called in each child
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    me = os.getpid()
    sock.send(json.dumps({"ready": me}).encode())
    while True:
        readable, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(sock)
        if sock not in readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 3)
        except OSError:
            data, fds = b"", []
        if not data:                            # the launcher is done (or gone)
            sys.exit(0)
        request = json.loads(data)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as e:
            for f in fds:
                os.close(f)
            sock.send(json.dumps({"error": str(e), "errno": e.errno}).encode())
            continue
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for f in (wake_r, wake_w):
                os.close(f)
            sock.close()
            _become_rank(request, fds, prctl, me)
            return
        for f in fds:
            os.close(f)
        sock.send(json.dumps({"pid": pid}).encode())


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(json.dumps({"exit": [pid, os.waitstatus_to_exitcode(status)]}).encode())


def _become_rank(request: dict, fds: list[int], prctl, server: int) -> None:
    """In the child: the process ``python prog.py`` would have started,
    then the program itself; does not return."""
    os.setsid()                                 # our own group: the launcher signals it
    prctl(1, signal.SIGKILL)                    # die with the server (so with the launcher)
    if os.getppid() != server:
        os._exit(1)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)                     # inheritable, as a fresh process's 0, 1, 2
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.environ.clear()                          # (through unsetenv/putenv: C sees it too)
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    _fresh_stdio()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()                     # else every rank draws the same numbers
    sys.exit(_run(request["kind"], request["target"], request["args"]))


def _fresh_stdio() -> None:
    """sys.stdin/stdout/stderr over descriptors 0-2 as the interpreter
    makes them at start-up (-u / PYTHONUNBUFFERED: stdout and stderr
    unbuffered and written through)."""
    import io
    unbuffered = isinstance(sys.stdout.buffer, io.FileIO)  # how ours were made
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        old = getattr(sys, name)
        write = fd > 0
        raw = io.FileIO(fd, "w" if write else "r", closefd=False)
        raw.name = f"<{name}>"
        if write and unbuffered:
            buffer = raw
        else:
            buffer = (io.BufferedWriter if write else io.BufferedReader)(raw)
        stream = io.TextIOWrapper(
            buffer, encoding=old.encoding, errors=old.errors, newline="\n",
            line_buffering=not unbuffered and (fd == 2 or raw.isatty()),
            write_through=unbuffered)
        stream.mode = "w" if write else "r"
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _run(kind: str, target: str, args: list[str]):
    """Run the program as __main__: 0, or its exception passed on."""
    import builtins
    import runpy
    import types
    sys.orig_argv = [sys.executable] + (["-m", target] if kind == "module" else [target]) + args
    main = types.ModuleType("__main__")
    main.__annotations__, main.__builtins__ = {}, builtins   # as the interpreter's own has
    sys.modules["__main__"] = main
    if kind == "module":
        sys.argv = ["-m"] + args                # runpy puts the module's file first
        sys.path.insert(0, os.getcwd())
        run = lambda: runpy._run_module_as_main(target)      # what `python -m` runs  # noqa: E731
    else:
        from importlib.machinery import SourceFileLoader
        path = os.path.abspath(target)
        sys.argv = [target] + args
        sys.path.insert(0, os.path.dirname(os.path.realpath(target)))
        main.__file__, main.__cached__ = path, None
        main.__loader__ = SourceFileLoader("__main__", path)
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
        run = lambda: exec(code, main.__dict__)  # noqa: E731
    try:
        run()
    except SystemExit:
        raise
    except BaseException as e:
        # Shown as the interpreter shows it, without this module's frames;
        # then the exception ends the interpreter as it would have (code 1,
        # or SIGINT after a KeyboardInterrupt), its hook showing nothing more.
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        sys.excepthook(type(e), e, e.with_traceback(tb).__traceback__)
        sys.excepthook = lambda *_: None
        raise
    return 0
