"""Back-to-back calls against calls after a barrier, in one job, 100 each,
twice, with the voluntary/involuntary context switches of each block.
    GLOOCY_TRANSPORT=shm python -m gloocy.run -n 2 python b2b.py BYTES alltoall|allgather
"""
import sys, time, numpy as np
import gloocy
w = gloocy.init()
nb = int(sys.argv[1]); coll = sys.argv[2]
s = np.ones(nb // 4, np.float32); r = np.empty_like(s)
n = w.size
f = {"alltoall": lambda: w.Alltoall(s, r), "allgather": lambda: w.Allgather(s[:s.size // n], r[:s.size // n * n])}[coll]
out = []
def ctxsw():
    d = dict(l.split(':') for l in open('/proc/self/status') if 'ctxt' in l)
    return int(d['voluntary_ctxt_switches']), int(d['nonvoluntary_ctxt_switches'])
for mode in ("b2b", "barrier", "b2b", "barrier"):
    ts = []
    c0 = ctxsw()
    for i in range(100):
        if mode == "barrier": w.Barrier()
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    c1 = ctxsw()
    out.append(f"{mode} {np.median(ts)*1e6:.0f} ({c1[0]-c0[0]}v/{c1[1]-c0[1]}i)")
print(f"{coll} {nb>>20}M rank {w.rank}: " + ", ".join(out), flush=True)
