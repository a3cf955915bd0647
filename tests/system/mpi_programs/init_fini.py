"""MPI initialized by the program, not at import (mpi4py's rc.initialize
False, here through MPI4PY_RC_INITIALIZE, which both read at import)."""
import os
import sys

os.environ["MPI4PY_RC_INITIALIZE"] = "false"
if os.environ.get("USE_GLOOCY"):
    from gloocy import MPI
else:
    from mpi4py import MPI

before = (MPI.Is_initialized(), MPI.Is_finalized())
level = MPI.Init_thread(MPI.THREAD_MULTIPLE)
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def say(*words):
    # one write per line (see _world.py)
    sys.stdout.write(" ".join([f"[{rank}]", *map(str, words)]) + "\n")
    sys.stdout.flush()


say("before Init_thread: initialized, finalized", *before)
say("Init_thread gives Query_thread", level == MPI.Query_thread())
say("after: initialized, finalized", MPI.Is_initialized(), MPI.Is_finalized())
say("world", size, "allreduce", comm.allreduce(rank + 1))
say("COMM_SELF", MPI.COMM_SELF.Get_size(), MPI.COMM_SELF.Get_rank())
try:
    MPI.Init()
    say("Init again: no error")
except MPI.Exception as e:
    say("Init again:", e.Get_error_class() == MPI.ERR_OTHER)
comm.Barrier()
MPI.Finalize()
say("after Finalize: initialized, finalized", MPI.Is_initialized(),
    MPI.Is_finalized())
