"""Standard input reaches rank 0; rank 0 reads lines and broadcasts them."""
import os
import sys
if os.environ.get("USE_GLOOCY"):
    from gloocy import MPI
else:
    from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def say(*words):
    # one write per line (see cco_buf.py)
    sys.stdout.write(" ".join([f"[{rank}]", *map(str, words)]) + "\n")
    sys.stdout.flush()


first = sys.stdin.readline() if rank == 0 else None
first = comm.bcast(first, root=0)
say("first line", repr(first))
# the rest of the input, up to end of file
rest = sys.stdin.read() if rank == 0 else None
rest = comm.bcast(rest, root=0)
say("rest", len(rest.splitlines()), repr(rest.splitlines()[-1:]))
