"""Point-to-point between local ranks, gloocy against MPICH, jobs interleaved.

Each round runs one job per contender (gloocy under gloocy-run, each
--variant as gloocy with those environment settings, then mpi4py under
MPICH's mpiexec), one after the other, so that the machine's load hits all
alike; --rounds rounds. In a job the ranks pair up (0-1, 2-3, ...) and each
pair times, per size, after a barrier:

  pingpong  the lower rank Sends then Recvs, the higher Recvs then Sends:
            half the round trip;
  exchange  both post an Irecv and an Isend and Waitall: one exchange.

Printed: per (test, size), each contender's median over the pairs'
medians in us, per round, and at the end each gloocy's median over the
rounds and MPICH's / it (> 1: gloocy faster).

    python bench/p2p_vs_mpich.py [-n 2] [--sizes 64K,256K,1M,4M,16M,64M]
        [--rounds 3] [--variant ring:GLOOCY_CMA_P2P_MIN_BYTES=1099511627776]
        [--env GLOOCY_SHM_RING_BYTES=32768] [--no-mpich]

--env applies to every gloocy job (e.g. the small rings of many local
ranks); a variant is NAME:VAR=VALUE[,VAR=VALUE].
"""

import argparse
import json
import os
import subprocess
import sys
import time


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def rank_main(lib, sizes):
    import numpy as np
    if lib == "gloocy":
        from gloocy import MPI
    else:
        from mpi4py import MPI
    comm = MPI.COMM_WORLD
    r, n = comm.Get_rank(), comm.Get_size()
    peer = r ^ 1 if (r ^ 1) < n else r
    out = {}
    for size in sizes:
        a = np.ones(size, np.uint8)
        b = np.ones(size, np.uint8)
        iters = 60 if size <= 1 << 20 else 15 if size <= 16 << 20 else 6
        for test in ("pingpong", "exchange"):
            ts = []
            for _ in range(iters + 2):
                comm.Barrier()
                t = time.perf_counter()
                if peer != r:
                    if test == "pingpong":
                        if r < peer:
                            comm.Send(a, peer, 1)
                            comm.Recv(b, peer, 2)
                        else:
                            comm.Recv(b, peer, 1)
                            comm.Send(a, peer, 2)
                    else:
                        MPI.Request.Waitall([comm.Irecv(b, peer, 3),
                                             comm.Isend(a, peer, 3)])
                ts.append(time.perf_counter() - t)
            med = float(np.median(ts[2:])) * (0.5 if test == "pingpong" else 1)
            got = comm.gather(med if peer != r else None, root=0)
            if r == 0:
                out[f"{test} {size}"] = float(np.median([g for g in got if g is not None]))
    if r == 0:
        print("RESULT " + json.dumps(out), flush=True)


def run_job(args, name, env_extra):
    here = os.path.abspath(__file__)
    sizes = ",".join(str(s) for s in args.sizes)
    env = dict(os.environ)
    if name == "mpich":
        cmd = ["mpiexec", "-n", str(args.n), sys.executable, here, "--rank",
               "mpi", "--sizes", sizes]
    else:
        env.update(args.env)
        env.update(env_extra)
        cmd = [sys.executable, "-m", "gloocy.run", "-n", str(args.n),
               sys.executable, here, "--rank", "gloocy", "--sizes", sizes]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    for line in p.stdout.splitlines():
        line = line.split("] ", 1)[-1] if line.startswith("[") else line
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{name} failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--sizes", default="64K,256K,1M,4M,16M,64M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--no-mpich", action="store_true")
    ap.add_argument("--rank", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.rank:
        return rank_main(args.rank, args.sizes)
    args.env = dict(e.split("=", 1) for e in args.env)
    contenders = [("gloocy", {})]
    for v in args.variant:
        name, _, settings = v.partition(":")
        contenders.append((name, dict(s.split("=", 1) for s in settings.split(","))))
    if not args.no_mpich:
        contenders.append(("mpich", {}))
    print(f"# n={args.n} env={args.env} variants={contenders[1:]}", flush=True)
    print("# uptime before:", os.popen("uptime").read().strip(), flush=True)
    runs = {name: [] for name, _ in contenders}
    for k in range(args.rounds):
        for name, env in contenders:
            runs[name].append(run_job(args, name, env))
            print(f"round {k} {name}: " + ", ".join(
                f"{key} {v * 1e6:.1f}" for key, v in runs[name][-1].items()), flush=True)
    print("# uptime after:", os.popen("uptime").read().strip(), flush=True)
    import statistics
    keys = list(runs["gloocy"][0])
    names = [name for name, _ in contenders]
    print("| test | bytes | " + " | ".join(f"{n} us" for n in names)
          + ("".join(f" | MPICH/{n}" for n in names if n != "mpich")
             if "mpich" in runs else "") + " |")
    print("|" + "---|" * (2 + len(names) + (len(names) - 1 if "mpich" in runs else 0)))
    for key in keys:
        test, size = key.split()
        med = {n: statistics.median(r[key] for r in runs[n]) for n in names}
        row = f"| {test} | {int(size)} | " + " | ".join(
            f"{med[n] * 1e6:.1f}" for n in names)
        if "mpich" in runs:
            row += "".join(f" | {med['mpich'] / med[n]:.2f}" for n in names if n != "mpich")
        print(row + " |")


if __name__ == "__main__":
    main()
