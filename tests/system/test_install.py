"""The installed package as a new user meets it."""

import os
import subprocess
import sys
from importlib import metadata

import pytest


def test_a_folder_named_gloocy_does_not_shadow_the_install(tmp_path):
    """From the folder that holds the clone (itself named gloocy), the
    clone is a directory without __init__.py first on sys.path. Python
    takes such a directory for a namespace package unless a regular package
    named gloocy is found further along sys.path; an import hook (what an
    editable install of a flat layout uses by default) is asked too late,
    and `gloocy.init` was missing. pyproject.toml's package-dir makes the
    editable install a plain sys.path entry instead."""
    try:
        metadata.distribution("gloocy")
    except metadata.PackageNotFoundError:
        pytest.skip("gloocy is not installed: pip install -e .")
    (tmp_path / "gloocy" / "tests").mkdir(parents=True)   # the clone, seen from its parent
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", "import gloocy; gloocy.init; print(gloocy.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(os.path.join("gloocy", "__init__.py")), out.stdout
