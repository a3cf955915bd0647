import sys, time
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
size = int(sys.argv[1]) if len(sys.argv) > 1 else 4<<20
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 100
s = np.ones(size//4, np.float32); d = np.empty(size//4, np.float32)
for _ in range(5): c.Alltoall(s, d)
c.Barrier()
t = time.perf_counter()
for _ in range(iters): c.Alltoall(s, d)
t = time.perf_counter() - t
if c.rank == 0: print(size, "us/call", t/iters*1e6)
