"""gloocy's node collectives against MPICH's inside one job, call by call:
the same processes (started by MPICH's mpiexec; gloocy.init() bootstraps
through mpi4py) alternate an mpi4py call and a gloocy call on the same
buffers, a barrier before each, so that this VM's two modes (a cache
line written by one CPU read 2-5x slower by the other in the slow one,
job by job) and the ranks' placement hit both alike.

    python bench/cma_vs_mpich.py [-n 2] [--collective allgather alltoall
                                 bcast reduce_scatter] [--sizes 1M,4M,16M]
                                 [--iters 40] [--yield]
                                 [--variant GLOOCY_CMA_MIN_BYTES=0 ...]

Each --variant is a Dup of gloocy's world made with those environment
settings (its node segment takes them, as bench/cma_threshold.py does),
timed beside the world in the same rotation. All share the buffers, so
one's cache footprint reaches the next call (streaming stores slowed
MPICH's next call as much as they sped gloocy's): a setting that changes
where the results end up is fairer measured as the world's own, one
setting per job. Printed per point: the
slowest rank's 10th percentile and median in us, and MPICH's median /
each gloocy's (> 1: gloocy faster). Sizes are as gloocy-bench counts them (alltoall, reduce_scatter,
bcast: each rank's buffer; allgather: the gathered total). --yield sets
MPIR_CVAR_ENABLE_HEAVY_YIELD=1 (the N > CPUs comparison).
"""

import argparse
import os
import subprocess
import sys


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def calls(comm, coll, size, np):
    """fn(comm): one collective of `size` bytes on buffers made once."""
    n = comm.Get_size()
    count = size // 4
    if coll == "bcast":
        s = np.ones(count, np.float32)
        return lambda c: c.Bcast(s, root=0)
    if coll == "reduce_scatter":
        s, d = np.ones(count, np.float32), np.empty(count // n, np.float32)
        return lambda c: c.Reduce_scatter_block(s, d)
    if coll == "alltoall":
        s, d = np.ones(count, np.float32), np.empty(count, np.float32)
        return lambda c: c.Alltoall(s, d)
    s = np.ones(count // n, np.float32)
    d = np.empty(count // n * n, np.float32)
    return lambda c: c.Allgather(s, d)


def rank_main(collectives, sizes, iters, variants):
    import time
    import numpy as np
    from mpi4py import MPI as M
    import gloocy

    world = gloocy.init()
    mpich = M.COMM_WORLD
    comms = {"mpich": mpich, "gloocy": world}
    for v in variants:
        saved = dict(os.environ)
        os.environ.update(kv.split("=", 1) for kv in v.split(","))
        comms[v] = world.Dup()
        comms[v].Barrier()               # its segment, with these settings
        os.environ.clear()
        os.environ.update(saved)
    gl = list(comms)[1:]
    if world.rank == 0:
        print("| collective | bytes | MPICH p10 / median us | "
              + " | ".join(f"{k} p10 / median us" for k in gl) + " | "
              + " | ".join(f"MPICH / {k}" for k in gl) + " |\n|---|---:|"
              + "---:|" * (1 + 2 * len(gl)), flush=True)
    for coll in collectives:
        for size in sizes:
            fn = calls(world, coll, size, np)
            ts = {k: [] for k in comms}
            for k in comms:
                for _ in range(3):
                    fn(comms[k])
            ks = list(comms)
            for i in range(iters):
                # each in turn first: reversing the list instead ran its ends
                # twice in a row, and a call just after itself (same buffers,
                # same segment) ran up to 1.3x faster than one in the middle
                for k in ks[i % len(ks):] + ks[:i % len(ks)]:
                    mpich.Barrier()
                    t = time.perf_counter()
                    fn(comms[k])
                    ts[k].append(time.perf_counter() - t)
            q = {k: mpich.allgather(np.percentile(ts[k], [10, 50]) * 1e6) for k in comms}
            worst = {k: (max(a[0] for a in q[k]), max(a[1] for a in q[k])) for k in comms}
            if world.rank == 0:
                cells = " | ".join(f"{worst[k][0]:.0f} / {worst[k][1]:.0f}" for k in comms)
                ratios = " | ".join(f"{worst['mpich'][1] / worst[k][1]:.2f}" for k in gl)
                print(f"| {coll} | {size >> 10} KiB | {cells} | {ratios} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--collective", nargs="+",
                    default=["allgather", "alltoall", "bcast", "reduce_scatter"])
    ap.add_argument("--sizes", default="1M,4M,16M")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--yield", dest="heavy_yield", action="store_true")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=VALUE[,NAME=VALUE]: a gloocy Dup with these settings")
    args = ap.parse_args()
    env = dict(os.environ, GLOOCY_TRANSPORT="shm")
    if args.heavy_yield:
        env["MPIR_CVAR_ENABLE_HEAVY_YIELD"] = "1"
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    subprocess.run(["mpiexec", "-n", str(args.n), sys.executable, __file__, "--rank",
                    ",".join(args.collective), args.sizes, str(args.iters),
                    *args.variant],
                   env=env, check=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        rank_main(sys.argv[2].split(","), [parse_size(s) for s in sys.argv[3].split(",")],
                  int(sys.argv[4]), sys.argv[5:])
    else:
        main()
