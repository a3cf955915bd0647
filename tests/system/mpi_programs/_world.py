"""How every program here begins: MPI from gloocy when USE_GLOOCY is set
(the drop-in runs) and from mpi4py otherwise, the world communicator, this
rank and the size, and `say`, which prints one line tagged with the rank."""
import os
import sys

if os.environ.get("USE_GLOOCY"):
    from gloocy import MPI
else:
    from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def say(*words):
    # one write per line: PYTHONUNBUFFERED may be set, and print() would then
    # issue several writes that interleave with other ranks' lines
    sys.stdout.write(" ".join([f"[{rank}]", *map(str, words)]) + "\n")
    sys.stdout.flush()
