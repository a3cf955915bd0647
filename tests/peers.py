"""The optional peers some tests compare with or launch under: torch
(torch.distributed, torchrun) and mpi4py on MPICH (mpiexec).

The suite passes without them (`pip install -e ".[test]"`); a test that
needs one skips, saying what to install. `.ci/run` installs them all.
"""

import importlib.util
import os
import shutil
import sys

import pytest

TORCH = ("torch: pip install torch==2.13.0 "
         "--index-url https://download.pytorch.org/whl/cpu (the CPU build)")
MPI = "mpi4py and MPICH: pip install mpi4py mpich"
MATPLOTLIB = "matplotlib: pip install matplotlib"


def installed(module):
    return importlib.util.find_spec(module) is not None


def mpiexec():
    """MPICH's launcher: the one pip put next to this Python, else one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.access(beside, os.X_OK) else shutil.which("mpiexec")


# torchrun of this Python's torch (a `torchrun` on PATH may be another Python's).
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]

needs_torch = pytest.mark.skipif(not installed("torch"), reason=f"needs {TORCH}")
needs_mpi = pytest.mark.skipif(not installed("mpi4py") or mpiexec() is None,
                               reason=f"needs {MPI}")
