"""gloocy.MPI as a drop-in for mpi4py (issue 5): a differential test.

Every program in tests/system/mpi_programs/ is an ordinary mpi4py program
whose import switches to ``from gloocy import MPI`` when USE_GLOOCY is set
(_world.py, the start most of them share).
Each runs twice per world size N:

  reference   mpiexec -n N python prog.py                 (real mpi4py on MPICH)
  candidate   gloocy-run -n N python prog.py, USE_GLOOCY=1 (gloocy.MPI)

and the sorted sets of output lines must be identical (ranks print
concurrently, so only the order of lines may differ). The programs print
rank-tagged results only, floats rounded; gloocy-run's own "[r] " line prefix
is stripped. A world of one started without any launcher is compared the
same way (plain ``python prog.py`` for both).

N = 4 (oversubscribed on small machines) carries the ``slow`` mark:
``pytest -m "not slow" tests/system/test_mpi_dropin.py`` leaves it out;
it runs under ``--long`` only.
"""

import difflib
import functools
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from peers import MPI, installed, mpiexec

PROGRAM_DIR = Path(__file__).parent / "mpi_programs"
PROGRAMS = sorted(p.stem for p in PROGRAM_DIR.glob("[!_]*.py"))
SIZES = (1, 2, 3, 4)
TIMEOUT = 60.0  # seconds per run; the launchers enforce it, a watchdog backs them up
STDIN = b"hello from stdin\nsecond\nthird line\n"  # for stdin.py; the others ignore it
HEAD, TAIL = 40, 20  # lines of stderr shown per run on failure (the first error and the end)
SINGLETON_PROGRAMS = ["errors", "handles", "module", "p2p", "stdin"]  # init state, self-messages, input

SLOW = pytest.mark.slow          # registered in conftest.py
# N = 4 runs the programs' paths of N = 2 again (no program branches on
# N >= 4; the collectives' algorithms at 4 are in tests/world): --long only.
LONG = pytest.mark.long

# Launcher and MPI state of an outer job must not leak into the runs.
_FOREIGN = ("GLOOCY_", "PMI_", "PMIX_", "HYDRA_", "OMPI_", "USE_GLOOCY")


def _env(use_gloocy):
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    if use_gloocy:
        env["USE_GLOOCY"] = "1"
    return env


class Run:
    def __init__(self, label, cmd, returncode, stdout, stderr, timed_out):
        self.label, self.cmd = label, cmd
        self.returncode, self.timed_out = returncode, timed_out
        self.stdout = stdout.decode(errors="replace")
        self.stderr = stderr.decode(errors="replace")

    def lines(self, strip_prefix=False):
        lines = self.stdout.splitlines()
        if strip_prefix:  # gloocy-run writes "[r] " before every line of rank r
            lines = [re.sub(r"^\[\d+\] ", "", line, count=1) for line in lines]
        return sorted(lines)

    def ok(self):
        return self.returncode == 0 and not self.timed_out

    def describe(self):
        status = (f"killed by the watchdog after {TIMEOUT + 10:g} s" if self.timed_out
                  else f"exit code {self.returncode}")
        lines = self.stderr.splitlines()
        if len(lines) > HEAD + TAIL:
            lines = [*lines[:HEAD], f"... ({len(lines) - HEAD - TAIL} lines) ...", *lines[-TAIL:]]
        return (f"--- {self.label}: {' '.join(self.cmd)}\n    {status}; stderr:\n"
                + ("\n".join(lines) or "(empty)"))


def _run(label, cmd, env):
    """Run cmd in a process group of its own; past the timeout (plus the
    launchers' own grace) SIGTERM the group, then SIGKILL it."""
    p = subprocess.Popen(cmd, env=env, cwd=PROGRAM_DIR, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    timed_out = False
    try:
        out, err = p.communicate(STDIN, timeout=TIMEOUT + 10)
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, None)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                out, err = p.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    return Run(label, cmd, p.returncode, out, err, timed_out)


