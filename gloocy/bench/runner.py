"""Launching jobs: one per (implementation, world size, round), interleaved.

The plan runs round after round, and inside each round every world size and
every implementation once (A B C A B C ...), so that drift of the machine
hits all alike. A job runs every requested collective and size, so start-up
is paid once per job. gloocy and torch-gloo ranks are started by gloocy-run
(torch only takes rank and size from it, and meets at a port the parent
picked); mpi4py ranks by mpiexec. Rank 0 appends JSON lines to a file the
parent reads as they come (for progress) and collects at the end. A job
that fails or times out is reported with the tail of its output; the sweep
goes on, keeping whatever points the job finished.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from gloocy.bench.impls import PORT_ENV, Impl, mpiexec

__all__ = ["Job", "JobResult", "plan", "run_job", "free_port"]

GRACE = 3.0         # seconds between SIGTERM and SIGKILL of a job


@dataclass
class Job:
    impl: Impl
    n: int
    round: int
    collectives: list[str]      # those this implementation has, in order
    sizes: list[int]

    @property
    def points(self) -> int:
        return sum(1 if c == "barrier" else len(self.sizes) for c in self.collectives)

    @property
    def name(self) -> str:
        return f"{self.impl.label} n={self.n} round {self.round + 1}"


@dataclass
class JobResult:
    job: Job
    rows: list[dict] = field(default_factory=list)
    error: str | None = None    # why the job failed, with its output's tail
    seconds: float = 0.0


def plan(impls: list[Impl], world_sizes: list[int], rounds: int,
         collectives: list[str], sizes: list[int]) -> list[Job]:
    """Jobs in run order: round by round, each round A B C per world size."""
    jobs = []
    for r in range(rounds):
        for n in world_sizes:
            for impl in impls:
                mine = [c for c in collectives if c in impl.collectives()]
                if mine:
                    jobs.append(Job(impl, n, r, mine, sizes))
    return jobs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(job: Job, out: str, budget: float, max_iters: int,
             timeout: float) -> tuple[list[str], dict[str, str]]:
    worker = [sys.executable, "-m", "gloocy.bench.worker",
              "--impl", job.impl.label, "--collectives", ",".join(job.collectives),
              "--sizes", ",".join(map(str, job.sizes)), "--budget", str(budget),
              "--max-iters", str(max_iters), "--round", str(job.round), "--out", out]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **job.impl.env)
    if job.impl.launcher == "mpiexec":
        return [mpiexec() or "mpiexec", "-n", str(job.n), *worker], env
    if job.impl.name == "gloocy":
        env["GLOOCY_TRANSPORT"] = job.impl.transport
    else:
        env[PORT_ENV] = str(free_port())
    return [sys.executable, "-m", "gloocy.run", "-n", str(job.n),
            "--timeout", str(timeout), *worker], env


def _read_rows(path: str) -> list[dict]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]
    except FileNotFoundError:
        return []


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the job's process group, SIGKILL it after GRACE."""
    for sig, wait in ((signal.SIGTERM, GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_job(job: Job, *, budget: float, max_iters: int, timeout: float,
            on_point: Callable[[int], None] | None = None) -> JobResult:
    """Run one job; ``on_point(k)`` is called as rank 0 finishes point k."""
    result = JobResult(job)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gloocy-bench-") as tmp:
        out, log = os.path.join(tmp, "rows.jsonl"), os.path.join(tmp, "log")
        cmd, env = _command(job, out, budget, max_iters, timeout)
        with open(log, "wb") as logf:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=logf, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            done = 0
            try:
                while True:
                    try:
                        rc = proc.wait(0.2)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    if on_point is not None:
                        now = len(_read_rows(out))
                        if now != done:
                            done = now
                            on_point(done)
                    if time.monotonic() - start > timeout + GRACE:
                        _stop(proc)
                        rc = None
                        break
            except BaseException:           # Ctrl-C: leave nothing running
                _stop(proc)
                raise
        result.rows = _read_rows(out)
        if on_point is not None:
            on_point(len(result.rows))
        result.seconds = time.monotonic() - start
        if rc != 0 or len(result.rows) < job.points:
            with open(log, errors="replace") as f:
                tail = "".join(f.readlines()[-15:])
            timed_out = rc is None or (rc == 124 and job.impl.launcher == "gloocy-run")
            why = (f"timed out after {timeout:g} s" if timed_out
                   else f"exited with code {rc}" if rc else
                   f"finished only {len(result.rows)} of {job.points} points")
            result.error = f"{job.name}: {why}\n{tail}"
    return result
