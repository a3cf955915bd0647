"""Allreduce only: shorthand for `gloocy-bench --collective allreduce`.

    python bench/allreduce.py [-n 2 4] [--impl gloocy torch-gloo mpi4py]
                              [--sizes 4,1K,1M] [--rounds 3] [--out DIR]

Every other option of gloocy-bench passes through (see bench/README.md).
"""

import sys

from gloocy.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["--collective", "allreduce", *sys.argv[1:]]))
