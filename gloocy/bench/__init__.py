"""gloocy-bench: gloocy's collectives side by side with torch.distributed
(gloo) and mpi4py on MPICH.

    gloocy-bench -n 2 4 --impl gloocy torch-gloo mpi4py \\
                 --collective allreduce bcast barrier --rounds 3 --out DIR

Modules, one job each:

- ``collectives``: per collective, the buffers, the closed-form check and
  the nccl-tests definitions of ``bytes`` and bus bandwidth;
- ``impls``: one adapter per implementation (same methods for all);
- ``worker``: the per-rank timing loop, implementation-agnostic;
- ``runner``: launching one job per (implementation, world size, round),
  interleaved;
- ``report``: markdown tables and PNG plots;
- ``__main__``: the command line.

The peers (torch, mpi4py, mpich, tqdm, matplotlib) are optional:
``pip install ".[bench]"`` after torch's CPU build (README: gloocy-bench).
"""

from gloocy.bench.collectives import COLLECTIVES

__all__ = ["COLLECTIVES"]
