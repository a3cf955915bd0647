"""Shared memory per host: the node segment and the shm pairs' rings, at
16, 64 and 128 local ranks (issue 16, item 4).

    python bench/shm_memory.py [-n 16 64 128] [--all-pairs] [--timeout 600]

For each N it starts N ranks on this host under gloocy-run
(GLOOCY_TRANSPORT=shm), runs a barrier, a 1 MiB allreduce, bcast and
alltoall (the node paths) and then a ring of sendrecvs (each rank with
its two neighbours: the pairs a ring algorithm uses); with --all-pairs,
then a 256 KiB sendrecv between every two ranks (every pair made and its
rings filled: the worst case). Each rank lists
its memfd segments from /proc/self/maps (their files through
/proc/self/map_files, which needs CAP_SYS_ADMIN: run it as root). Rank 0 adds them up once per
segment (by inode) and prints, per kind (gloocy-node, gloocy-ring):
segments, bytes allocated (their size) and bytes resident (the tmpfs
pages touched, st_blocks). It also prints what a full mesh of pairs
would allocate (every pair made: N(N-1)/2 rings), from the sizes in use.
GLOOCY_SHM_RING_BYTES=262144 gives the rings their size before they were
cut by the number of local ranks."""

import argparse
import json
import os
import subprocess
import sys
import time


def rank_main():
    import numpy as np
    import gloocy

    comm = gloocy.init()
    n, r = comm.size, comm.rank
    comm.Barrier()
    x = np.ones(1 << 18, np.float32)
    comm.Allreduce(gloocy.IN_PLACE, x)
    comm.Bcast(x, root=0)
    y = np.empty_like(x)
    comm.Alltoall(x, y)
    comm.Sendrecv(x, (r + 1) % n, recvbuf=y, source=(r - 1) % n)
    comm.Sendrecv(x, (r - 1) % n, recvbuf=y, source=(r + 1) % n)
    if os.environ.get("SHM_MEMORY_ALL_PAIRS") == "1":
        for k in range(1, n):
            comm.Sendrecv(x[:1 << 16], (r + k) % n, recvbuf=y[:1 << 16],
                          source=(r - k) % n)
    comm.Barrier()
    mine = {}
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 6 or not fields[5].startswith("/memfd:gloocy-"):
                continue
            kind = fields[5][len("/memfd:"):]
            try:       # the file behind the mapping (its fd is closed)
                st = os.stat(f"/proc/self/map_files/{fields[0]}")
            except OSError:
                continue
            mine[st.st_ino] = (kind, st.st_size, st.st_blocks * 512)
    every = comm.gather(mine, root=0)
    if r == 0:
        seen = {}
        for d in every:
            seen.update(d)
        out = {}
        for kind, size, resident in seen.values():
            k = out.setdefault(kind, [0, 0, 0])
            k[0] += 1
            k[1] += size
            k[2] += resident
        print("RESULT " + json.dumps({"n": n, "segments": out}), flush=True)
    comm.Barrier()


def run(n, timeout, all_pairs):
    env = dict(os.environ, GLOOCY_TRANSPORT="shm",
               SHM_MEMORY_ALL_PAIRS="1" if all_pairs else "0")
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "gloocy.run", "-n", str(n), "--timeout", str(timeout),
                        sys.executable, __file__, "--rank"],
                       env=env, capture_output=True, text=True)
    took = time.monotonic() - start
    for line in p.stdout.splitlines():
        if "RESULT " in line:        # gloocy-run prefixes "[rank] "
            return json.loads(line.split("RESULT ", 1)[1]), took
    raise RuntimeError(f"N = {n} failed (exit {p.returncode}): {p.stderr[-2000:]}")


def mib(b):
    return f"{b / 2**20:.1f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, nargs="+", default=[16, 64, 128])
    ap.add_argument("--all-pairs", action="store_true",
                    help="a sendrecv between every two ranks too")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    print("| local ranks | node segment (allocated / resident) | rings made "
          "(count, allocated / resident) | full mesh of rings would be | total "
          "allocated / resident per rank | start + run s |")
    print("|---:|---|---|---|---:|---:|")
    for n in args.n:
        got, took = run(n, args.timeout, args.all_pairs)
        seg = got["segments"]
        node = seg.get("gloocy-node", [0, 0, 0])
        ring = seg.get("gloocy-ring", [0, 0, 0])
        per_ring = ring[1] / ring[0] if ring[0] else 0
        mesh = n * (n - 1) // 2 * per_ring
        total, touched = node[1] + ring[1], node[2] + ring[2]
        print(f"| {n} | {mib(node[1])} / {mib(node[2])} | {ring[0]}, "
              f"{mib(ring[1])} / {mib(ring[2])} | {mib(mesh)} | "
              f"{mib(total / n)} / {mib(touched / n)} | {took:.1f} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--rank"]:
        rank_main()
    else:
        main()
