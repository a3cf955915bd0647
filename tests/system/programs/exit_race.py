"""Leave the job right after finishing its calls, while derived
communicators are still alive: a peer still finishing the same calls must
not see an error (tests/system/test_exit.py runs it many times).

    gloocy-run -n 4 python exit_race.py VARIANT [mix]

VARIANT: split (README's example), dup, create_group, ibcast (one waited,
one still in flight at exit), persistent, finalize (MPI.Finalize() at the
end). "mix" puts even and odd ranks on two pretend hosts (TCP between them,
shared memory within). Each rank prints one line the test checks.
"""

import os
import sys

variant = sys.argv[1]
if sys.argv[2:] == ["mix"]:
    os.environ["GLOOCY_HOST_ID"] = f"pretend-host-{int(os.environ['GLOOCY_RANK']) % 2}"

import numpy as np                      # noqa: E402
from gloocy import MPI                  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
hello = "hi" if rank == 0 else None

if variant in ("split", "finalize"):
    sub = comm.Split(color=rank % 2, key=rank)
    mine = sub.allreduce([rank] * 4, op=MPI.SUM)
elif variant == "dup":
    sub = comm.Dup()
    mine = sub.allreduce(rank, op=MPI.SUM)
elif variant == "create_group":
    sub = comm.Create_group(comm.Get_group().Incl(range(0, size, 2))) if rank % 2 == 0 \
        else MPI.COMM_NULL
    mine = sub.allreduce(rank) if sub != MPI.COMM_NULL else None
elif variant == "ibcast":
    x = np.arange(4.0) if rank == 0 else np.zeros(4)
    req = comm.Ibcast(x, root=0)
    mine = comm.Split(color=rank % 2, key=rank).allreduce(rank)
    req.Wait()
    mine = (mine, x.tolist())
    late = np.full(8, float(rank))
    comm.Ibcast(late, root=size - 1)     # never waited: still in flight at exit
elif variant == "persistent":
    buf = np.zeros(2)
    send = comm.Send_init(np.full(2, float(rank)), dest=(rank + 1) % size, tag=7)
    recv = comm.Recv_init(buf, source=(rank - 1) % size, tag=7)
    MPI.Prequest.Startall([recv, send])
    MPI.Request.Waitall([recv, send])
    mine = buf.tolist()
else:
    raise SystemExit(f"unknown variant {variant!r}")

print(rank, repr(mine), comm.bcast(hello), flush=True)
if variant == "finalize":
    MPI.Finalize()
