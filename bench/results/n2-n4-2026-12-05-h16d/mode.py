"""Which mode a job runs in: a loop of 300 calls (default: Alltoall of 2
MiB) timed per call, each rank's CPU sampled every 30 calls, its context
switches counted.

    GLOOCY_TRANSPORT=shm python -m gloocy.run -n 2 python mode.py [BYTES] [alltoall|bcast|allgather]
"""
import os, sys, time, numpy as np
import gloocy
from gloocy import MPI
w = gloocy.init()
nb = int(sys.argv[1]) if len(sys.argv) > 1 else 2 << 20
coll = sys.argv[2] if len(sys.argv) > 2 else "alltoall"
s = np.ones(nb // 4, np.float32); r = np.empty_like(s)
def cpu():
    return int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[36])
def ctxsw():
    d = dict(l.split(':') for l in open('/proc/self/status') if 'ctxt' in l)
    return int(d['voluntary_ctxt_switches']), int(d['nonvoluntary_ctxt_switches'])
for _ in range(5):
    w.Alltoall(s, r)
ts, cpus = [], []
c0 = ctxsw()
for i in range(300):
    t = time.perf_counter()
    if coll == "alltoall": w.Alltoall(s, r)
    elif coll == "bcast": w.Bcast(s, root=0)
    else: w.Allgather(s[:s.size // 2], r[:s.size // 2 * 2])
    ts.append(time.perf_counter() - t)
    if i % 30 == 0: cpus.append(cpu())
c1 = ctxsw()
print(f"rank {w.rank} median {np.median(ts)*1e6:.0f} us p10 {np.percentile(ts,10)*1e6:.0f} cpus {''.join(map(str,cpus))} vol {c1[0]-c0[0]} invol {c1[1]-c0[1]} node.step {w._ctx.node.step} spin {w._ctx.node.spin_now}", flush=True)
