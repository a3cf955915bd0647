"""What each collective moves, how its result is checked, how it is counted.

``bytes`` and bus bandwidth follow nccl-tests (doc/PERFORMANCE.md):

- allreduce, bcast: the per-rank buffer; busbw = algbw x 2(n-1)/n resp. x 1;
- allgather: the gathered total (n x what each rank sends); x (n-1)/n;
- reduce_scatter: each rank's input (n x what it receives); x (n-1)/n;
- alltoall: each rank's send buffer; x (n-1)/n;
- barrier: no bytes, latency only.

Data are float32 (SUM for reductions); per-rank blocks are whole numbers of
elements, at least one, so a requested size may be rounded (``bytes`` is
then what really moved and ``size`` the requested sweep point).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = ["COLLECTIVES", "ALIASES", "BYTES_MEANING", "Case", "make_case",
           "busbw_factor", "case_bytes", "canonical"]

COLLECTIVES = ("allreduce", "bcast", "allgather", "reduce_scatter",
               "alltoall", "barrier")

ALIASES = {"broadcast": "bcast", "reduce-scatter": "reduce_scatter",
           "reducescatter": "reduce_scatter", "all-reduce": "allreduce",
           "all-gather": "allgather", "all-to-all": "alltoall"}

BYTES_MEANING = {
    "allreduce": "per-rank buffer (float32, SUM, in place)",
    "bcast": "buffer (float32, root 0)",
    "allgather": "gathered total = n × each rank's block (float32)",
    "reduce_scatter": "each rank's input = n × its output block (float32, SUM)",
    "alltoall": "each rank's send buffer = n blocks (float32)",
    "barrier": "none (latency only)",
}

BUSBW_FORMULA = {
    "allreduce": "2(n-1)/n × bytes / latency",
    "bcast": "bytes / latency",
    "allgather": "(n-1)/n × bytes / latency",
    "reduce_scatter": "(n-1)/n × bytes / latency",
    "alltoall": "(n-1)/n × bytes / latency",
}

DTYPE = np.float32
ITEM = 4


def canonical(name: str) -> str:
    """The collective's name as used here (accepts a few spellings)."""
    name = name.strip().lower()
    name = ALIASES.get(name, name)
    if name not in COLLECTIVES:
        raise ValueError(f"unknown collective {name!r} "
                         f"(choose from {', '.join(COLLECTIVES)})")
    return name


def busbw_factor(collective: str, n: int) -> float | None:
    """Bus bandwidth / algorithm bandwidth, as nccl-tests defines it."""
    if collective == "barrier":
        return None
    if collective == "allreduce":
        return 2 * (n - 1) / n
    if collective == "bcast":
        return 1.0
    return (n - 1) / n


def case_bytes(collective: str, size: int, n: int) -> int:
    """What a requested size becomes (whole float32 per rank's block)."""
    if collective == "barrier":
        return 0
    if collective in ("allreduce", "bcast"):
        return max(1, size // ITEM) * ITEM
    return max(1, size // (ITEM * n)) * ITEM * n


@dataclass
class Case:
    """One (collective, size) on one rank: the call's arguments and checks."""

    collective: str
    size: int                                   # requested sweep point
    nbytes: int                                 # bytes as nccl-tests counts them
    arrays: tuple[np.ndarray, ...]              # the call's arguments, in order
    check: Callable[[], bool]                   # after the first call
    reset: Callable[[], None] = field(default=lambda: None)  # keeps repeats finite


def _blocks(values: np.ndarray, block: int) -> np.ndarray:
    return np.repeat(values.astype(DTYPE), block)


def make_case(collective: str, size: int, n: int, rank: int) -> Case:
    """Buffers filled so that the first call's result has a closed form."""
    count = max(1, size // ITEM)                # elements of a whole buffer
    block = max(1, size // (ITEM * n))          # elements of one rank's block

    if collective == "barrier":
        return Case(collective, 0, 0, (), lambda: True)

    if collective == "allreduce":               # sum of rank+1 = n(n+1)/2
        buf = np.full(count, rank + 1, DTYPE)
        return Case(collective, size, count * ITEM, (buf,),
                    lambda: bool((buf == n * (n + 1) // 2).all()),
                    lambda: buf.fill(0))         # 0 + 0 stays 0, in place

    if collective == "bcast":                   # root's pattern everywhere
        want = (np.arange(count) % 251 + 1).astype(DTYPE)
        buf = want.copy() if rank == 0 else np.zeros(count, DTYPE)
        return Case(collective, size, count * ITEM, (buf,),
                    lambda: bool(np.array_equal(buf, want)))

    if collective == "allgather":               # block k holds k+1
        send = np.full(block, rank + 1, DTYPE)
        recv = np.zeros(block * n, DTYPE)
        want = _blocks(np.arange(1, n + 1), block)
        return Case(collective, size, recv.nbytes, (send, recv),
                    lambda: bool(np.array_equal(recv, want)))

    if collective == "reduce_scatter":          # block j of rank r holds r+1+j
        send = _blocks(rank + 1 + np.arange(n), block)
        recv = np.zeros(block, DTYPE)
        total = n * (n + 1) // 2 + n * rank     # sum over r of r+1+rank
        return Case(collective, size, send.nbytes, (send, recv),
                    lambda: bool((recv == total).all()))

    if collective == "alltoall":                # block j of rank r holds r*n+j
        send = _blocks(rank * n + np.arange(n), block)
        recv = np.zeros(block * n, DTYPE)
        want = _blocks(np.arange(n) * n + rank, block)
        return Case(collective, size, send.nbytes, (send, recv),
                    lambda: bool(np.array_equal(recv, want)))

    raise ValueError(f"unknown collective {collective!r}")
