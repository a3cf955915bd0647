"""The per-rank timing loop, the same for every implementation.

    python -m gloocy.bench.worker --impl gloocy:tcp --collectives allreduce,barrier \\
        --sizes 4,1024 --budget 0.5 --round 0 --out FILE

Run by every rank of a job (started by gloocy-run or mpiexec). For each
(collective, size): one checked call (the result against a closed form,
agreed by all ranks), warm-up, a probe from which rank 0 picks the
iteration count for ``--budget`` seconds and broadcasts it, then every
iteration timed on every rank. Each rank's median/min/max reach every rank
by an allreduce; the figure is the slowest rank's median. Rank 0 appends
one JSON line per point to ``--out`` as soon as it has it.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from gloocy.bench.collectives import Case, busbw_factor, make_case
from gloocy.bench.impls import Impl, parse_spec

__all__ = ["measure", "verified_call", "main"]

WARMUP = 3          # calls after the checked one, untimed
PROBE = 3           # calls rank 0 times to pick the count
MIN_ITERS = 3


def measure(impl: Impl, collective: str, size: int, *, budget: float,
            max_iters: int) -> dict:
    """Time one (collective, size) on this rank; every rank gets the figures."""
    perf = time.perf_counter
    case = make_case(collective, size, impl.size, impl.rank)
    args = [impl.wrap(a) for a in case.arrays]
    call = getattr(impl, collective)

    verified = verified_call(impl, case, call, args)
    case.reset()

    for _ in range(WARMUP):
        call(*args)
    impl.barrier()                               # probe with everyone ready
    start = perf()
    for _ in range(PROBE):
        call(*args)
    iters = np.zeros(1, np.int64)
    if impl.rank == 0:                           # rank 0 decides, all follow
        per_call = max((perf() - start) / PROBE, 1e-9)
        iters[0] = min(max(int(budget / per_call), MIN_ITERS), max_iters)
    impl.bcast(impl.wrap(iters))

    times = np.empty(int(iters[0]))
    for i in range(len(times)):
        start = perf()
        call(*args)
        times[i] = perf() - start

    stats = np.zeros((impl.size, 3))             # each rank fills its row
    stats[impl.rank] = np.median(times), times.min(), times.max()
    impl.allreduce(impl.wrap(stats))
    slow = int(np.argmax(stats[:, 0]))
    median, low, high = (float(x) for x in stats[slow])
    factor = busbw_factor(collective, impl.size)
    algbw = case.nbytes / median / 1e9 if factor is not None else None
    return dict(
        collective=collective, world_size=impl.size, size=case.size,
        bytes=case.nbytes, iters=len(times),
        median_s=median, min_s=low, max_s=high, slowest_rank=slow,
        rank_median_s=[float(x) for x in stats[:, 0]],
        algbw_GBps=algbw, busbw_GBps=algbw * factor if algbw is not None else None,
        verified=verified)


def verified_call(impl: Impl, case: Case, call, args) -> bool:
    """Run the collective once and check the result against the case's
    closed form on every rank: True on every rank only if every rank's
    check passed (a wrong result anywhere makes every rank say False)."""
    call(*args)
    bad = np.array([0.0 if case.check() else 1.0])
    impl.allreduce(impl.wrap(bad))
    return bool(bad[0] == 0)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gloocy.bench.worker",
                                description="One rank of a gloocy-bench job.")
    p.add_argument("--impl", required=True, help="e.g. gloocy:tcp, torch-gloo, mpi4py")
    p.add_argument("--collectives", required=True, help="comma-separated")
    p.add_argument("--sizes", required=True, help="bytes, comma-separated")
    p.add_argument("--budget", type=float, default=0.5)
    p.add_argument("--max-iters", type=int, default=10000)
    p.add_argument("--round", type=int, default=0)
    p.add_argument("--out", required=True, help="rank 0's JSON Lines file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    impl = parse_spec(args.impl)
    impl.init()
    common = dict(implementation=impl.name, transport=impl.transport,
                  label=impl.label, version=impl.version(), round=args.round,
                  budget_s=args.budget, host=platform.node())
    sizes = [int(s) for s in args.sizes.split(",")]
    out = open(args.out, "a") if impl.rank == 0 else None
    try:
        for collective in args.collectives.split(","):
            for size in ([0] if collective == "barrier" else sizes):
                row = measure(impl, collective, size, budget=args.budget,
                              max_iters=args.max_iters)
                if out is not None:
                    row = dict(common, **row, time=time.time())
                    out.write(json.dumps(row) + "\n")
                    out.flush()
    finally:
        if out is not None:
            out.close()
        impl.close()


if __name__ == "__main__":
    main()
