"""``python -m gloocy.futures script.py`` under gloocy-run against
``python -m mpi4py.futures script.py`` under mpiexec (world mode: rank 0
runs the script, the other ranks serve its tasks): the same output and the
same exit status. The MPICommExecutor farm is a differential program of
test_mpi_dropin (mpi_programs/futures_farm.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from peers import MPI, installed, mpiexec

SCRIPT = Path(__file__).parent / "programs" / "futures_script.py"
TIMEOUT = 120
_FOREIGN = ("GLOOCY_", "PMI_", "PMIX_", "HYDRA_", "OMPI_", "USE_GLOOCY")


def _env(use_gloocy):
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    if use_gloocy:
        env["USE_GLOOCY"] = "1"
    return env


def _run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                       timeout=TIMEOUT, cwd=SCRIPT.parent)
    lines = [line.split("] ", 1)[1] if line.startswith("[") else line
             for line in p.stdout.splitlines()]
    return p.returncode, lines, p.stderr


@pytest.mark.parametrize("n", [2, 3])
def test_world_mode_like_mpi4py(n):
    if not installed("mpi4py") or mpiexec() is None:
        pytest.skip(f"no reference: needs {MPI}")
    want = _run([mpiexec(), "-n", str(n), sys.executable, "-m", "mpi4py.futures",
                 SCRIPT.name, "x", "y"], _env(False))
    got = _run([sys.executable, "-m", "gloocy.run", "-n", str(n), sys.executable,
                "-m", "gloocy.futures", SCRIPT.name, "x", "y"], _env(True))
    assert want[0] == 3, want[2]
    assert got[1] == want[1], got[2]
    assert got[0] == want[0], got[2]


def test_world_of_one_runs_tasks_locally():
    code, lines, err = _run([sys.executable, "-m", "gloocy.futures", SCRIPT.name],
                            _env(True))
    assert code == 3, err
    assert lines[0].startswith("map [0, 0, 1, 5, 14"), lines


def test_spawn_mode_on_every_rank():
    """Outside ``python -m gloocy.futures``, each rank's MPIPoolExecutor
    spawns workers of its own (mpi4py's spawn mode)."""
    code = ("from gloocy.futures import MPIPoolExecutor\n"
            "with MPIPoolExecutor(1) as ex:\n"
            "    print('mapped', list(ex.map(abs, [-1, -2, 3])))\n")
    p = subprocess.run([sys.executable, "-m", "gloocy.run", "-n", "2", sys.executable,
                        "-c", code], env=_env(True), capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count(f"mapped {list(map(abs, [-1, -2, 3]))}") == 2, p.stdout
