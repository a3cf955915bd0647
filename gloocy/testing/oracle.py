"""NumPy references for every collective, to check distributed code against.

Each function takes what every rank contributed, as a list indexed by rank,
and returns what every rank should receive (a list indexed by rank; None
where MPI leaves the buffer undefined, e.g. a non-root's receive buffer in
a gather, rank 0's in an exscan). Reductions fold in rank order,
``((x0 op x1) op x2) ...``, the order MPI names as canonical.

Whether a reduction result is bit-exact or only close depends on the
(dtype, op): ``exact(dtype, op)`` says which. Integer and boolean
reductions and MIN/MAX are exact in any order; floating-point SUM and PROD
depend on the order the library adds in, so ``assert_reduced`` accepts any
result within the bound that holds for every order of summation.
"""

from __future__ import annotations

import functools

import numpy as np

# op name -> the NumPy ufunc that defines its meaning
UFUNCS = {
    "SUM": np.add, "PROD": np.multiply, "MIN": np.minimum, "MAX": np.maximum,
    "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor,
    "LAND": np.logical_and, "LOR": np.logical_or, "LXOR": np.logical_xor,
}
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]
COMPLEX = ["complex64", "complex128"]
DTYPES = INTS + FLOATS + ["bool"]
ARITH = ["SUM", "PROD", "MIN", "MAX"]
BITS = ["BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR"]
OPS = ARITH + BITS


def ops_for(dtype):
    """The predefined ops defined on `dtype` (MPI's rules: bit and logical
    ops on integers and booleans, MIN/MAX not on complex numbers)."""
    kind = np.dtype(dtype).kind
    if kind in "iub":
        return list(OPS)
    if kind == "f":
        return list(ARITH)
    if kind == "c":
        return ["SUM", "PROD"]
    return []


def defined(dtype, op):
    return op in ops_for(dtype)


def _name(op):
    return op if isinstance(op, str) else getattr(op, "name", str(op)).replace("MPI_", "")


def apply(op, a, b):
    """a op b elementwise, in a's dtype (the logical ops give 0/1)."""
    return UFUNCS[_name(op)](a, b).astype(np.asarray(a).dtype)


def reduce(arrays, op):
    """The arrays of every rank reduced in rank order."""
    arrays = [np.asarray(a) for a in arrays]
    with np.errstate(all="ignore"):
        return functools.reduce(lambda a, b: apply(op, a, b), arrays[1:],
                                arrays[0].copy())


def exact(dtype, op):
    """True when every correct implementation gives the same bits whatever
    order it reduces in (integers, booleans, MIN and MAX -- up to the sign
    of a zero and which NaN); False for floating-point SUM and PROD."""
    return np.dtype(dtype).kind in "iub" or _name(op) in ("MIN", "MAX")


def assert_reduced(got, arrays, op):
    """Assert that `got` is `arrays` (one per rank) reduced by `op`: equal
    (NaN equal to NaN) when exact(), else within the error bound of any
    summation order -- (n-1)·eps·Σ|x| for SUM, (n-1)·eps·|result| for PROD
    -- where that bound is finite (where the ranks' values can overflow,
    the order decides between inf, nan and a finite number)."""
    got = np.asarray(got)
    arrays = [np.asarray(a) for a in arrays]
    want = reduce(arrays, op)
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"got {got.dtype}{list(got.shape)}, want "
                             f"{want.dtype}{list(want.shape)}")
    if exact(got.dtype, op):
        np.testing.assert_array_equal(got, want)
        return
    n = len(arrays)
    eps = np.finfo(got.dtype).eps
    with np.errstate(all="ignore"):
        if _name(op) == "SUM":
            scale = functools.reduce(np.add, [np.abs(a).astype(np.float64)
                                              for a in arrays])
        else:
            scale = np.abs(want).astype(np.float64)
        bound = (n - 1) * float(eps) * scale + float(np.finfo(got.dtype).tiny) * n
        decidable = np.isfinite(scale) & np.isfinite(want.astype(np.float64))
        if _name(op) == "PROD":           # an underflow anywhere loses everything
            decidable &= np.all([np.all(np.isfinite(a)) for a in arrays])
        err = np.abs(got.astype(np.float64) - want.astype(np.float64))
        bad = decidable & ~(err <= bound)
    if bad.any():
        i = np.flatnonzero(bad)[:5]
        raise AssertionError(
            f"{op} over {n} ranks differs from the rank-order reference by more "
            f"than any summation order allows at {i.tolist()}: got "
            f"{got.ravel()[i].tolist()}, want {want.ravel()[i].tolist()} "
            f"(bound {bound.ravel()[i].tolist()})")


# -- the collectives: what each rank receives ---------------------------------

def allreduce(arrays, op):
    r = reduce(arrays, op)
    return [r.copy() for _ in arrays]


def reduce_to(arrays, op, root):
    return [reduce(arrays, op) if r == root else None for r in range(len(arrays))]


def bcast(arrays, root):
    return [np.asarray(arrays[root]).copy() for _ in arrays]


def gather(arrays, root):
    whole = np.concatenate([np.ravel(a) for a in arrays])
    return [whole if r == root else None for r in range(len(arrays))]


gatherv = gather          # the counts are each rank's length


def allgather(arrays):
    whole = np.concatenate([np.ravel(a) for a in arrays])
    return [whole.copy() for _ in arrays]


allgatherv = allgather


def scatterv(sendbuf, counts, displs=None):
    """What each rank receives from a root sending `sendbuf` with these
    counts (and displacements; default: packed in rank order)."""
    sendbuf = np.ravel(sendbuf)
    displs = displacements(counts) if displs is None else displs
    return [sendbuf[d:d + c].copy() for c, d in zip(counts, displs)]


def scatter(sendbuf, size):
    sendbuf = np.ravel(sendbuf)
    if len(sendbuf) % size:
        raise ValueError(f"scatter: {len(sendbuf)} items do not split in {size}")
    return scatterv(sendbuf, [len(sendbuf) // size] * size)


def alltoallv(sendbufs, sendcounts, sdispls=None):
    """sendbufs[r], sendcounts[r][d], sdispls[r][d]: what rank r sends rank d.
    Rank d receives the pieces in source order, packed."""
    n = len(sendbufs)
    sdispls = sdispls or [displacements(c) for c in sendcounts]
    return [np.concatenate([np.ravel(sendbufs[s])[sdispls[s][d]:sdispls[s][d]
                                                  + sendcounts[s][d]]
                            for s in range(n)]) for d in range(n)]


def alltoall(sendbufs):
    n = len(sendbufs)
    counts = [[len(np.ravel(b)) // n] * n for b in sendbufs]
    return alltoallv(sendbufs, counts)


def reduce_scatter(arrays, counts, op):
    return scatterv(reduce(arrays, op), counts)


def reduce_scatter_block(arrays, op):
    return scatter(reduce(arrays, op), len(arrays))


def scan(arrays, op):
    return [reduce(arrays[:r + 1], op) for r in range(len(arrays))]


def exscan(arrays, op):
    return [None] + [reduce(arrays[:r], op) for r in range(1, len(arrays))]


def displacements(counts):
    """Packed displacements: the running sum of counts, from 0."""
    return [int(x) for x in np.concatenate([[0], np.cumsum(counts)[:-1]])] if len(counts) else []
