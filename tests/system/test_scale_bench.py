"""bench/scale.py at a small size, both layouts: every rank's results are
checked inside it against closed forms (a failed rank makes it exit 1),
and its report says which layout ran."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCALE = ROOT / "bench" / "scale.py"


def run_scale(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("GLOOCY_TRANSPORT", None)
    env.pop("GLOOCY_HOST_ID", None)
    return subprocess.run([sys.executable, str(SCALE), "-n", "12", "--procs", "3",
                           "--timeout", "60", *args], env=env, capture_output=True,
                          text=True, timeout=240)


@pytest.mark.parametrize("layout, title, shm, tcp", [
    ((), "(TCP;", False, True),
    (("--host-per-process",), "(a host per process: shared memory within, TCP between;",
     True, True),
    # one host, gloocy's default: the node segment (no TCP pair at all)
    (("--transport", "auto"),
     "(one host, gloocy's default transport: the node segment;", None, False),
])
def test_every_phase_passes(layout, title, shm, tcp):
    got = run_scale(*layout)
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"## 12 ranks as threads in 3 processes {title}" in got.stdout
    assert "| split 64 |" in got.stdout
    # a host per process: ranks of a process share memory, the others TCP
    kinds = re.search(r"pairs by kind, in all \(each counted at both ends\): (.*)",
                      got.stdout).group(1)
    assert ("TcpPair" in kinds) == tcp, kinds
    assert shm is None or ("ShmPair" in kinds) == shm, kinds


@pytest.mark.parametrize("layout", [(), ("--host-per-process",)])
def test_stop_after_start_up(layout):
    got = run_scale("--stop-after", "start-up", *layout)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "rendezvous" in got.stdout and "| barrier |" not in got.stdout
