"""Errors of collectives whose ranks span hosts (pretended with
GLOOCY_HOST_ID, so that they run two-level: _hier.pxi) name the same root
cause as on one host, which is the oracle: the same program is run on
one host and on hosts 0,0,0,1,1, and every rank's exception type (and a
timeout's culprit) must agree. Real processes under gloocy-run."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import json, os, sys, time
    hosts = os.environ.get("TEST_HOSTMAP")
    if hosts:
        os.environ["GLOOCY_HOST_ID"] = "h" + hosts.split(",")[int(os.environ["GLOOCY_RANK"])]
    import numpy as np
    from gloocy import MPI
    c = MPI.COMM_WORLD
    mode, n = sys.argv[1], int(sys.argv[2])
    if sys.argv[3] == "warm":         # the host layout learnt before
        c.Allreduce(MPI.IN_PLACE, np.ones(n))
    out = {"rank": c.rank, "type": None, "culprit": None, "msg": ""}
    try:
        if mode == "count":           # rank 1 passes one element more
            c.Allreduce(MPI.IN_PLACE, np.ones(n + (c.rank == 1)))
        elif mode == "late":          # the last rank never comes
            if c.rank != c.size - 1:
                c.Allreduce(MPI.IN_PLACE, np.ones(n), timeout=3)
            else:
                time.sleep(5)
    except Exception as e:
        out.update(type=type(e).__name__, culprit=getattr(e, "culprit", None),
                   msg=str(e))
    print("RESULT " + json.dumps(out), flush=True)
""")

HOSTS = "0,0,0,1,1"


def run(tmp_path, mode, n, warm, hosts):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    env = {**os.environ, "GLOOCY_TIMEOUT": "20"}
    env.pop("GLOOCY_HOST_ID", None)
    if hosts:
        env["TEST_HOSTMAP"] = hosts
    proc = subprocess.run(
        [sys.executable, "-m", "gloocy.run", "-n", "5", sys.executable,
         str(prog), mode, str(n), warm], capture_output=True, text=True,
        timeout=90, env=env)
    got = {}
    for line in proc.stdout.splitlines():
        if "RESULT " in line:
            r = json.loads(line.split("RESULT ", 1)[1])
            got[r["rank"]] = r
    assert sorted(got) == list(range(5)), (proc.stdout, proc.stderr)
    return got


@pytest.mark.parametrize("warm", ["cold", "warm"])
def test_count_mismatch_is_named_on_every_rank_across_hosts(tmp_path, warm):
    """A rank that raises MismatchError and exits at once resets its
    connections: the ranks of the other host must still name the mismatch
    (not 'lost peer'). Repeated: it was a race."""
    one = run(tmp_path, "count", 200_000, warm, None)
    assert {r["type"] for r in one.values()} == {"MismatchError"}, one
    for _ in range(3):
        got = run(tmp_path, "count", 200_000, warm, HOSTS)
        for rank, r in got.items():
            assert r["type"] == one[rank]["type"], (rank, r)
            assert "count=" in r["msg"], (rank, r)
            if warm == "warm":        # the user's call, not a phase's
                assert "allreduce" in r["msg"], (rank, r)


@pytest.mark.parametrize("warm", ["cold", "warm"])
def test_a_rank_that_never_comes_is_named_on_every_rank_across_hosts(tmp_path,
                                                                      warm):
    one = run(tmp_path, "late", 300_000, warm, None)
    got = run(tmp_path, "late", 300_000, warm, HOSTS)
    for rank in range(4):
        assert one[rank]["type"] == "CollectiveTimeout", one[rank]
        assert one[rank]["culprit"] == 4, one[rank]
        assert got[rank]["type"] == one[rank]["type"], (rank, got[rank])
        assert got[rank]["culprit"] == one[rank]["culprit"], (rank, got[rank])
        # (a rank that waited for rank 4 itself says so: "rank(s) 4")
        assert re.search(r"rank 4 never came|rank\(s\) 4$", got[rank]["msg"]), (
            rank, got[rank])
        if warm == "warm":            # the user's call, not a phase's
            assert "allreduce" in got[rank]["msg"], (rank, got[rank])
    assert got[4]["type"] is None and one[4]["type"] is None
