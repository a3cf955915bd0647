"""bench/tcp_alltoall_calls.py at small sizes: each library's alltoall is
checked once in every rank against the blocks NumPy expects (a wrong
result exits non-zero), and the figures it writes hold one entry per call
and per rank."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "tcp_alltoall_calls.py"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_calls(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), GLOOCY_TRANSPORT="tcp")
    out = tmp_path / "calls.json"
    got = subprocess.run(
        [sys.executable, "-m", "gloocy.run", "-n", "2", sys.executable, str(SCRIPT),
         "--sizes", "4K,12K", "--calls", "3", "--blocks", "2",
         "--port", str(free_port()), "--out", str(out), *args],
        env=env, capture_output=True, text=True, timeout=240)
    assert got.returncode == 0, got.stdout + got.stderr
    return got.stdout, json.loads(out.read_text())


def check_figures(every, libs):
    assert len(every) == 2                       # rank 0's and rank 1's rows
    for rank, rows in enumerate(every):
        assert {(r["lib"], r["size"], r["block"]) for r in rows} == {
            (lib, size, b) for lib in libs for size in (4096, 12288) for b in (0, 1)}
        for r in rows:
            assert r["rank"] == rank
            assert len(r["times_us"]) == len(r["cpus"]) == 3
            assert all(t > 0 for t in r["times_us"])


def test_gloocy_alone(tmp_path):
    stdout, every = run_calls(tmp_path, "--no-torch")
    check_figures(every, {"gloocy:tcp"})
    assert stdout.count("gloocy:tcp") == 4       # a line per (size, block)
    assert "torch-gloo" not in stdout


def test_beside_torch(tmp_path):
    pytest.importorskip("torch", reason="torch is not installed")
    stdout, every = run_calls(tmp_path)
    check_figures(every, {"gloocy:tcp", "torch-gloo"})
    assert stdout.count("torch-gloo") == 4
