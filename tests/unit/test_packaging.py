"""Every Python package of gloocy is listed in pyproject.toml, so that a
wheel holds it too, not only an editable install (which sees the folder)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_packaged():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "gloocy").rglob("__init__.py")}
    assert found - listed == set()
