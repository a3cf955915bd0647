"""Standard input reaches rank 0; rank 0 reads lines and broadcasts them."""
import sys

from _world import comm, rank, say


first = sys.stdin.readline() if rank == 0 else None
first = comm.bcast(first, root=0)
say("first line", repr(first))
# the rest of the input, up to end of file
rest = sys.stdin.read() if rank == 0 else None
rest = comm.bcast(rest, root=0)
say("rest", len(rest.splitlines()), repr(rest.splitlines()[-1:]))
