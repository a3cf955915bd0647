"""gloocy-run's fork server (gloocy/_forkserver.py): a rank forked from it
must be the process `python prog.py` would have been. The oracle is a
fresh interpreter running the same program."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gloocy._forkserver import PRELOAD

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONUNBUFFERED="1", GLOOCY_FORK_SERVER="1",
           PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
LAUNCHER = [sys.executable, "-m", "gloocy.run"]
# The command forks its fork server from itself; a program calling main()
# gets a fresh interpreter as its server. Ranks must not tell them apart.
LAUNCHERS = {"gloocy-run": LAUNCHER,
             "main() in a program": [sys.executable, "-c", "import sys; from gloocy.run "
                                     "import main; sys.exit(main(sys.argv[1:]))"]}

# What a program can see of the process it runs in (its first lines).
REPORT = """
import json, os, signal, sys
_preloaded = "numpy" in sys.modules
def _stream(s):
    return [s.encoding, s.errors, s.line_buffering, s.write_through, s.mode,
            s.buffer.name if hasattr(s, "buffer") else None,
            type(getattr(s.buffer, "raw", s.buffer)).__name__, s.isatty()]
_report = {
    "argv": sys.argv, "orig_argv": sys.orig_argv[1:], "path0": sys.path[0],
    "cwd": os.getcwd(), "globals": sorted(globals()), "file": __file__,
    "name": __name__, "spec": repr(__spec__)[:40], "package": __package__,
    "loader": type(__loader__).__name__, "cached": __cached__,
    "stdio": [_stream(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
    "same_dunder": [sys.stdin is sys.__stdin__, sys.stdout is sys.__stdout__],
    "fds": sorted(os.listdir("/proc/self/fd")),
    "signals": [str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM,
                                                  signal.SIGCHLD, signal.SIGPIPE)],
    "main_is_module": sys.modules["__main__"].__dict__ is globals(),
    "flags": list(sys.flags), "pgid_is_pid": os.getpgid(0) == os.getpid(),
}
"""


def rank_lines(out: bytes, rank: int = 0) -> list[str]:
    """What rank `rank` wrote, without gloocy-run's prefix."""
    prefix = f"[{rank}] "
    return [line[len(prefix):] for line in out.decode().splitlines() if line.startswith(prefix)]


def launch(args, cwd, timeout=60, env=ENV, launcher=LAUNCHER):
    return subprocess.run([*launcher, *args], cwd=cwd, env=env, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def fresh(args, cwd, extra_env=None, timeout=60):
    """The oracle: the program in a fresh interpreter, as rank 0 of 1."""
    env = dict(ENV, GLOOCY_RANK="0", **(extra_env or {}))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=timeout,
                          start_new_session=True)     # as gloocy-run starts a rank


def write(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return path


def report(out: list[str]) -> dict:
    return json.loads(next(line for line in out if line.startswith("{")))


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
@pytest.mark.parametrize("how", ["script", "symlinked script", "module"])
def test_a_forked_rank_is_the_process_python_would_start(tmp_path, how, launcher):
    body = REPORT + "print(json.dumps(dict(_report, preloaded=_preloaded)))\n"
    real = write(tmp_path / "code" / "pkg" / "prog.py", body)
    write(tmp_path / "code" / "pkg" / "__init__.py", "")
    if how == "script":
        args = ["code/pkg/prog.py", "a", "-b"]
    elif how == "symlinked script":
        (tmp_path / "link.py").symlink_to(real)
        args = ["link.py", "a", "-b"]
    else:
        args = ["-m", "pkg.prog", "a", "-b"]
    cwd = tmp_path / "code" if how == "module" else tmp_path
    ran = launch(["-n", "1", sys.executable, *args], cwd, launcher=LAUNCHERS[launcher])
    assert ran.returncode == 0, ran.stderr.decode()
    got = report(rank_lines(ran.stdout))
    expected = fresh(args, cwd)
    assert expected.returncode == 0, expected.stderr.decode()
    want = report(expected.stdout.decode().splitlines())
    assert got.pop("preloaded") is True      # the fork server ran it (numpy was there)
    assert want.pop("preloaded") is False
    assert got == want


def test_python_options_or_a_shadowing_directory_start_a_fresh_interpreter(tmp_path):
    prog = write(tmp_path / "prog.py", 'import sys; print("numpy" in sys.modules)\n')
    runs = {
        "default": [sys.executable, str(prog)],
        "interpreter option": [sys.executable, "-u", str(prog)],
        "--no-fork-server": ["--no-fork-server", sys.executable, str(prog)],
    }
    seen = {what: rank_lines(launch(["-n", "1", *cmd], tmp_path).stdout)
            for what, cmd in runs.items()}
    (tmp_path / "numpy").mkdir()             # the program's own numpy would be imported
    seen["shadowed numpy"] = rank_lines(launch(["-n", "1", str(prog)], tmp_path).stdout)
    assert seen == {"default": ["True"], "interpreter option": ["False"],
                    "--no-fork-server": ["False"], "shadowed numpy": ["False"]}


EXITS = {
    "sys.exit(5)": "import sys\nprint('out')\nsys.exit(5)\n",
    "sys.exit(message)": "import sys\nsys.exit('leaving: bad input')\n",
    "uncaught exception": "def f():\n    raise ValueError('boom')\nprint('before')\nf()\n",
    "KeyboardInterrupt": "raise KeyboardInterrupt\n",
    "atexit, threads, unflushed": """
        import atexit, sys, threading, time
        atexit.register(lambda: print("atexit ran"))
        def late():
            time.sleep(0.3)
            print("thread done")
        threading.Thread(target=late).start()
        sys.stdout = open(sys.stdout.fileno(), "w", closefd=False)  # buffered
        sys.stdout.write("no newline, not flushed")
        """,
    # The descriptors a program opened are its own until it is gone: none is
    # closed under it as it ends (its atexit handlers, gloocy's goodbye
    # among them, still use them).
    "files open in atexit": """
        import atexit, os, tempfile
        files = [tempfile.TemporaryFile() for _ in range(8)]
        inodes = [os.fstat(f.fileno()).st_ino for f in files]
        def check():
            def same(f, ino):
                try:
                    return os.fstat(f.fileno()).st_ino == ino
                except OSError as e:
                    return e.strerror
            print("open in atexit:", [same(f, ino) for f, ino in zip(files, inodes)])
        atexit.register(check)
        """,
}


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
@pytest.mark.parametrize("name", list(EXITS))
def test_a_forked_rank_ends_as_a_fresh_interpreter_would(tmp_path, name, launcher):
    prog = write(tmp_path / "prog.py", EXITS[name])
    ran = launch(["-n", "1", str(prog)], tmp_path, launcher=LAUNCHERS[launcher])
    want = fresh([str(prog)], tmp_path)
    code = want.returncode
    assert ran.returncode == (128 - code if code < 0 else code), ran.stderr.decode()
    assert rank_lines(ran.stdout) == want.stdout.decode().splitlines()
    assert rank_lines(ran.stderr) == want.stderr.decode().splitlines()


@pytest.mark.parametrize("fork_server", ["1", "0"])
def test_settings_a_program_puts_in_os_environ_before_importing_gloocy(tmp_path, fork_server):
    """GLOOCY_HOST_ID (read when the world is made) and GLOOCY_PICKLE_PROTOCOL
    (read as gloocy.MPI is imported), set by the program first: four ranks
    on two pretend hosts, by rank parity; forked or fresh alike."""
    prog = write(tmp_path / "prog.py", """
        import os
        os.environ["GLOOCY_HOST_ID"] = f"pretend-{int(os.environ['GLOOCY_RANK']) % 2}"
        os.environ["GLOOCY_PICKLE_PROTOCOL"] = "3"
        from gloocy import MPI
        node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
        print(MPI.pickle.PROTOCOL, node.allgather(MPI.COMM_WORLD.rank))
        """)
    ran = launch(["-n", "4", str(prog)], tmp_path, env=dict(ENV, GLOOCY_FORK_SERVER=fork_server))
    assert ran.returncode == 0, ran.stderr.decode()
    for rank in range(4):
        assert rank_lines(ran.stdout, rank) == [f"3 {[r for r in range(4) if r % 2 == rank % 2]}"]


def test_preloaded_modules_read_no_setting_at_import():
    """Whatever PRELOAD's modules read from the environment as they are
    imported, a forked rank would take from the fork server, not from its
    own program: none of gloocy's settings may be among it."""
    probe = textwrap.dedent(f"""
        import os, importlib
        read = set()
        get, has = os._Environ.__getitem__, os._Environ.__contains__
        def logged(f):
            def g(self, key):
                read.add(key)
                return f(self, key)
            return g
        os._Environ.__getitem__, os._Environ.__contains__ = logged(get), logged(has)
        for name in {PRELOAD!r}:
            importlib.import_module(name)
        print(sorted(k for k in read if k.startswith(("GLOOCY_", "MPI4PY_"))))
        """)
    out = subprocess.run([sys.executable, "-c", probe], env=ENV, capture_output=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().split() == ["[]"]


def test_random_state_differs_between_forked_ranks(tmp_path):
    prog = write(tmp_path / "prog.py", """
        import random, numpy as np
        print(random.random(), np.random.random(), np.random.default_rng().random())
        """)
    ran = launch(["-n", "3", str(prog)], tmp_path)
    assert ran.returncode == 0, ran.stderr.decode()
    draws = [tuple(rank_lines(ran.stdout, r)[0].split()) for r in range(3)]
    for column in zip(*draws):
        assert len(set(column)) == 3, draws


def test_multiprocessing_and_blas_threads_in_a_forked_rank(tmp_path):
    prog = write(tmp_path / "prog.py", """
        import multiprocessing as mp
        import numpy as np
        def square(x):
            return x * x
        if __name__ == "__main__":
            rng = np.random.default_rng(7)
            a, b = rng.random((160, 160)), rng.random((160, 160))
            product = a @ b                      # BLAS, threaded, after the fork
            oracle = (a[:, :, None] * b[None, :, :]).sum(axis=1)
            print("matmul", np.allclose(product, oracle))
            for method in ("fork", "spawn", "forkserver"):
                with mp.get_context(method).Pool(2) as pool:
                    print(method, pool.map(square, range(6)))
        """)
    ran = launch(["-n", "2", str(prog)], tmp_path, timeout=120)
    assert ran.returncode == 0, ran.stderr.decode()
    squares = [x * x for x in range(6)]
    for rank in range(2):
        assert rank_lines(ran.stdout, rank) == [
            "matmul True", f"fork {squares}", f"spawn {squares}", f"forkserver {squares}"]
