"""Smoke tests of gloocy-bench's harness (not of anyone's speed), end to end.

Tiny sizes, one round, a tiny time budget: the JSON lines, the markdown
tables and the PNGs are written and every point was verified. gloocy always
runs; a peer that is not installed is skipped, naming what is missing.
The report's own logic, on rows made by hand, is tests/unit/test_bench_report.py.
"""

import importlib.util
import json

import pytest

from gloocy.bench import __main__ as cli
from gloocy.bench import overhead, report
from gloocy.bench.impls import TorchGlooImpl, parse_spec
from peers import MATPLOTLIB, MPI, TORCH

COLLECTIVES = ["allreduce", "bcast", "barrier", "allgather"]
SIZES = [4, 4096]
KEYS = {"implementation", "transport", "label", "collective", "world_size",
        "bytes", "size", "round", "iters", "median_s", "min_s", "max_s",
        "busbw_GBps", "verified"}


def sweep(tmp_path, *impls):
    out = tmp_path / "out"
    rc = cli.main(["-n", "2", "--impl", *impls, "--collective", *COLLECTIVES,
                   "--sizes", ",".join(map(str, SIZES)), "--rounds", "1",
                   "--budget", "0.01", "--max-iters", "50", "--out", str(out),
                   "--quiet"])
    return rc, out


def check_outputs(out, label):
    rows = report.load(out / "results.jsonl")
    mine = [r for r in rows if r["label"] == label]
    assert mine, f"no results for {label}"
    for r in mine:
        assert KEYS <= r.keys()
        assert r["verified"] is True, r          # the check ran and passed
        assert r["world_size"] == 2 and r["round"] == 0
        assert 0 < r["min_s"] <= r["median_s"] <= r["max_s"]
    have = parse_spec(label).collectives()
    want = {(c, s) for c in COLLECTIVES if c in have
            for s in ([0] if c == "barrier" else SIZES)}
    assert {(r["collective"], r["size"]) for r in mine} == want
    for c in COLLECTIVES:
        text = (out / f"{c}.md").read_text()
        assert f"| {label} µs" in text
        assert "WRONG" not in text
        if c not in have:
            assert "n/a" in text
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip(f"no PNG to check without {MATPLOTLIB}")
    for c in COLLECTIVES:
        assert (out / f"{c}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.hard_timeout(60)
def test_gloocy_and_a_missing_peer(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(TorchGlooImpl, "missing",
                        lambda self: "torch is not installed (pretend)")
    rc, out = sweep(tmp_path, "gloocy", "torch-gloo")
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    check_outputs(out, "gloocy:tcp")
    meta = json.loads((out / "run.json").read_text())
    assert {"label": "torch-gloo", "missing": "torch is not installed (pretend)",
            "collectives": []} in meta["impls"]
    assert "missing: torch-gloo" in printed.err
    assert "**missing: torch-gloo** — torch is not installed" in printed.out


@pytest.mark.hard_timeout(60)
@pytest.mark.parametrize("label", ["torch-gloo", "mpi4py"])
def test_peer(tmp_path, label):
    if parse_spec(label).missing():
        pytest.skip(f"{label}: needs {TORCH if label == 'torch-gloo' else MPI}")
    rc, out = sweep(tmp_path, label)
    assert rc == 0
    check_outputs(out, label)


@pytest.mark.hard_timeout(120)
def test_overhead(tmp_path, capsys):
    """--overhead names every call; each ratio is gloocy's median over
    mpi4py's from the JSON; no call raised or gave a wrong result."""
    out = tmp_path / "out"
    rc = cli.main(["--overhead", "--calls", "50", "--rounds", "1",
                   "--out", str(out), "--quiet"])
    printed = capsys.readouterr()
    meta = json.loads((out / "overhead.json").read_text())
    table = (out / "overhead.md").read_text()
    assert table in printed.out
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `"):
            rows[cells[0]] = cells
    assert list(rows) == [c.name for c in overhead.CALLS]
    assert [r["call"] for r in meta["results"]] == list(rows)
    mpi_missing = meta["implementations"]["mpi4py"]["missing"]
    for r in meta["results"]:
        mine = r["gloocy"]
        assert not mine["errors"] and not mine["wrong"], (r["call"], mine)
        assert len(mine["us"]) == 1 and mine["median_us"] > 0
        if mpi_missing:
            assert rows[r["call"]][2:] == ["missing", "n/a"]
            continue
        peer = r["mpi4py"]
        assert not peer["errors"] and not peer["wrong"], (r["call"], peer)
        assert peer["digests"] == mine["digests"]       # same result both sides
        ratio = mine["median_us"] / peer["median_us"]
        shown = float(rows[r["call"]][3].removesuffix("×"))
        assert shown == pytest.approx(ratio, rel=0.01, abs=0.006), r["call"]
    assert rc == 0, printed.err
    assert meta["implementations"]["gloocy"]["commit"]
    if mpi_missing:
        assert "**missing: mpi4py**" in table
        pytest.skip(f"ratios need {MPI}")
    assert meta["implementations"]["mpi4py"]["version"]
