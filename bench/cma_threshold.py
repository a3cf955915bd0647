"""Two settings of the node segment against each other, inside one job:
single copies against the slots (where the threshold GLOOCY_CMA_MIN_BYTES
should lie on this machine), or, with --compare chunk, 256 KiB slots
against 1 MiB ones (GLOOCY_SHM_CHUNK_BYTES; no single copies), or, with
--compare stream, results copied through the caches against streaming
stores from 8 MiB (GLOOCY_STREAM_MIN_BYTES).

    python bench/cma_threshold.py [-n 2] [--compare cma|chunk|stream]
                                  [--collective alltoall allgather
                                  allreduce reduce_scatter]
                                  [--sizes 1M,2M,4M,8M,16M,32M] [--iters 40]

One gloocy-run job; each rank makes two Dups of the world, whose node
segments (made at their first collective) take the environment as it is
then: for cma, one that never copies once (slots), one that always does
(cma). Iterations alternate between the two (A B B A ...), a barrier before each,
so that the machine's drift and the ranks' placement on the CPUs hit both
alike, which separate jobs do not ensure on a busy machine. Printed per
point: the slowest rank's 10th percentile and median, in us, and the
ratio of the medians (first / second: > 1, the second is faster).
Sizes are as gloocy-bench counts them (alltoall, reduce_scatter: each
rank's send buffer; allgather: the gathered total; allreduce: the buffer).
"""

import argparse
import os
import subprocess
import sys

NEVER = str(1 << 62)
COMPARISONS = {
    "cma": {"slots": {"GLOOCY_CMA_MIN_BYTES": NEVER},
            "cma": {"GLOOCY_CMA_MIN_BYTES": "0"}},
    "chunk": {"256K": {"GLOOCY_SHM_CHUNK_BYTES": str(256 << 10),
                       "GLOOCY_CMA_MIN_BYTES": NEVER},
              "1M": {"GLOOCY_SHM_CHUNK_BYTES": str(1 << 20),
                     "GLOOCY_CMA_MIN_BYTES": NEVER}},
    "stream": {"cached": {"GLOOCY_STREAM_MIN_BYTES": NEVER},
               "stream": {"GLOOCY_STREAM_MIN_BYTES": str(8 << 20)}},
}


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def rank_main(compare, collectives, sizes, iters):
    import time
    import numpy as np
    import gloocy
    from gloocy import MPI

    world = gloocy.init()
    n = world.size
    comms = {}
    configs = COMPARISONS[compare]
    for name, env in configs.items():
        os.environ.update(env)
        comms[name] = world.Dup()
        comms[name].Barrier()            # its segment, with this threshold

    def call(comm, coll, size):
        count = size // 4
        if coll == "allreduce":
            s = np.ones(count, np.float32)
            return lambda: comm.Allreduce(MPI.IN_PLACE, s)
        if coll == "reduce_scatter":
            s, d = np.ones(count, np.float32), np.empty(count // n, np.float32)
            return lambda: comm.Reduce_scatter_block(s, d)
        if coll == "alltoall":
            s, d = np.ones(count, np.float32), np.empty(count, np.float32)
            return lambda: comm.Alltoall(s, d)
        s = np.ones(count // n, np.float32)
        d = np.empty(count // n * n, np.float32)
        return lambda: comm.Allgather(s, d)

    names = list(configs)
    if world.rank == 0:
        print(f"| collective | bytes | {names[0]} p10 / median us | {names[1]} p10 / "
              f"median us | {names[0]} / {names[1]} |\n|---|---:|---:|---:|---:|",
              flush=True)
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
                      f"{worst[names[0]][1] / worst[names[1]][1]:.2f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--compare", choices=sorted(COMPARISONS), default="cma")
    ap.add_argument("--collective", nargs="+", default=["alltoall", "allgather"])
    ap.add_argument("--sizes", default="1M,2M,4M,8M,16M,32M")
    ap.add_argument("--iters", type=int, default=40)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    subprocess.run([sys.executable, "-m", "gloocy.run", "-n", str(args.n),
                    sys.executable, __file__, "--rank", args.compare,
                    ",".join(args.collective),
                    args.sizes, str(args.iters)],
                   env=dict(os.environ, GLOOCY_TRANSPORT="shm"), check=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        rank_main(sys.argv[2], sys.argv[3].split(","),
                  [parse_size(s) for s in sys.argv[4].split(",")], int(sys.argv[5]))
    else:
        main()
