"""gloocy-bench --idle-cpu: the CPU a rank burns while it waits at a barrier
for a late peer, for each implementation side by side.

    gloocy-bench --idle-cpu [-n 4 8] [--impl gloocy:shm gloocy:tcp mpi4py
                 mpi4py-yield torch-gloo] [--wait 1.0] [--rounds 3]
                 [--out DIR] [--quiet]

In each job (one per implementation, world size and round, interleaved as
the sweeps are) every rank meets the others a few times; then, `--rounds`
times over, the last rank sleeps `--wait` seconds before the barrier while
the others wait in it, and each of those notes the CPU time its process
used meanwhile (time.process_time: every thread of the process, so a
library's helper threads count) over the wall time it waited. A figure is
that ratio in % of one core: the median over the rounds, then the median
and the largest over the waiting ranks. ``mpi4py-yield`` is MPICH with
MPIR_CVAR_ENABLE_HEAVY_YIELD=1.

Writes DIR/idle.json (every waiting rank's every round) and DIR/idle.md,
and prints the table. The worker is ``python -m gloocy.bench.idle --worker``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gloocy.bench.impls import expand, mpiexec, parse_spec, PORT_ENV
from gloocy.bench.progress import say

__all__ = ["main", "summarize", "markdown"]

DEFAULT_IMPLS = ["gloocy", "mpi4py", "mpi4py-yield", "torch-gloo"]
WARMUP = 3                  # barriers with everyone on time before the rounds


def _worker(label: str, wait: float, rounds: int, out: str) -> int:
    impl = parse_spec(label)
    impl.init()
    late = impl.size - 1
    rows = []
    try:
        for _ in range(WARMUP):
            impl.barrier()
        for r in range(rounds):
            impl.barrier()
            if impl.rank == late:
                time.sleep(wait)
                impl.barrier()
                continue
            wall, cpu = time.perf_counter(), time.process_time()
            impl.barrier()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            rows.append(dict(rank=impl.rank, round=r, cpu_s=cpu, wall_s=wall))
    finally:
        impl.close()
    with open(f"{out}.{impl.rank}", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return 0


def _command(label: str, n: int, wait: float, rounds: int, out: str,
             timeout: float) -> tuple[list[str], dict[str, str]]:
    impl = parse_spec(label)
    worker = [sys.executable, "-m", "gloocy.bench.idle", "--worker", label,
              "--wait", str(wait), "--rounds", str(rounds), "--rows", out]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **impl.env)
    if impl.launcher == "mpiexec":
        return [mpiexec() or "mpiexec", "-n", str(n), *worker], env
    if impl.name == "gloocy":
        env["GLOOCY_TRANSPORT"] = impl.transport
    else:
        from gloocy.bench.runner import free_port
        env[PORT_ENV] = str(free_port())
    return [sys.executable, "-m", "gloocy.run", "-n", str(n),
            "--timeout", str(timeout), *worker], env


def _job(label: str, n: int, wait: float, rounds: int) -> tuple[list[dict], str | None]:
    """Run one job: the waiting ranks' rows, and why it failed (or None)."""
    timeout = 60 + rounds * (wait + 5)
    with tempfile.TemporaryDirectory(prefix="gloocy-idle-") as tmp:
        out = os.path.join(tmp, "rows")
        cmd, env = _command(label, n, wait, rounds, out, timeout)
        try:
            proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout + 10)
        except subprocess.TimeoutExpired:
            return [], f"timed out after {timeout:g} s"
        rows = []
        for rank in range(n - 1):
            try:
                with open(f"{out}.{rank}") as f:
                    rows += [json.loads(line) for line in f]
            except FileNotFoundError:
                pass
        if proc.returncode or len(rows) != (n - 1) * rounds:
            tail = "".join((proc.stdout + proc.stderr).splitlines(True)[-10:])
            return rows, f"exited with code {proc.returncode}\n{tail}"
    if label.startswith("mpi4py"):      # MPICH's shared-memory files
        for name in os.listdir("/dev/shm"):
            if name.startswith(("mpich_shm_", "ucx_shm_")):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except OSError:
                    pass
    return rows, None


