"""The main job of README's quick start runs and every check passes."""

import subprocess
import sys


def test_demo_runs_and_checks_every_collective():
    out = subprocess.run(
        [sys.executable, "-m", "gloocy.run", "-n", "3", sys.executable, "-m",
         "gloocy.demo"], capture_output=True, timeout=180)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    lines = out.stdout.decode().splitlines()
    checks = [line for line in lines if line.startswith("[0] check ")]
    # every group of checks the demo runs reports "ok" (a failure would
    # have raised on some rank and failed the job above)
    assert len(checks) == 11 and all(line.endswith(" ok") for line in checks)
    assert any("Barrier" in line and " us" in line for line in lines)
    assert "transport shared memory (node collectives)" in lines[0]
