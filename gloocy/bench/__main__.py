"""gloocy-bench: every collective side by side with torch.distributed (gloo)
and mpi4py on MPICH.

    gloocy-bench -n 2 [4 ...] --impl gloocy[:tcp|:shm] torch-gloo mpi4py \\
                 --collective allreduce [bcast ...] --sizes 4,1K,1M \\
                 --rounds 3 --budget 0.5 --out DIR [--quiet]

Writes DIR/results.jsonl (one line per job and point), DIR/run.json (what
ran, what was missing or failed), DIR/COLLECTIVE.md and DIR/COLLECTIVE.png,
and prints the tables. ``--replot`` rebuilds tables and plots from an
existing DIR.

    gloocy-bench --overhead [--calls 20000] [--rounds 5] [--out DIR] [--quiet]

times the Python face instead: the same calls through gloocy.MPI and
mpi4py in a world of one, µs per call and the ratio, written to
DIR/overhead.json and DIR/overhead.md (gloocy/bench/overhead.py).

    gloocy-bench --idle-cpu [-n 4 8] [--impl ...] [--wait 1] [--rounds 3] [--out DIR]

measures the CPU a rank burns while it waits at a barrier for a late peer
(DIR/idle.json, DIR/idle.md; gloocy/bench/idle.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

from gloocy.bench import report, runner
from gloocy.bench.progress import Progress, say
from gloocy.bench.collectives import COLLECTIVES, canonical
from gloocy.bench.impls import IMPLS, expand, parse_spec

__all__ = ["main", "parse_size"]

DEFAULT_SIZES = [4 << (2 * k) for k in range(13)]      # 4 B .. 64 MiB, powers of 4


def parse_size(text: str) -> int:
    """"4", "64K", "1M", "1MiB" -> bytes (a whole number of float32)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = units.get(t[-1:], 1)
    try:
        nbytes = int(t[:-1] if scale > 1 else t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size") from None
    if nbytes < 4 or nbytes % 4:
        raise argparse.ArgumentTypeError(
            f"{text}: sizes are whole float32 arrays (a multiple of 4 bytes)")
    return nbytes


def _sizes(text: str) -> list[int]:
    return sorted({parse_size(x) for x in text.split(",") if x.strip()})


def _collective(text: str) -> str:
    try:
        return canonical(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gloocy-bench", allow_abbrev=False,
        description="gloocy's collectives side by side with torch.distributed "
                    "(gloo) and mpi4py on MPICH.",
        epilog="Peers are optional. pip install -e \".[bench]\" in a clone brings "
               "them all (torch 2.13.0, mpi4py, mpich, tqdm, matplotlib), but "
               "plain torch from PyPI is the CUDA build, several GB: first "
               "install the CPU build, pip install torch==2.13.0 --index-url "
               "https://download.pytorch.org/whl/cpu. "
               "Bare 'gloocy' means every transport gloocy can run here.")
    p.add_argument("-n", type=int, nargs="+", default=[2], metavar="N",
                   help="world sizes (default: 2)")
    p.add_argument("--impl", nargs="+", default=["gloocy", "torch-gloo", "mpi4py"],
                   metavar="IMPL", help=f"from {', '.join(IMPLS)}; gloocy:TRANSPORT "
                   "(default: all)")
    p.add_argument("--collective", nargs="+", type=_collective,
                   default=list(COLLECTIVES), metavar="C",
                   help=f"from {', '.join(COLLECTIVES)} (default: all)")
    p.add_argument("--sizes", type=_sizes, default=DEFAULT_SIZES,
                   help="bytes, comma-separated, K/M/G allowed "
                        "(default: 4 B .. 64 MiB, powers of 4)")
    p.add_argument("--rounds", type=int, default=3,
                   help="runs of each job, interleaved (default: 3)")
    p.add_argument("--budget", type=float, default=0.5, metavar="S",
                   help="seconds of timed iterations per point (default: 0.5)")
    p.add_argument("--max-iters", type=int, default=10000,
                   help="cap on timed iterations per point (default: 10000)")
    p.add_argument("--job-timeout", type=float, metavar="S",
                   help="limit per job (default: from the points and budget)")
    p.add_argument("--out", default="gloocy-bench-out", metavar="DIR",
                   help="output directory (default: ./gloocy-bench-out)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--replot", action="store_true",
                   help="only rebuild tables and plots from DIR's files")
    p.add_argument("--overhead", action="store_true",
                   help="instead: the per-call cost of gloocy.MPI against mpi4py "
                        "in a world of one; takes only --calls (default 20000), "
                        "--rounds (default 5), --out, --quiet and --replot "
                        "(gloocy-bench --overhead --help)")
    p.add_argument("--idle-cpu", action="store_true",
                   help="instead: the CPU a rank burns while it waits at a barrier "
                        "for a late peer (gloocy-bench --idle-cpu --help)")
    return p


def _sweep(args: argparse.Namespace, out: Path) -> dict:
    """Run every job, append to results.jsonl; return run.json's content."""
    try:
        specs = expand(args.impl)
        impls = [parse_spec(s) for s in specs]
    except ValueError as e:
        raise SystemExit(f"gloocy-bench: {e}")
    meta = dict(
        command=" ".join(["gloocy-bench", *args.argv]),
        date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        host=platform.node(), cpus=len(os.sched_getaffinity(0)),
        world_sizes=args.n, collectives=args.collective, sizes=args.sizes,
        rounds=args.rounds, budget_s=args.budget, impls=[], failures=[])
    runnable = []
    for impl in impls:
        why = impl.missing()
        have = [] if why else list(impl.collectives())
        meta["impls"].append(dict(label=impl.label, missing=why, collectives=have))
        if why:
            say(f"missing: {impl.label}: {why}")
        else:
            runnable.append(impl)
            lacking = [c for c in args.collective if c not in have]
            if lacking:
                say(f"{impl.label} has no {', '.join(lacking)} (n/a in the tables)")
    jobs = runner.plan(runnable, args.n, args.rounds, args.collective, args.sizes)
    results = out / "results.jsonl"
    results.write_text("")
    progress = Progress(len(jobs), args.quiet)
    try:
        for job in jobs:
            timeout = args.job_timeout or 120 + job.points * (2 * args.budget + 5)
            progress.status(f"{job.name}: 0/{job.points}")
            result = runner.run_job(
                job, budget=args.budget, max_iters=args.max_iters, timeout=timeout,
                on_point=lambda k, j=job: progress.status(f"{j.name}: {k}/{j.points}"))
            with results.open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in result.rows)
            if result.error:
                first = result.error.splitlines()[0]
                meta["failures"].append(dict(job=job.name, why=first.split(": ", 1)[1],
                                             collectives=job.collectives))
                progress.write(f"FAILED {result.error}")
            wrong = [r for r in result.rows if not r["verified"]]
            for r in wrong:
                progress.write(f"WRONG RESULT: {job.name}: {r['collective']} "
                               f"{r['bytes']} bytes")
            progress.step()
    finally:
        progress.close()
    return meta


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--overhead" in argv:
        from gloocy.bench import overhead
        return overhead.main([a for a in argv if a != "--overhead"])
    if "--idle-cpu" in argv:
        from gloocy.bench import idle
        return idle.main([a for a in argv if a != "--idle-cpu"])
    args = _parser().parse_args(argv)
    args.argv = argv
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    if args.replot:
        meta = json.loads((out / "run.json").read_text())
    else:
        meta = _sweep(args, out)
        meta["seconds"] = round(time.monotonic() - start, 1)
        (out / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
    rows = report.load(out / "results.jsonl")
    text, files = report.write(out, rows, meta)
    print(f"`{meta['command']}` on {meta['host']} ({meta['cpus']} CPUs), "
          f"{meta['date']}\n")
    print(text)
    if not args.quiet:
        say("wrote " + ", ".join(str(f) for f in [out / "results.jsonl", *files]))
    bad = meta["failures"] or any(not r["verified"] for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
