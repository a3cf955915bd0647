"""The parts of a node alltoall at N = 2 (own copy, one process_vm_readv of the
peer's block, both with a barrier) beside the Alltoall, alternating in one job.
    GLOOCY_TRANSPORT=shm python -m gloocy.run -n 2 python alltoall_parts16.py [BYTES]
"""
import os, sys, time, ctypes, numpy as np
import gloocy
w = gloocy.init()
nb = int(sys.argv[1]) if len(sys.argv) > 1 else 16 << 20
s = np.ones(nb // 4, np.float32); r = np.empty_like(s)
half = s.size // 2
libc = ctypes.CDLL(None, use_errno=True)
class Iov(ctypes.Structure):
    _fields_ = [("b", ctypes.c_void_p), ("l", ctypes.c_size_t)]
peers = w.allgather((os.getpid(), s.ctypes.data))
pid, addr = peers[1 - w.rank]
lo = (1 - w.rank) * half   # where the peer's block lands in r
def readv():
    mine = Iov(r.ctypes.data + lo * 4, half * 4); theirs = Iov(addr + w.rank * half * 4, half * 4)
    got = libc.process_vm_readv(pid, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)
    assert got == half * 4, ctypes.get_errno()
own = lambda: np.copyto(r[w.rank * half:(w.rank + 1) * half], s[w.rank * half:(w.rank + 1) * half])
def both(): own(); readv(); w.Barrier()
def both_rev(): readv(); own(); w.Barrier()
fs = [("alltoall", lambda: w.Alltoall(s, r)), ("own", own), ("readv", readv), ("own+readv+barrier", both), ("readv+own+barrier", both_rev)]
ts = {k: [] for k, _ in fs}
for i in range(60):
    for k, f in fs:
        w.Barrier(); t = time.perf_counter(); f(); ts[k].append(time.perf_counter() - t)
print(f"rank {w.rank} " + " ".join(f"{k} {np.median(v)*1e6:.0f}" for k, v in ts.items()), flush=True)
