"""Hypothesis strategies for testing distributed code.

    from hypothesis import given
    from gloocy.testing import strategies as gst

    @given(gst.world_sizes(1, 8), gst.dtype_op_pairs(), st.data())
    def test_allreduce(size, dtype_op, data):
        dtype, op = dtype_op
        arrays = data.draw(gst.rank_arrays(size, dtype))
        ...

Everything shrinks towards small worlds, short arrays, zeros and rank 0,
so a failing example is reported at its smallest. Edge values (NaN, ±inf,
-0.0, the smallest subnormal, integer extremes) are drawn often.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from . import oracle

__all__ = ["world_sizes", "per_rank", "dtypes", "dtype_op_pairs", "edge_values", "arrays",
           "rank_arrays", "counts", "counts_and_displs", "roots",
           "buffer_specs", "derived_datatypes", "DerivedType",
           "picklable_objects"]


def world_sizes(min_size=1, max_size=8):
    """World sizes (shrink to `min_size`)."""
    return st.integers(min_size, max_size)


def dtypes(names=oracle.DTYPES):
    """NumPy dtype names that gloocy reduces (shrink to the first)."""
    return st.sampled_from(list(names))


def dtype_op_pairs(names=oracle.DTYPES, ops=oracle.OPS):
    """(dtype name, op name) pairs for which the op is defined."""
    return st.sampled_from([(d, o) for d in names for o in ops
                            if oracle.defined(d, o)])


def edge_values(dtype):
    """The values of `dtype` that break arithmetic: extremes, zeros of both
    signs, NaN, infinities, the smallest subnormal."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return [False, True]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return sorted({0, 1, info.max, info.min, info.max - 1,
                       -1 if dtype.kind == "i" else 2})
    if dtype.kind in "fc":
        f = np.finfo(dtype)
        real = [0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, float(f.max),
                float(f.min), float(f.tiny), float(f.smallest_subnormal)]
        if dtype.kind == "c":
            return [complex(a, b) for a in real[:4] for b in (0.0, -0.0)] + \
                   [complex(v, 0.0) for v in real[4:]]
        return real
    raise ValueError(f"dtype: no edge values for {dtype}")


def _elements(dtype, edge, finite, max_abs):
    dtype = np.dtype(dtype)
    kw = {}
    if dtype.kind == "f" and (finite or max_abs is not None):
        kw = dict(allow_nan=False, allow_infinity=False)
    if max_abs is not None and dtype.kind in "iuf":
        kw.update(min_value=-max_abs if dtype.kind != "u" else 0, max_value=max_abs)
    values = hnp.from_dtype(dtype, **kw)
    if not edge:
        return values
    edges = [v for v in edge_values(dtype)
             if (not (finite or max_abs is not None)
                 or np.isfinite(np.asarray(v, dtype=dtype)))
             and (max_abs is None or abs(v) <= max_abs)]
    return st.one_of(values, st.sampled_from(edges))


def arrays(dtype, length=st.integers(0, 16), *, edge=True, finite=False,
           max_abs=None):
    """1-d arrays of `dtype` (length an int or a strategy), edge values mixed
    in when `edge`; `finite` leaves NaN and infinities out; `max_abs` bounds
    the magnitudes (finite too)."""
    if isinstance(length, int):
        length = st.just(length)
    return length.flatmap(lambda n: hnp.arrays(
        np.dtype(dtype), n, elements=_elements(dtype, edge, finite, max_abs)))


def rank_arrays(size, dtype, length=st.integers(0, 16), **kw):
    """One array per rank, all of one length (what a reduction takes)."""
    if isinstance(length, int):
        length = st.just(length)
    return length.flatmap(lambda n: st.lists(arrays(dtype, n, **kw),
                                             min_size=size, max_size=size))


def per_rank(values, min_size=1, max_size=8):
    """A list of one value of `values` per rank, for a world of
    ``len(list)`` ranks: the world size is drawn with the data, and a failing
    example shrinks by dropping ranks (better than drawing the size first,
    which a shrinker cannot lower without redrawing every rank's data)."""
    return st.lists(values, min_size=min_size, max_size=max_size)


