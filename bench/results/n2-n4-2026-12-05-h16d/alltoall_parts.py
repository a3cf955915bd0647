"""The parts of a node alltoall at N = 2, timed alone in one job (median of
150, a barrier before each): the Alltoall, a copy of the own block (half
the buffer) and one process_vm_readv of the block the peer sends us.

    GLOOCY_TRANSPORT=shm python -m gloocy.run -n 2 python alltoall_parts.py [BYTES]
"""
import os, sys, time, ctypes, numpy as np
import gloocy
w = gloocy.init()
nb = int(sys.argv[1]) if len(sys.argv) > 1 else 4 << 20
s = np.ones(nb // 4, np.float32); r = np.empty_like(s)
half = s.size // 2
libc = ctypes.CDLL(None, use_errno=True)
class Iov(ctypes.Structure):
    _fields_ = [("b", ctypes.c_void_p), ("l", ctypes.c_size_t)]
peers = w.allgather((os.getpid(), s.ctypes.data))
pid, addr = peers[1 - w.rank]
def readv():
    mine = Iov(r.ctypes.data, half * 4); theirs = Iov(addr + (w.rank) * half * 4, half * 4)
    got = libc.process_vm_readv(pid, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)
    assert got == half * 4, ctypes.get_errno()
def cpu():
    return int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[36])
res = {}
for name, f in [("alltoall", lambda: w.Alltoall(s, r)), ("own copy", lambda: np.copyto(r[half:], s[half:])),
                ("readv", readv), ("alltoall2", lambda: w.Alltoall(s, r))]:
    ts = []
    for i in range(150):
        w.Barrier()
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    res[name] = np.median(ts) * 1e6
print(f"rank {w.rank} cpu {cpu()} " + " ".join(f"{k} {v:.0f}" for k, v in res.items()), flush=True)
