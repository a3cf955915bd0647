"""gloocy[torch] is optional both ways: gloocy never imports torch, and
torch (whose start-up loads gloocy's "torch.backends" entry point when
gloocy is installed) gets the backend's name registered, not its modules.
Each check runs in a fresh interpreter: this one has imported both."""

import json
import pathlib
import subprocess
import sys

from peers import TORCH, installed
import pytest

ROOT = pathlib.Path(__file__).parents[2]


def loaded(code, **env):
    """The modules a fresh interpreter holds after `code`."""
    import os
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **env}
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys, json\n"
         "print(json.dumps(sorted(sys.modules)))"],
        env=environ, capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_gloocy_and_its_mpi_face_import_no_torch():
    modules = loaded("import gloocy, gloocy.MPI")
    assert "gloocy.MPI" in modules
    assert not {m for m in modules if m == "torch" or m.startswith("torch.")}


@pytest.mark.skipif(not installed("torch"), reason=f"needs {TORCH}")
def test_torch_registers_the_backend_without_its_modules():
    code = ("import torch.distributed as dist, gloocy.torch\n"
            "assert 'GLOOCY' in dist.Backend._plugins, dist.Backend._plugins\n"
            "assert dist.is_backend_available('gloocy')")
    modules = loaded(code)
    assert "gloocy.torch" in modules
    backend_modules = {m for m in modules if m.startswith("gloocy.torch.")}
    assert backend_modules == set(), backend_modules
