"""Gather, Scatter and Reduce (root 0) at small sizes, run by gloocy.MPI and
by mpi4py with the same code: gloocy-bench does not have these three yet.

    gloocy-run -n 2 python bench/rooted.py gloocy
    mpiexec -n 2 python bench/rooted.py mpi4py

Each line: collective, bytes per rank, µs per call (the best of 5 rounds
of 3,000 calls, each round's time the slowest rank's). Run the two
alternately, several times, and compare within a pair.
"""

import sys
import time

import numpy as np

if sys.argv[1:] == ["mpi4py"]:
    from mpi4py import MPI
else:
    from gloocy import MPI

CALLS, ROUNDS, WARMUP = 3000, 5, 200


def main():
    comm = MPI.COMM_WORLD
    lines = []
    for nbytes in (8, 64, 1024, 4096):
        n = nbytes // 4
        mine = np.ones(n, np.float32)
        every = np.ones(n * comm.size, np.float32)
        out = np.empty(n, np.float32)
        calls = {"gather": lambda: comm.Gather(mine, every, root=0),
                 "scatter": lambda: comm.Scatter(every, out, root=0),
                 "reduce": lambda: comm.Reduce(mine, out, root=0)}
        for name, call in calls.items():
            best = float("inf")
            for _ in range(ROUNDS):
                comm.Barrier()
                for _ in range(WARMUP):
                    call()
                comm.Barrier()
                start = time.perf_counter()
                for _ in range(CALLS):
                    call()
                took = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
                best = min(best, took / CALLS * 1e6)
            lines.append(f"{name} {nbytes} {best:.2f}")
    if comm.rank == 0:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
