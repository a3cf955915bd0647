"""Small bcasts on one host: the binomial tree over the shared-memory pairs
(algorithm="binomial") against the node segment (algorithm="shm"), in one
job, interleaved size by size and algorithm by algorithm (the order flips
every round), to place NODE_BCAST_MIN (gloocy/_node.pxd).

    GLOOCY_TRANSPORT=shm gloocy-run -n 4 python bench/bcast_tree.py [ROUNDS]

Back-to-back Bcasts from root 0, timed per call on every rank. A tree's
root writes into its children's rings and goes on, so most calls of a
reader find their bytes there and the median hides the waits: each line
gives the slowest rank's mean per call (what a loop of bcasts costs) and
its median (what gloocy-bench shows), in µs, per round. Rank 0 prints one
JSON list of [round, bytes, algorithm, median, mean, calls].
"""

import json
import sys
import time

import numpy as np

import gloocy

SIZES = [8, 1024, 16384, 32768, 49152, 65536, 98304, 131072, 262144]
ALGORITHMS = ["binomial", "shm"]
BUDGET, WARMUP, PROBE = 0.25, 10, 3


def main():
    comm = gloocy.init()
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    perf = time.perf_counter
    out = []
    for rnd in range(rounds):
        for size in SIZES:
            for algo in (ALGORITHMS if rnd % 2 == 0 else ALGORITHMS[::-1]):
                b = np.zeros(size, np.uint8)
                for _ in range(WARMUP):
                    comm.Bcast(b, root=0, algorithm=algo)
                comm.Barrier()
                t = perf()
                for _ in range(PROBE):
                    comm.Bcast(b, root=0, algorithm=algo)
                calls = np.zeros(1, np.int64)       # rank 0 decides, all follow
                if comm.rank == 0:
                    per = max((perf() - t) / PROBE, 1e-9)
                    calls[0] = min(max(int(BUDGET / per), 5), 5000)
                comm.Bcast(calls, root=0)
                times = np.empty(int(calls[0]))
                for i in range(len(times)):
                    t = perf()
                    comm.Bcast(b, root=0, algorithm=algo)
                    times[i] = perf() - t
                stats = np.zeros((2, comm.size))
                stats[:, comm.rank] = np.median(times), np.mean(times)
                comm.Allreduce(gloocy.IN_PLACE, stats)
                out.append([rnd, size, algo, stats[0].max() * 1e6,
                            stats[1].max() * 1e6, len(times)])
    if comm.rank == 0:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