def counts(size, max_count=8):
    """Per-rank counts of a v-collective (zeros included)."""
    return st.lists(st.integers(0, max_count), min_size=size, max_size=size)


@st.composite
def counts_and_displs(draw, size, max_count=8, *, gaps=True, reorder=True):
    """(counts, displs, extent) for a v-collective's buffer: the ranks'
    blocks do not overlap, may have gaps between them (`gaps`) and may lie
    out of rank order (`reorder`); `extent` is the buffer length needed."""
    cs = draw(counts(size, max_count))
    order = list(range(size))
    if reorder:
        order = draw(st.permutations(order))
    displs, pos = [0] * size, 0
    for r in order:
        pos += draw(st.integers(0, 3)) if gaps else 0
        displs[r] = pos
        pos += cs[r]
    return cs, displs, pos


def roots(size):
    """A root rank of a world of `size` (shrinks to 0)."""
    return st.integers(0, size - 1)


def buffer_specs(array):
    """The forms mpi4py accepts for a whole-array message: ``buf``,
    ``[buf, type]``, ``[buf, count, type]``, ``[buf, (count, displ), type]``
    and ``(buf, count)``; the types are gloocy.MPI's predefined ones."""
    from gloocy import MPI
    mpitype = MPI._typedict[np.asarray(array).dtype.char]
    n = np.asarray(array).size
    return st.sampled_from([array, [array, mpitype], [array, n, mpitype],
                            [array, (n, 0), mpitype], (array, n)])


class DerivedType(NamedTuple):
    """A derived datatype's recipe: `kind` ("contiguous", "vector",
    "indexed"), its arguments, and `indices`, the elements of the base type
    (from the start of the buffer) that one item covers, in order: the
    oracle of what it sends. ``extent`` is one item's span in elements."""
    kind: str
    args: tuple
    indices: tuple
    extent: int

    def build(self, base):
        """The committed datatype over `base` (a gloocy.MPI Datatype)."""
        make = {"contiguous": base.Create_contiguous,
                "vector": base.Create_vector,
                "indexed": base.Create_indexed}[self.kind]
        return make(*self.args).Commit()

    def select(self, array, count=1):
        """The elements `count` items of this type take from `array`."""
        idx = [i + k * self.extent for k in range(count) for i in self.indices]
        return np.asarray(array)[idx]


@st.composite
def derived_datatypes(draw, max_elements=12):
    """DerivedType recipes: contiguous, vector (strided) and indexed."""
    kind = draw(st.sampled_from(["contiguous", "vector", "indexed"]))
    if kind == "contiguous":
        n = draw(st.integers(1, max_elements))
        return DerivedType(kind, (n,), tuple(range(n)), n)
    if kind == "vector":
        count = draw(st.integers(1, 4))
        block = draw(st.integers(1, 3))
        stride = draw(st.integers(block, block + 3))
        idx = tuple(c * stride + b for c in range(count) for b in range(block))
        return DerivedType(kind, (count, block, stride), idx,
                           (count - 1) * stride + block)
    blocks = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    displs, pos = [], 0
    for b in blocks:
        pos += draw(st.integers(0, 2))
        displs.append(pos)
        pos += b
    idx = tuple(d + i for d, b in zip(displs, blocks) for i in range(b))
    return DerivedType(kind, (blocks, displs), idx, pos)


def picklable_objects(max_leaves=10):
    """Objects the lower-case methods send by pickle: None, bools, ints of
    any size, finite floats, strings, bytes, and lists, tuples and dicts of
    them (NaN is left out: it is not equal to itself)."""
    leaves = st.one_of(st.none(), st.booleans(), st.integers(),
                       st.floats(allow_nan=False), st.text(max_size=8),
                       st.binary(max_size=8))
    return st.recursive(leaves, lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.tuples(kids, kids),
        st.dictionaries(st.text(max_size=4), kids, max_size=4)),
        max_leaves=max_leaves)
