"""Point-to-point throughput over the ibverbs transport on the libibverbs
stand-in (tests/ibmock), beside TCP and shared memory: what the stand-in
gives, not what RDMA hardware would (the stand-in moves every byte through
a Unix socket and two helper threads).

    python bench/ibverbs_standin.py            # builds the stand-in, runs 3 transports

The same buffer goes back and forth, so its registration is found in the
cache after the first transfer; GLOOCY_IB_REG_CACHE_BYTES=0 registers it
for every transfer instead. The stand-in pins no pages, so the difference
here is far smaller than on hardware.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = [8, 4096, 65536, 1 << 20, 16 << 20]


def rank_main():
    import numpy as np
    from gloocy import MPI
    comm = MPI.COMM_WORLD
    rows = []
    for n in SIZES:
        buf = np.zeros(n, np.uint8)
        reps = max(3, min(200, (64 << 20) // max(n, 1)))
        comm.Barrier()
        t = time.perf_counter()
        for _ in range(reps):                  # ping-pong
            if comm.rank == 0:
                comm.Send(buf, 1)
                comm.Recv(buf, 1)
            else:
                comm.Recv(buf, 0)
                comm.Send(buf, 0)
        dt = (time.perf_counter() - t) / reps
        rows.append((n, dt / 2 * 1e6, n / (dt / 2) / 1e6))
    if comm.rank == 0:
        for n, us, mbs in rows:
            print(f"{os.environ['GLOOCY_TRANSPORT']:8s} {n:>10d} B  {us:10.1f} us one way  "
                  f"{mbs:9.1f} MB/s", flush=True)


def main():
    sys.path.insert(0, str(ROOT / "tests"))
    import ibmock
    why = ibmock.missing()
    if why:
        sys.exit(f"cannot build the stand-in: {why}")
    env = {**os.environ, **ibmock.session_env(),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for transport in ("ibverbs", "tcp", "shm"):
        subprocess.run([sys.executable, "-m", "gloocy.run", "-n", "2", __file__, "--rank"],
                       env={**env, "GLOOCY_TRANSPORT": transport}, check=True)


if __name__ == "__main__":
    rank_main() if "--rank" in sys.argv else main()
