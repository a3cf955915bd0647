"""Leaving the job: a clean exit never fails a peer, an early one is named.

Each run is a real `gloocy-run -n 4` job of tests/system/programs/exit_race.py,
so that every rank really exits (atexit, Finalize, interpreter shutdown)
while its peers may still be finishing the same calls. The exit races are
rare (README's example failed 4 times in 40 before the fix), so the loop
runs RUNS times per variant and transport: a few by default, 200 under --long.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import long_runs

PROGRAM = Path(__file__).parent / "programs" / "exit_race.py"
LAUNCHER = [sys.executable, "-m", "gloocy.run", "-n", "4", "--timeout", "120"]
RUNS = 200 if long_runs() else 2
# What each rank prints, by variant: rank -> the repr of its own result.
# Worked out by hand from what exit_race.py computes.
EXPECTED = {
    "split": lambda r: repr([r % 2] * 4 + [r % 2 + 2] * 4),
    "finalize": lambda r: repr([r % 2] * 4 + [r % 2 + 2] * 4),
    "dup": lambda r: "6",
    "create_group": lambda r: "2" if r % 2 == 0 else "None",
    "ibcast": lambda r: repr((2 if r % 2 == 0 else 4, [0.0, 1.0, 2.0, 3.0])),
    "persistent": lambda r: repr([float((r - 1) % 4)] * 2),
}
TRANSPORTS = {"shm": ({}, []), "tcp": ({"GLOOCY_TRANSPORT": "tcp"}, []),
              "mix": ({}, ["mix"])}


def run_job(variant, over, timeout=150):
    env, extra = TRANSPORTS[over]
    return subprocess.run([*LAUNCHER, sys.executable, str(PROGRAM), variant, *extra],
                          env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.hard_timeout(3600 if long_runs() else 120)
@pytest.mark.parametrize("over", TRANSPORTS)
@pytest.mark.parametrize("variant", EXPECTED)
def test_clean_exit_never_fails_a_peer(variant, over):
    for attempt in range(RUNS):
        r = run_job(variant, over)
        assert r.returncode == 0, (
            f"run {attempt + 1} of {RUNS}: gloocy-run exited {r.returncode}\n"
            f"{r.stdout}\n{r.stderr}")
        lines = sorted(r.stdout.splitlines())
        assert lines == [f"[{k}] {k} {EXPECTED[variant](k)} hi" for k in range(4)], r.stderr


EARLY = """
import os, sys, time
import numpy as np
from gloocy import MPI
comm = MPI.COMM_WORLD
t0 = time.monotonic()
try:
    # Rank 3 leaves while the others may still be finishing the Split (which
    # all its data for has come): one of them may hear of it there.
    sub = comm.Split(color=comm.rank % 2, key=comm.rank)
    sub.allreduce(1)
    if comm.rank == 3:
        sys.exit(0)                      # leaves cleanly, but before the bcast
    x = np.zeros(1 << 16)
    comm.Bcast(x, root=3)
except MPI.Exception as e:
    print(f"{type(e).__name__} rank={getattr(e, 'rank', None)} "
          f"after {time.monotonic() - t0:.2f} s: {e}", flush=True)
"""


@pytest.mark.parametrize("over", TRANSPORTS)
def test_a_rank_that_leaves_early_is_named(tmp_path, over):
    """A rank that exits cleanly while the others still expect its data is
    a PeerLostError naming it on every rank that waits, long before the
    call's deadline (60 s here)."""
    prog = tmp_path / "early.py"
    env, extra = TRANSPORTS[over]
    if extra:
        prog.write_text("import os\nos.environ['GLOOCY_HOST_ID'] = "
                        "f\"h{int(os.environ['GLOOCY_RANK']) % 2}\"\n" + EARLY)
    else:
        prog.write_text(EARLY)
    start = time.monotonic()
    r = subprocess.run([*LAUNCHER, sys.executable, str(prog)], capture_output=True,
                       text=True, timeout=100,
                       env={**os.environ, **env, "GLOOCY_TIMEOUT": "60"})
    elapsed = time.monotonic() - start
    reports = {int(m[0]): m[1:] for m in re.findall(
        r"^\[(\d)\] (\w+) rank=(\S+) after ([\d.]+) s", r.stdout, re.M)}
    assert sorted(reports) == [0, 1, 2], r.stdout + r.stderr
    for rank, (name, lost, _) in reports.items():
        assert (name, lost) == ("PeerLostError", "3"), (rank, r.stdout)
    # Generous: start-up and exit included, on a loaded 2-core machine;
    # what matters is that nobody waited for the 60 s deadline.
    assert elapsed < 30, r.stdout
