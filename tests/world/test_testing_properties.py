"""gloocy's collectives property-tested with gloocy.testing: hypothesis
strategies, thread worlds of 1-5 ranks, and gloocy.testing.oracle's NumPy
references (whose own closed-form checks are in tests/unit/test_testing_oracle.py)."""

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gloocy
from gloocy import MPI
from gloocy.testing import oracle, strategies as gst

PROPERTY = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


def allreduce(comm, arrays, op):
    x = arrays[comm.rank].copy()
    comm.Allreduce(gloocy.IN_PLACE, x, op=getattr(MPI, op))
    return x


@PROPERTY
@given(gst.world_sizes(1, 5), gst.dtype_op_pairs(), st.data())
def test_allreduce_matches_the_oracle(world, size, dtype_op, data):
    dtype, op = dtype_op
    arrays = data.draw(gst.rank_arrays(size, dtype))
    for got in world(size, backend="threads").run(allreduce, arrays, op):
        oracle.assert_reduced(got, arrays, op)


def allgatherv(comm, arrays, counts, displs, extent):
    recv = np.zeros(extent, dtype=arrays[0].dtype)
    comm.Allgatherv(arrays[comm.rank], [recv, (counts, displs), MPI._typedict[recv.dtype.char]])
    return recv


@PROPERTY
@given(gst.world_sizes(1, 5), gst.dtypes(oracle.INTS), st.data())
def test_allgatherv_with_gaps_and_any_order(world, size, dtype, data):
    counts, displs, extent = data.draw(gst.counts_and_displs(size))
    arrays = [data.draw(gst.arrays(dtype, c)) for c in counts]
    want = oracle.allgatherv(arrays)[0]
    for got in world(size, backend="threads").run(allgatherv, arrays, counts, displs, extent):
        placed = np.concatenate([got[d:d + c] for c, d in zip(counts, displs)])
        np.testing.assert_array_equal(placed, want)


def bcast_obj(comm, obj, root):
    return comm.bcast(obj if comm.rank == root else None, root=root)


@PROPERTY
@given(gst.world_sizes(1, 5), st.data())
def test_bcast_of_picklable_objects(world, size, data):
    obj = data.draw(gst.picklable_objects())
    root = data.draw(gst.roots(size))
    got = world(size, backend="threads").run(bcast_obj, obj, root)
    assert all(pickle.dumps(g) == pickle.dumps(obj) for g in got)


def bcast_spec(comm, array, form, root):
    buf = array.copy() if comm.rank == root else np.zeros_like(array)
    spec = {"plain": buf, "typed": [buf, MPI._typedict[buf.dtype.char]],
            "counted": [buf, buf.size, MPI._typedict[buf.dtype.char]],
            "pair": (buf, buf.size)}[form]
    comm.Bcast(spec, root=root)
    return buf


@PROPERTY
@given(gst.world_sizes(1, 4), gst.dtypes(), st.sampled_from(["plain", "typed", "counted", "pair"]),
       st.data())
def test_bcast_buffer_spec_forms(world, size, dtype, form, data):
    array = data.draw(gst.arrays(dtype, st.integers(1, 8)))
    root = data.draw(gst.roots(size))
    for got in world(size, backend="threads").run(bcast_spec, array, form, root):
        np.testing.assert_array_equal(got.view(np.uint8), array.view(np.uint8))


def bcast_derived(comm, recipe, data):
    dtype = recipe.build(MPI.DOUBLE)
    try:
        buf = data.copy() if comm.rank == 0 else np.full_like(data, -1.0)
        comm.Bcast([buf, 1, dtype], root=0)
        return buf
    finally:
        dtype.Free()


@PROPERTY
@given(gst.world_sizes(2, 4), gst.derived_datatypes())
def test_bcast_of_derived_datatypes(world, size, recipe):
    data = np.arange(recipe.extent, dtype=np.float64) + 1
    for rank, got in enumerate(world(size, backend="threads").run(bcast_derived, recipe, data)):
        np.testing.assert_array_equal(recipe.select(got), recipe.select(data))
        untouched = np.setdiff1d(np.arange(recipe.extent), recipe.indices)
        if rank:
            assert (got[untouched] == -1).all()


@pytest.mark.world(sizes=[1, 2, 3, 5])
def test_the_marker_runs_every_rank(comm):
    x = np.full(4, comm.rank + 1, dtype=np.int64)
    comm.Allreduce(gloocy.IN_PLACE, x)
    assert (x == comm.size * (comm.size + 1) // 2).all()
