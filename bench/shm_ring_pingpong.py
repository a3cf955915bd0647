"""Point-to-point over the shared-memory rings at N = 2, by ring size: what
a pair with a smaller ring (many local ranks: see transport/shm.py) costs.

    python bench/shm_ring_pingpong.py [--rings 262144,65536,32768] [--rounds 3]

Each round runs one gloocy-run job per ring size, in turn (interleaved),
each forcing GLOOCY_SHM_RING_BYTES; rank 0 sends a buffer to rank 1, which
sends it back (a barrier before each round trip), at 8 B - 16 MiB. Printed
per job: half a round trip, 10th percentile and median, in us, and the
load average when the job started.
"""

import argparse
import json
import os
import subprocess
import sys

SIZES = [8, 4096, 65536, 1 << 20, 16 << 20]


def rank_main():
    import time
    import numpy as np
    import gloocy

    comm = gloocy.init()
    r = comm.rank
    out = {}
    for size in SIZES:
        a = np.zeros(size, np.uint8)
        iters = 200 if size <= 65536 else (60 if size <= 1 << 20 else 15)
        ts = []
        for i in range(iters + 3):
            comm.Barrier()
            t = time.perf_counter()
            if r == 0:
                comm.Send(a, 1)
                comm.Recv(a, 1)
            else:
                comm.Recv(a, 0)
                comm.Send(a, 0)
            if i >= 3:
                ts.append((time.perf_counter() - t) / 2)
        out[size] = [round(float(x), 1) for x in np.percentile(ts, [10, 50]) * 1e6]
    if r == 0:
        print("RESULT " + json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rings", default="262144,65536,32768")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print("| round | ring | load | " + " | ".join(
        f"{s} B p10 / median us" for s in SIZES) + " |")
    print("|---:|---:|---:|" + "---:|" * len(SIZES))
    for k in range(args.rounds):
        for ring in args.rings.split(","):
            load = os.getloadavg()[0]
            p = subprocess.run([sys.executable, "-m", "gloocy.run", "-n", "2",
                                sys.executable, __file__, "--rank"],
                               env=dict(os.environ, GLOOCY_TRANSPORT="shm",
                                        GLOOCY_SHM_RING_BYTES=ring),
                               capture_output=True, text=True, timeout=600)
            got = [json.loads(line.split("RESULT ", 1)[1])
                   for line in p.stdout.splitlines() if "RESULT " in line]
            if not got:
                raise RuntimeError(f"ring {ring} failed: {p.stderr[-2000:]}")
            cells = " | ".join(f"{a} / {b}" for a, b in got[0].values())
            print(f"| {k + 1} | {ring} | {load:.1f} | {cells} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--rank"]:
        rank_main()
    else:
        main()
