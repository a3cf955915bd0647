"""gloocy-bench --idle-cpu end to end: the CPU a rank burns while it waits
for a late peer, written to idle.json and idle.md (a smoke test of the
mode, with the generous bound of tests/world/test_waiting.py; not a speed
claim). MPICH with MPIR_CVAR_ENABLE_HEAVY_YIELD=1 runs as mpi4py-yield."""

import json

from gloocy.bench import __main__ as cli
from gloocy.bench.impls import parse_spec
from peers import needs_mpi


def idle(tmp_path, *impls):
    out = tmp_path / "out"
    rc = cli.main(["--idle-cpu", "-n", "2", "--impl", *impls, "--wait", "0.5",
                   "--rounds", "1", "--out", str(out), "--quiet"])
    return rc, json.loads((out / "idle.json").read_text()), (out / "idle.md").read_text()


def test_gloocy_ranks_waiting_for_a_late_peer_are_measured(tmp_path, capsys):
    rc, data, md = idle(tmp_path, "gloocy:shm", "gloocy:tcp")
    assert rc == 0
    assert [(r["impl"], r["n"]) for r in data["results"]] == [("gloocy:shm", 2), ("gloocy:tcp", 2)]
    for r in data["results"]:
        assert r["error"] is None
        (row,) = r["rows"]                       # one waiting rank, one round
        assert row["rank"] == 0 and row["wall_s"] >= 0.4
        assert r["summary"]["cpu_pct_max"] < 30, r
        assert f"| {r['impl']} | 2 |" in md
    assert "| gloocy:shm | 2 |" in capsys.readouterr().out


@needs_mpi
def test_mpich_with_heavy_yield_is_a_peer(tmp_path):
    assert parse_spec("mpi4py-yield").env == {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"}
    rc, data, md = idle(tmp_path, "mpi4py-yield")
    assert rc == 0, data
    (r,) = data["results"]
    assert r["impl"] == "mpi4py-yield" and len(r["rows"]) == 1