def _reference_missing():
    if not installed("mpi4py") or mpiexec() is None:
        return f"needs {MPI}"
    return None


@functools.lru_cache(maxsize=None)  # one reference run per (program, N) per session
def _reference(program, n):
    missing = _reference_missing()
    if missing:
        pytest.skip(f"no reference: {missing}")
    env = _env(use_gloocy=False)
    env["MPIEXEC_TIMEOUT"] = str(int(TIMEOUT))  # hydra kills the job past it
    if n is None:  # singleton: MPI initializes a world of one without a launcher
        cmd = [sys.executable, f"{program}.py"]
    else:
        cmd = [mpiexec(), "-n", str(n), sys.executable, f"{program}.py"]
    return _run("mpiexec (mpi4py)" if n else "python (mpi4py)", cmd, env)


def _candidate(program, n):
    env = _env(use_gloocy=True)
    if n is None:
        cmd = [sys.executable, f"{program}.py"]
    else:  # the gloocy-run console script, with this very interpreter
        cmd = [sys.executable, "-m", "gloocy.run", "-n", str(n),
               "--timeout", f"{TIMEOUT:g}", sys.executable, f"{program}.py"]
    return _run("gloocy-run (gloocy.MPI)" if n else "python (gloocy.MPI)", cmd, env)


def _compare(program, n):
    ref = _reference(program, n)
    if not ref.ok():
        pytest.fail(f"the reference run of {program}.py failed, so the program is "
                    f"wrong (it must run under mpi4py):\n{ref.describe()}")
    got = _candidate(program, n)
    want_lines = ref.lines()
    got_lines = got.lines(strip_prefix=n is not None)
    if got.ok() and got_lines == want_lines:
        return
    diff = list(difflib.unified_diff(want_lines, got_lines, ref.label, got.label,
                                     lineterm="", n=1))
    shown = "\n".join(diff[:200]) + ("\n..." if len(diff) > 200 else "")
    pytest.fail(f"{program}.py with N={n or 'singleton'}: gloocy.MPI differs from mpi4py\n"
                f"{got.describe()}\n{ref.describe()}\n"
                f"sorted output lines, unified diff:\n{shown or '(identical)'}", pytrace=False)


@pytest.mark.hard_timeout(3 * TIMEOUT)
@pytest.mark.parametrize("n", [pytest.param(n, id=f"n{n}", marks=[SLOW, LONG] if n >= 4 else [])
                               for n in SIZES])
@pytest.mark.parametrize("program", PROGRAMS)
def test_dropin(program, n):
    _compare(program, n)


@pytest.mark.hard_timeout(3 * TIMEOUT)
@pytest.mark.parametrize("program", SINGLETON_PROGRAMS)
def test_dropin_singleton(program):
    """No launcher at all: both sides must make a world of one by themselves."""
    _compare(program, None)


LAZY_CHECK = """
import sys
from gloocy import MPI
before = [m for m in ("gloocy.rma.window", "gloocy.mpiio.file") if m in sys.modules]
from gloocy.rma.window import Win, WIN_NULL
from gloocy.mpiio.file import File, FILE_NULL
same = (MPI.Win is Win, MPI.WIN_NULL is WIN_NULL, MPI.File is File,
        MPI.FILE_NULL is FILE_NULL, "Win" in dir(MPI), "File" in MPI.__all__)
star = {}
exec("from gloocy.MPI import *", star)
print(before, same, star["Win"] is Win and star["File"] is File,
      MPI._sizeof(MPI.Win) > 0)
"""


def test_windows_and_files_load_on_first_use():
    """`from gloocy import MPI` leaves the window and file machinery unloaded
    (most programs use neither: a sixth of the import); the first MPI.Win or
    MPI.File loads it, and `from gloocy.MPI import *` brings both."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GLOOCY_")}
    out = subprocess.run([sys.executable, "-c", LAZY_CHECK], env=env, timeout=60,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "(True,", "True,", "True,", "True,", "True,",
                                  "True)", "True", "True"], out.stdout
