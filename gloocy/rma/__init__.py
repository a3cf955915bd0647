"""One-sided communication: mpi4py's ``MPI.Win`` (windows of memory that
other ranks Put into, Get from and Accumulate into), over gloocy's
point-to-point messages.

* ``window``: the Win handle, mpi4py's methods;
* ``core``: a window at one process: epochs, locks as an origin, the
  round trips;
* ``agent``: the thread of each process that serves the other ranks'
  requests (passive target progress) and the wire;
* ``regions``: what the operations do to the local memory, atomically;
* ``locks``: the passive-target lock queue at a target;
* ``spec``: origin and target specifications, parsed as mpi4py does;
* ``shared``: the shared-memory segment of Allocate_shared;
* ``constants``: WIN_*, LOCK_*, MODE_* (MPICH's numbers).
"""

from gloocy.rma.constants import *  # noqa: F401,F403


def __getattr__(name):
    # Win and WIN_NULL load the windows' machinery on first use: gloocy.MPI
    # imports the constants at start-up, and most programs use no window.
    if name in ("Win", "WIN_NULL"):
        from gloocy.rma import window
        return getattr(window, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