def summarize(rows: list[dict]) -> dict:
    """% of a core each waiting rank used (its median over rounds): the
    median and the largest over ranks, and the median wait."""
    per_rank: dict[int, list[float]] = {}
    for r in rows:
        per_rank.setdefault(r["rank"], []).append(100 * r["cpu_s"] / r["wall_s"])
    medians = [statistics.median(v) for v in per_rank.values()]
    return dict(cpu_pct_median=statistics.median(medians) if medians else None,
                cpu_pct_max=max(medians) if medians else None,
                wait_s=statistics.median(r["wall_s"] for r in rows) if rows else None)


def markdown(meta: dict, results: list[dict]) -> str:
    lines = [f"CPU a rank burns while it waits {meta['wait_s']:g} s at a barrier "
             f"for a late peer (% of one core; median over {meta['rounds']} "
             "rounds; median and largest over the waiting ranks)", "",
             "| implementation | N | CPU, median rank | CPU, busiest rank | wait |",
             "|---|---|---|---|---|"]
    for res in results:
        s = res["summary"]
        if res["error"] or s["cpu_pct_median"] is None:
            first = (res["error"] or "no data").splitlines()[0]
            lines.append(f"| {res['impl']} | {res['n']} | failed: {first} | | |")
            continue
        lines.append(f"| {res['impl']} | {res['n']} | {s['cpu_pct_median']:.1f}% "
                     f"| {s['cpu_pct_max']:.1f}% | {s['wait_s']:.2f} s |")
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gloocy-bench --idle-cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, nargs="+", default=[4], metavar="N",
                   help="world sizes (default: 4)")
    p.add_argument("--impl", nargs="+", default=DEFAULT_IMPLS, metavar="IMPL",
                   help="implementations (default: every gloocy transport, mpi4py, "
                        "mpi4py-yield, torch-gloo)")
    p.add_argument("--wait", type=float, default=1.0, metavar="S",
                   help="seconds the late rank sleeps (default: 1)")
    p.add_argument("--rounds", type=int, default=3, help="late arrivals per job (default: 3)")
    p.add_argument("--out", default="gloocy-bench-out", metavar="DIR")
    p.add_argument("--quiet", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--worker"]:
        p = argparse.ArgumentParser(prog="python -m gloocy.bench.idle --worker")
        p.add_argument("--worker", required=True)
        p.add_argument("--wait", type=float, required=True)
        p.add_argument("--rounds", type=int, required=True)
        p.add_argument("--rows", required=True)
        a = p.parse_args(argv)
        return _worker(a.worker, a.wait, a.rounds, a.rows)
    args = _parser().parse_args(argv)
    if min(args.n) < 2:
        raise SystemExit("gloocy-bench --idle-cpu: -n must be at least 2 (one rank is late)")
    try:
        specs = expand(args.impl)
        impls = [parse_spec(s) for s in specs]
    except ValueError as e:
        raise SystemExit(f"gloocy-bench --idle-cpu: {e}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(command=" ".join(["gloocy-bench", "--idle-cpu", *argv]),
                date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                host=platform.node(), cpus=len(os.sched_getaffinity(0)),
                wait_s=args.wait, rounds=args.rounds, world_sizes=args.n)
    results, failed = [], False
    for impl in impls:
        why = impl.missing()
        if why:
            say(f"missing: {impl.label}: {why}")
            results += [dict(impl=impl.label, n=n, rows=[], error=f"missing: {why}",
                             summary=summarize([])) for n in args.n]
            continue
        for n in args.n:
            if not args.quiet:
                say(f"{impl.label} n={n}")
            rows, error = _job(impl.label, n, args.wait, args.rounds)
            failed |= error is not None
            results.append(dict(impl=impl.label, n=n, rows=rows, error=error,
                                summary=summarize(rows)))
    (out / "idle.json").write_text(json.dumps(dict(meta, results=results), indent=1) + "\n")
    text = markdown(meta, results)
    (out / "idle.md").write_text(text)
    print(f"`{meta['command']}` on {meta['host']} ({meta['cpus']} CPUs), {meta['date']}\n")
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
