"""gloocy.testing.strategies: every kind the strategies promise can come up,
and what they draw is what they say. The oracles: NumPy's own view of the
values (isnan, signbit, iinfo), the layout checked block by block, a
transfer through gloocy in a world of one, pickle."""

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings, strategies as st

import gloocy
from gloocy import MPI
from gloocy.testing import oracle, strategies as gst

PROPERTY = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
FIND = settings(max_examples=2000, database=None)


def finds(strategy, condition):
    """Whether some example of `strategy` meets `condition`."""
    return find(strategy, condition, settings=FIND) is not None


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_float_arrays_bring_every_edge_value(dtype):
    arrays = gst.arrays(dtype, 4)
    f = np.finfo(dtype)
    assert finds(arrays, lambda a: np.isnan(a).any())
    assert finds(arrays, lambda a: (a == np.inf).any())
    assert finds(arrays, lambda a: (a == -np.inf).any())
    assert finds(arrays, lambda a: ((a == 0) & np.signbit(a)).any())     # -0.0
    assert finds(arrays, lambda a: (a == f.max).any())
    assert finds(arrays, lambda a: (a == f.smallest_subnormal).any())


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint32"])
def test_integer_arrays_bring_both_extremes(dtype):
    info = np.iinfo(dtype)
    assert finds(gst.arrays(dtype, 4), lambda a: (a == info.min).any())
    assert finds(gst.arrays(dtype, 4), lambda a: (a == info.max).any())


@PROPERTY
@given(gst.arrays("float64", st.integers(0, 8), finite=True),
       gst.arrays("float32", st.integers(0, 8), max_abs=10.0))
def test_finite_and_bounded_arrays_keep_their_promise(a, b):
    assert np.isfinite(a).all() and a.dtype == np.float64
    assert np.isfinite(b).all() and (np.abs(b) <= 10).all()


@PROPERTY
@given(gst.dtype_op_pairs())
def test_dtype_op_pairs_are_defined_by_mpi_rules(pair):
    dtype, op = pair
    kind = np.dtype(dtype).kind
    if kind == "f":
        assert op in ("SUM", "PROD", "MIN", "MAX")
    else:
        assert kind in "iub"


@PROPERTY
@given(gst.world_sizes(1, 6).flatmap(
    lambda n: st.tuples(st.just(n), gst.counts_and_displs(n))))
def test_counts_and_displs_lay_out_disjoint_blocks(drawn):
    size, (counts, displs, extent) = drawn
    assert len(counts) == len(displs) == size
    used = np.zeros(extent, dtype=int)
    for c, d in zip(counts, displs):
        assert c >= 0 and d >= 0 and d + c <= extent
        used[d:d + c] += 1
    assert (used <= 1).all()                  # no two blocks overlap


@PROPERTY
@given(gst.world_sizes(1, 8).flatmap(lambda n: st.tuples(st.just(n), gst.roots(n))))
def test_roots_are_ranks(drawn):
    size, root = drawn
    assert 0 <= root < size


@PROPERTY
@given(gst.world_sizes(1, 4).flatmap(
    lambda n: st.tuples(st.just(n), gst.rank_arrays(n, "int16"))))
def test_rank_arrays_are_one_per_rank_of_one_length(drawn):
    size, arrays = drawn
    assert len(arrays) == size and len({a.shape for a in arrays}) == 1


@pytest.fixture(scope="module")
def comm():
    c = gloocy.connect(0, 1, None)
    yield c
    c.Free()


@PROPERTY
@given(gst.dtypes(), st.data())
def test_buffer_specs_carry_the_array_through_gloocy(comm, dtype, data):
    """Every form, as the send and as the receive side of a transfer to
    ourselves: what arrives is the array."""
    sent = data.draw(gst.arrays(dtype, st.integers(1, 8)))
    got = np.zeros_like(sent)
    comm.Sendrecv(data.draw(gst.buffer_specs(sent)), dest=0,
                  recvbuf=data.draw(gst.buffer_specs(got)), source=0)
    np.testing.assert_array_equal(got.view(np.uint8), sent.view(np.uint8))


def test_buffer_specs_come_in_mpi4pys_five_forms():
    a = np.arange(3, dtype=np.int32)
    specs = gst.buffer_specs(a)
    assert finds(specs, lambda s: s is a)                                 # buf
    assert finds(specs, lambda s: isinstance(s, list) and len(s) == 2)    # [buf, type]
    assert finds(specs, lambda s: isinstance(s, list) and len(s) == 3
                 and s[1] == 3)                                           # [buf, count, type]
    assert finds(specs, lambda s: isinstance(s, list) and len(s) == 3
                 and s[1] == (3, 0))                                      # [buf, (count, displ), type]
    assert finds(specs, lambda s: isinstance(s, tuple) and s[1] == 3)     # (buf, count)


@PROPERTY
@given(gst.derived_datatypes())
def test_derived_datatypes_cover_their_indices(recipe):
    t = recipe.build(MPI.INT64_T)
    try:
        assert t.Get_size() == 8 * len(recipe.indices)
        lb, extent = t.Get_extent()         # `extent`: the span from the start
        assert lb == 8 * min(recipe.indices) and lb + extent == 8 * recipe.extent
    finally:
        t.Free()
    assert len(set(recipe.indices)) == len(recipe.indices)
    assert max(recipe.indices) < recipe.extent


@PROPERTY
@given(gst.picklable_objects())
def test_picklable_objects_pickle_and_compare_equal(obj):
    assert pickle.loads(pickle.dumps(obj)) == obj
