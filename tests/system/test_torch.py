"""gloocy as a torch.distributed backend, against torch's gloo backend.

Each test starts real ranks of tests/system/programs/torch_ranks.py, which
run the same torch.distributed calls on a gloo group and on gloocy's
(the default group) and compare them in every rank; each rank reports one
RESULT line. Ranks are started directly (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT: torch's env:// rendezvous), and once under torchrun.
"""

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

from peers import TORCHRUN, free_port, needs_torch

pytestmark = needs_torch
PROGRAM = pathlib.Path(__file__).parent / "programs" / "torch_ranks.py"
ROOT = pathlib.Path(__file__).parents[2]
_FOREIGN = ("GLOOCY_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
            "MASTER_", "TORCHELASTIC_", "PMI_", "OMPI_", "SLURM_")


def environment(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start(n, mode, **env):
    port = free_port()
    return [subprocess.Popen(
        [sys.executable, str(PROGRAM), mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=environment(RANK=r, WORLD_SIZE=n, LOCAL_RANK=r, LOCAL_WORLD_SIZE=n,
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **env))
        for r in range(n)]


def results(text):
    return [json.loads(line[len("RESULT "):]) for line in text.splitlines()
            if line.startswith("RESULT ")]


def finish(procs, timeout):
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            outs.append((p.returncode, out.decode(), err.decode()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def check(outs, n, least_cases):
    reports = []
    for rank, (code, out, err) in enumerate(outs):
        assert code == 0, f"rank {rank} exited {code}:\n{err[-3000:]}"
        (report,) = results(out)
        reports.append(report)
    assert sorted(r["rank"] for r in reports) == list(range(n))
    for report in reports:
        assert report["failures"] == [], report
        assert report["cases"] >= least_cases, report


@pytest.mark.hard_timeout(180)
@pytest.mark.parametrize("n, how, backend", [
    (1, "store", "gloocy"), (3, "tcp", "cpu:gloocy"),
    # env:// is also what test_under_torchrun's ranks meet by
    pytest.param(4, "env", "gloocy", marks=[pytest.mark.slow, pytest.mark.long])])
def test_every_collective_as_gloo_does(n, how, backend):
    """all_reduce (every dtype x op, coalesced, async, non-contiguous),
    broadcast, reduce, gather, scatter from every root; all_gather (lists,
    chunks, into a tensor), reduce_scatter (list, tensor), all_to_all
    (single, splits, lists), barrier, send/recv (also from any source),
    objects, subgroups, bad input, dist.monitored_barrier (a rank that
    stays away is named): each compared with gloo's result, or with a
    closed form where gloo has no such op (AVG, PREMUL_SUM) or gets it
    wrong (a strided column). The ranks meet through a store= object, a
    tcp:// init_method or env://."""
    check(finish(start(n, "collectives", TORCH_RANKS_INIT=how,
                       TORCH_RANKS_BACKEND=backend), 150), n, 80)


@pytest.mark.hard_timeout(180)
def test_under_torchrun():
    """torchrun's environment: the collectives at N = 2, posted as gloocy's
    nonblocking requests (GLOOCY_TORCH_NONBLOCKING=1; the other tests use
    the default, gloocy's blocking calls)."""
    env = environment(GLOOCY_TORCH_NONBLOCKING=1)
    out = subprocess.run([*TORCHRUN, "--standalone", "--nproc-per-node", "2",
                          str(PROGRAM), "collectives"], env=env, capture_output=True,
                         timeout=150)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    reports = results(out.stdout.decode())
    assert sorted(r["rank"] for r in reports) == [0, 1]
    assert all(r["failures"] == [] and r["cases"] >= 80 for r in reports), reports


@pytest.mark.hard_timeout(180)
def test_ddp_trains_as_with_gloo():
    """Two DDP runs from one seed (50 steps, several buckets), gloo's and
    gloocy's, end with the same parameters; so do runs with no_sync and
    with the allreduce and fp16-compression communication hooks, and under
    net.join() with uneven inputs and unused parameters. Then the
    ranks all_reduce different counts: DistBackendError naming the ranks."""
    check(finish(start(2, "ddp"), 150), 2, 7)


@pytest.mark.hard_timeout(120)
def test_a_rank_killed_in_a_ddp_step_surfaces_on_the_others():
    n = 3
    began = time.monotonic()
    outs = finish(start(n, "kill"), 90)
    took = time.monotonic() - began
    assert outs[n - 1][0] == -9
    for rank, (code, out, err) in enumerate(outs[:n - 1]):
        assert code == 0, f"rank {rank} exited {code}:\n{err[-3000:]}"
        (report,) = results(out)
        assert report["failures"] == [], (report, out)
    assert took < 80, f"the survivors took {took:.0f} s"
