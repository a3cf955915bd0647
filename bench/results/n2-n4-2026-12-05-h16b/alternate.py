"""Call-by-call alternation of the node allgather/alltoall variants in one job
(same load for each): needs a temporary hook, not committed, appended to
gloocy/_node_exchange.pxi for the run of 2026-12-05:

    def _experiment_set(Context ctx, int64_t cma_min, int64_t stream_min):
        global _stream_min
        ctx.node.cma_min = cma_min
        _stream_min = stream_min

    python -m gloocy.run -n N python alternate.py allgather|alltoall 0.25,1,4,16,64
"""
import sys, time, os
import numpy as np
from gloocy import MPI
from gloocy._core import _experiment_set
comm = MPI.COMM_WORLD; n = comm.size; r = comm.rank
ctx = comm._ctx
coll = sys.argv[1]; sizes = [float(x) for x in sys.argv[2].split(",")]
BIG = 1 << 50
# (the run used 2 << 20; since df5e848 an allgather copies once only below it)
variants = {"cma": ((2 << 20) - 64, BIG), "cmaNT": ((2 << 20) - 64, 8 << 20), "slots": (BIG, BIG), "slotsNT": (BIG, 8 << 20)}
names = sys.argv[3].split(",") if len(sys.argv) > 3 else list(variants)
for mib in sizes:
    nb = int(mib * (1 << 20)); blk = nb // n // 4
    if coll == "allgather":
        s = np.full(blk, r, np.float32); rv = np.zeros(blk * n, np.float32)
        f = lambda: comm.Allgather(s, rv)
    else:
        s = np.arange(blk * n, dtype=np.float32); rv = np.zeros(blk * n, np.float32)
        f = lambda: comm.Alltoall(s, rv)
    iters = max(8, min(100, int(1.0e9 / nb)))
    ts = {v: [] for v in names}
    for it in range(iters):
        for v in names:
            _experiment_set(ctx, *variants[v])
            comm.Barrier(); t = time.perf_counter(); f(); ts[v].append(time.perf_counter() - t)
    res = comm.gather({v: np.median(ts[v]) for v in names}, root=0)
    if r == 0:
        line = "  ".join(f"{v} {max(d[v] for d in res)*1e6:7.0f}" for v in names)
        print(f"{coll} {mib:5} MiB n={n} iters={iters}: {line}  (load {os.getloadavg()[0]:.1f})", flush=True)
