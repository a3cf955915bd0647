"""gloocy.MPI's dynamic processes, in real launched programs
(programs/dynamic_prog.py): Spawn and Spawn_multiple whose children compute
closed forms the parents check, Accept/Connect between two separately
launched jobs, Join over a socketpair, name publishing, spawn failures
(an MPI error on every parent, never a hang), and MPIPoolExecutor's spawn
mode against Python's own map. Every spawned child is reaped: none is left
once its parents exit."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"
PROG = PROGRAMS / "dynamic_prog.py"
TIMEOUT = 120
_FOREIGN = ("GLOOCY_", "PMI_", "PMIX_", "HYDRA_", "OMPI_")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[2]),
                    env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def _command(n, *args):
    """The program under gloocy-run -n n, or alone (a singleton) for n=None."""
    launcher = [] if n is None else [sys.executable, "-m", "gloocy.run", "-n", str(n)]
    return launcher + [sys.executable, str(PROG), *args]


def _run(n, *args):
    p = subprocess.run(_command(n, *args), env=_env(), capture_output=True,
                       text=True, timeout=TIMEOUT, cwd=PROGRAMS)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def _processes_running(marker):
    """Pids of processes whose command line holds `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except (OSError, ValueError):
            pass
    return found


@pytest.mark.parametrize("n", [None, 2])
def test_spawn_children_compute_closed_forms(n):
    out = _run(n, "spawn", "3")
    assert out.count("spawn ok") == (n or 1), out
    assert not _processes_running(f"{PROG} child"), "a child outlived its parents"


def test_children_of_a_dead_parent_exit():
    assert "orphaning" in _run(None, "orphan")
    deadline = time.monotonic() + 20
    while _processes_running(f"{PROG} child_wait"):
        assert time.monotonic() < deadline, "a child outlived its dead parent"
        time.sleep(0.2)


def test_spawn_multiple_numbers_the_commands():
    out = _run(2, "spawn_multiple")
    assert out.count("spawn_multiple ok") == 2, out


@pytest.mark.parametrize("n", [None, 3])
def test_spawn_failures_raise_on_every_parent(n):
    start = time.monotonic()
    out = _run(n, "failures")
    assert out.count("failures ok") == (n or 1), out
    assert time.monotonic() - start < 60
    assert not _processes_running("sleep\x0037.25"), "a child that never joined lives on"


@pytest.mark.parametrize("sizes", [(None, None), (2, 3)])
def test_accept_connect_between_two_jobs(tmp_path, sizes):
    port_file = str(tmp_path / "port")
    acceptor = subprocess.Popen(_command(sizes[0], "accept", port_file),
                                env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=PROGRAMS)
    try:
        out = _run(sizes[1], "connect", port_file)
        accepted = acceptor.communicate(timeout=TIMEOUT)[0]
    finally:
        acceptor.kill()
        acceptor.wait()
    assert acceptor.returncode == 0, accepted
    nacc, ncon = sizes[0] or 1, sizes[1] or 1
    assert accepted.count(f"accept ok") == nacc and f" {ncon}\n" in accepted, accepted
    assert out.count("connect ok") == ncon and f" {nacc}\n" in out, out


def test_join_over_a_socketpair():
    assert _run(None, "join_pair").count("join ok") == 2


def test_names_publish_lookup_unpublish_in_the_jobs_store():
    assert _run(2, "names").count("names ok") == 2      # (alone: tests/unit)


FUTURES = '''
from gloocy.futures import MPIPoolExecutor
def cube(x):
    return x ** 3
if __name__ == "__main__":
    with MPIPoolExecutor(2) as ex:
        print(list(ex.map(pow, range(9), [5] * 9)), list(ex.map(cube, range(7))))
'''


def test_pool_executor_spawn_mode_maps_like_python(tmp_path):
    script = tmp_path / "farm.py"       # (under gloocy-run: test_futures)
    script.write_text(FUTURES)
    p = subprocess.run([sys.executable, str(script)], env=_env(),
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    want = f"{list(map(pow, range(9), [5] * 9))} {[x ** 3 for x in range(7)]}"
    assert p.stdout.strip().removeprefix("[0] ") == want
    assert not _processes_running(f"gloocy.futures.server"), "a worker outlived the pool"


SHIM = Path.home() / ".cache" / "gloocy-mpi4py-suite" / "shim"
MPI4PY_FUTURES = '''
from mpi4py.futures import MPIPoolExecutor
if __name__ == "__main__":
    with MPIPoolExecutor(2) as ex:
        print(list(ex.map(pow, [2, 3], [5, 5])))
'''


@pytest.mark.parametrize("n", [None, 1])
def test_mpi4py_futures_spawns_on_gloocy(tmp_path, n):
    """mpi4py's own MPIPoolExecutor (pure Python) over gloocy.MPI, through
    the package named mpi4py that tests/mpi4py_suite.py writes."""
    if not (SHIM / "mpi4py" / "run.py").exists():
        pytest.skip("no mpi4py shim: run tests/mpi4py_suite.py once")
    script = tmp_path / "farm.py"
    script.write_text(MPI4PY_FUTURES)
    launcher = [] if n is None else [sys.executable, "-m", "gloocy.run", "-n", str(n)]
    env = _env()
    env["PYTHONPATH"] = f"{SHIM}{os.pathsep}{env['PYTHONPATH']}"
    p = subprocess.run(launcher + [sys.executable, str(script)], env=env,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().removeprefix("[0] ") == str(list(map(pow, [2, 3], [5, 5])))
