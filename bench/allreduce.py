"""Allreduce (SUM, float32, in place): median latency and bus bandwidth.

    python bench/allreduce.py [-n 2] [--sizes 4,1K,1M] [--iters-budget S]
                              [--algorithm auto|ring|recursive_doubling] [--json PATH]

Started without gloocy-run, the script runs itself under it and prints a
markdown table. Every rank times every iteration; a size's latency is the
slowest rank's median. Bus bandwidth is 2(n-1)/n * bytes / latency, the
figure that a ring allreduce at link speed holds constant as n grows.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_SIZES = [4 << (2 * k) for k in range(13)]    # 4 B .. 64 MiB, powers of 4
OUT_ENV = "GLOOCY_BENCH_OUT"                        # where rank 0 leaves its figures


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = units.get(text[-1:], 1)
    nbytes = int(text[:-1] if scale > 1 else text) * scale
    if nbytes < 4 or nbytes % 4:
        raise argparse.ArgumentTypeError(f"{text}: sizes are whole float32 "
                                         "arrays (a multiple of 4 bytes)")
    return nbytes


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-n", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--sizes", type=lambda s: [parse_size(x) for x in s.split(",")],
                   default=DEFAULT_SIZES, help="bytes, comma-separated; K/M/G ok")
    p.add_argument("--iters-budget", type=float, default=1.0, metavar="S",
                   help="seconds of timed iterations per size (default 1)")
    p.add_argument("--algorithm", default="auto",
                   choices=("auto", "ring", "recursive_doubling"))
    p.add_argument("--json", metavar="PATH", help="also write the raw figures")
    return p.parse_args(argv)


def chosen_algorithm(comm, nbytes, algorithm):
    """What the core runs (mirrors run_allreduce's choice in _collectives.pxi)."""
    if comm.size == 1:
        return "none (one rank)"
    if algorithm != "auto":
        return algorithm
    small = nbytes <= comm._ctx.small_allreduce or nbytes // 4 < comm.size
    return "recursive_doubling" if small else "ring"


def bench_size(comm, nbytes, args):
    import numpy as np
    import gloocy
    n, algo = comm.size, (None if args.algorithm == "auto" else args.algorithm)
    buf = np.full(nbytes // 4, comm.rank + 1, dtype=np.float32)

    def allreduce():
        comm.Allreduce(gloocy.IN_PLACE, buf, algorithm=algo)

    allreduce()                                    # verify once, then warm up
    want = n * (n + 1) // 2
    if not (buf == want).all():
        bad = int(np.flatnonzero(buf != want)[0])
        raise AssertionError(f"rank {comm.rank}: Allreduce of {nbytes} bytes: "
                             f"element {bad} is {buf[bad]}, expected {want}")
    buf.fill(0)                                    # stays 0: no inf, no NaN
    for _ in range(3):
        allreduce()
    comm.Barrier()                                 # probe with everyone ready
    start = time.perf_counter()
    for _ in range(3):
        allreduce()
    iters = np.zeros(1, dtype=np.int64)
    if comm.rank == 0:                             # rank 0 decides, all follow
        per_call = (time.perf_counter() - start) / 3
        iters[0] = min(max(int(args.iters_budget / max(per_call, 1e-7)), 5), 10000)
    comm.Bcast(iters, root=0)
    times = []
    for _ in range(int(iters[0])):
        start = time.perf_counter()
        allreduce()
        times.append(time.perf_counter() - start)
    median = np.array([statistics.median(times)])
    medians = comm.allgather(median[0])
    comm.Allreduce(gloocy.IN_PLACE, median, op=gloocy.MAX)
    row = dict(bytes=nbytes, iters=int(iters[0]),
               algorithm=chosen_algorithm(comm, nbytes, args.algorithm),
               median_s=float(median[0]), rank_medians_s=medians,
               bus_bandwidth_GBps=2 * (n - 1) / n * nbytes / median[0] / 1e9)
    if args.json:
        row["times_s"] = comm.allgather(times)
    return row


def run_rank(args):
    import gloocy
    comm = gloocy.init()
    rows = []
    for nbytes in args.sizes:
        rows.append(bench_size(comm, nbytes, args))
        if comm.rank == 0:
            print(f"{nbytes} B: {rows[-1]['iters']} iterations, "
                  f"{rows[-1]['median_s'] * 1e6:.1f} us", file=sys.stderr)
    if comm.rank == 0:
        report = dict(benchmark="allreduce", op="SUM", dtype="float32",
                      in_place=True, n=comm.size, algorithm=args.algorithm,
                      transport="tcp" if comm.size > 1 else "none",
                      gloocy=gloocy.__version__, host=platform.node(),
                      cpus=os.cpu_count(), iters_budget_s=args.iters_budget,
                      results=rows)
        deliver(report, args, os.environ.get(OUT_ENV))


def deliver(report, args, out=None):
    if out:                                        # the parent prints it
        with open(out, "w") as f:
            json.dump(report, f)
        return
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print(f"Allreduce SUM float32 in place, n = {report['n']}, "
          f"{report['transport']}, {report['cpus']} CPUs\n")
    print("| bytes | median latency (µs) | bus bandwidth (GB/s) | "
          f"algorithm ({report['algorithm']}) |")
    print("|---:|---:|---:|:---|")
    for r in report["results"]:
        print(f"| {r['bytes']} | {r['median_s'] * 1e6:.1f} | "
              f"{r['bus_bandwidth_GBps']:.3f} | {r['algorithm']} |")


def main():
    args = parse_args()
    if "GLOOCY_RANK" in os.environ:
        return run_rank(args)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        cmd = [sys.executable, "-m", "gloocy.run", "-n", str(args.n),
               sys.executable, os.path.abspath(__file__), *sys.argv[1:]]
        rc = subprocess.run(cmd, env=dict(os.environ, **{OUT_ENV: out})).returncode
        if rc:
            sys.exit(rc)
        with open(out) as f:
            deliver(json.load(f), args)


if __name__ == "__main__":
    main()
