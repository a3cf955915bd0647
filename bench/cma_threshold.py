"""Single copies against the node slots, inside one job: where the
threshold GLOOCY_CMA_MIN_BYTES should lie on this machine.

    python bench/cma_threshold.py [-n 2] [--collective alltoall allgather]
                                  [--sizes 1M,2M,4M,8M,16M,32M] [--iters 40]

One gloocy-run job; each rank makes two Dups of the world, whose node
segments (made at their first collective) take GLOOCY_CMA_MIN_BYTES as it
is then: one that never copies once (slots), one that always does (cma).
Iterations alternate between the two (A B B A ...), a barrier before each,
so that the machine's drift and the ranks' placement on the CPUs hit both
alike, which separate jobs do not ensure on a busy machine. Printed per
point: the slowest rank's 10th percentile and median, in us, and the
ratio of the medians (slots / cma: > 1, the single copy is faster).
Sizes are as gloocy-bench counts them (alltoall: each rank's send buffer;
allgather: the gathered total).
"""

import argparse
import os
import subprocess
import sys

CONFIGS = {"slots": str(1 << 62), "cma": "0"}


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def rank_main(collectives, sizes, iters):
    import time
    import numpy as np
    import gloocy

    world = gloocy.init()
    n = world.size
    comms = {}
    for name, value in CONFIGS.items():
        os.environ["GLOOCY_CMA_MIN_BYTES"] = value
        comms[name] = world.Dup()
        comms[name].Barrier()            # its segment, with this threshold

    def call(comm, coll, size):
        count = size // 4
        if coll == "alltoall":
            s, d = np.ones(count, np.float32), np.empty(count, np.float32)
            return lambda: comm.Alltoall(s, d)
        s = np.ones(count // n, np.float32)
        d = np.empty(count // n * n, np.float32)
        return lambda: comm.Allgather(s, d)

    names = list(CONFIGS)
    if world.rank == 0:
        print(f"| collective | bytes | slots p10 / median us | cma p10 / median us "
              f"| slots / cma |\n|---|---:|---:|---:|---:|", flush=True)
    for coll in collectives:
        for size in sizes:
            fs = {k: call(comms[k], coll, size) for k in names}
            ts = {k: [] for k in names}
            for k in names:
                for _ in range(3):
                    fs[k]()
            for i in range(iters):
                for k in (names if i % 2 == 0 else names[::-1]):
                    world.Barrier()
                    t = time.perf_counter()
                    fs[k]()
                    ts[k].append(time.perf_counter() - t)
            q = {k: world.allgather(np.percentile(ts[k], [10, 50]) * 1e6) for k in names}
            worst = {k: (max(a[0] for a in q[k]), max(a[1] for a in q[k])) for k in names}
            if world.rank == 0:
                cells = " | ".join(f"{worst[k][0]:.0f} / {worst[k][1]:.0f}" for k in names)
                print(f"| {coll} | {size >> 10} KiB | {cells} | "
                      f"{worst['slots'][1] / worst['cma'][1]:.2f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--collective", nargs="+", default=["alltoall", "allgather"])
    ap.add_argument("--sizes", default="1M,2M,4M,8M,16M,32M")
    ap.add_argument("--iters", type=int, default=40)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    subprocess.run([sys.executable, "-m", "gloocy.run", "-n", str(args.n),
                    sys.executable, __file__, "--rank", ",".join(args.collective),
                    args.sizes, str(args.iters)],
                   env=dict(os.environ, GLOOCY_TRANSPORT="shm"), check=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        rank_main(sys.argv[2].split(","), [parse_size(s) for s in sys.argv[3].split(",")],
                  int(sys.argv[4]))
    else:
        main()
