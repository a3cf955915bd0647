"""Whether the ranks of a large node call share a CPU, and what it costs:
alternating jobs with GLOOCY_SPREAD=1 (node_spread moves a rank that finds
a lower-ranked one on its CPU) and GLOOCY_SPREAD=0 (the scheduler's
placement as it is), or with any other settings of the environment.

    python bench/cma_placement.py [-n 2] [--sizes 4M,16M] [--iters 200]
                                  [--jobs 3] [--collective alltoall]
                                  [--settings GLOOCY_SPREAD=1 GLOOCY_SPREAD=0]

(each of --settings: NAME=VALUE[,NAME=VALUE...], or "-" for none).
Each job times the collective (Alltoall or Allreduce) at each size (a
barrier before each call) and notes, per call, whether rank 0 and rank 1
ended it on the same CPU.
Printed per job and size: the slowest rank's median in us, the calls that
ended with ranks 0 and 1 on one CPU, and the medians of those calls and of
the others.
"""

import argparse
import os
import subprocess
import sys


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def rank_main(sizes, iters, collective, setting):
    import ctypes
    import time
    import numpy as np
    import gloocy

    libc = ctypes.CDLL(None)
    world = gloocy.init()
    call = {"alltoall": world.Alltoall, "allreduce": world.Allreduce}[collective]
    for size in sizes:
        s = np.ones(size // 4, np.float32)
        r = np.zeros(size // 4, np.float32)
        for _ in range(3):
            call(s, r)
        ts, cpus = [], []
        for _ in range(iters):
            world.Barrier()
            t = time.perf_counter()
            call(s, r)
            ts.append(time.perf_counter() - t)
            cpus.append(libc.sched_getcpu())
        ts = world.allgather(np.array(ts) * 1e6)
        cpus = world.allgather(np.array(cpus))
        if world.rank == 0:
            t = np.max(ts, axis=0)
            same = cpus[0] == cpus[1]
            part = [f"{np.median(t[m]):.0f}" if m.any() else "-" for m in (same, ~same)]
            print(f"| {setting} | {size >> 10} KiB | "
                  f"{np.median(t):.0f} | {same.sum()}/{len(t)} | {part[0]} | "
                  f"{part[1]} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--sizes", default="4M,16M")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--collective", choices=("alltoall", "allreduce"),
                    default="alltoall")
    ap.add_argument("--settings", nargs="+",
                    default=["GLOOCY_SPREAD=1", "GLOOCY_SPREAD=0"])
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}; {args.collective}",
          flush=True)
    print("| setting | bytes | median us | calls on one CPU | their median | "
          "the others' |\n|---|---:|---:|---:|---:|---:|", flush=True)
    for _ in range(args.jobs):
        for setting in args.settings:
            env = dict(os.environ, GLOOCY_TRANSPORT="shm")
            if setting != "-":
                env.update(kv.split("=", 1) for kv in setting.split(","))
            subprocess.run([sys.executable, "-m", "gloocy.run", "-n", str(args.n),
                            sys.executable, __file__, "--rank", args.sizes,
                            str(args.iters), args.collective, setting],
                           env=env, check=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        rank_main([parse_size(s) for s in sys.argv[2].split(",")], int(sys.argv[3]),
                  sys.argv[4], sys.argv[5])
    else:
        main()
