"""The per-call cost of the Python face: shorthand for `gloocy-bench --overhead`.

    python bench/overhead.py [--calls 20000] [--rounds 5] [--out DIR] [--quiet]

gloocy.MPI against mpi4py on MPICH, the same calls in a world of one
(see bench/README.md).
"""

import sys

from gloocy.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--overhead", *sys.argv[1:]]))
