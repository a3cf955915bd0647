"""mpi4py's utility modules, on gloocy.MPI:

* ``pkl5``: communicators whose lower-case methods move large pickles
  (gloocy's own already do: 64-bit lengths, protocol 5, large buffers out
  of band), with ``Request`` and ``Message``;
* ``dtlib``: NumPy dtypes <-> Datatypes;
* ``sync``: ``Sequential``, ``Counter``, ``Mutex``, ``Condition`` and
  ``Semaphore``, on one-sided windows (MPI.Win).
"""

__all__ = ["pkl5", "dtlib", "sync"]
