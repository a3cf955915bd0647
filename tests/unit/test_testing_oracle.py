"""gloocy.testing.oracle against closed forms and hand-worked cases."""

import numpy as np
import pytest

from gloocy.testing import oracle


def test_reduce_is_in_rank_order_and_keeps_the_dtype():
    a = [np.array([1, 250], np.uint8), np.array([2, 10], np.uint8)]
    np.testing.assert_array_equal(oracle.reduce(a, "SUM"), [3, 4])      # wraps
    assert oracle.reduce(a, "SUM").dtype == np.uint8
    np.testing.assert_array_equal(oracle.reduce(a, "LAND"), [1, 1])
    # float order: (1e16 + 1) - 1e16 = 0 in rank order
    f = [np.array([1e16]), np.array([1.0]), np.array([-1e16])]
    assert oracle.reduce(f, "SUM")[0] == 0.0


def test_exact_says_which_results_depend_on_the_order():
    assert oracle.exact("int32", "SUM") and oracle.exact("float64", "MAX")
    assert not oracle.exact("float32", "SUM") and not oracle.exact("float64", "PROD")


def test_assert_reduced_accepts_any_summation_order_only():
    f = [np.array([1e16]), np.array([1.0]), np.array([-1e16])]
    oracle.assert_reduced(np.array([2.0]), f, "SUM")      # (1e16 - 1e16) + 1 ... within bound
    with pytest.raises(AssertionError):
        oracle.assert_reduced(np.array([1e6]), f, "SUM")
    with pytest.raises(AssertionError):
        oracle.assert_reduced(np.array([1, 2], np.int8),
                              [np.array([1, 1], np.int8)] * 2, "SUM")


@pytest.mark.parametrize("n", [1, 2, 5])
def test_collectives_closed_forms(n):
    arrays = [np.arange(3 * n) + 100 * r for r in range(n)]
    total = sum(arrays)
    for got in oracle.allreduce(arrays, "SUM"):
        np.testing.assert_array_equal(got, total)
    scan = oracle.scan(arrays, "SUM")
    np.testing.assert_array_equal(scan[-1], total)
    assert oracle.exscan(arrays, "SUM")[0] is None
    a2a = oracle.alltoall(arrays)
    for d in range(n):     # rank d gets block d of every rank, in source order
        np.testing.assert_array_equal(a2a[d], np.concatenate(
            [arrays[s][3 * d:3 * d + 3] for s in range(n)]))
    rs = oracle.reduce_scatter_block(arrays, "SUM")
    np.testing.assert_array_equal(np.concatenate(rs), total)
    g = oracle.gather(arrays, n - 1)
    assert g[0] is None if n > 1 else True
    assert len(g[n - 1]) == 3 * n * n
    assert oracle.displacements([2, 0, 3]) == [0, 2, 2]
    assert [len(p) for p in oracle.scatterv(np.arange(5), [2, 0, 3])] == [2, 0, 3]


def test_ops_for_follows_mpi():
    assert oracle.ops_for("float32") == ["SUM", "PROD", "MIN", "MAX"]
    assert oracle.ops_for("complex64") == ["SUM", "PROD"]
    assert "BXOR" in oracle.ops_for("uint16")


def test_defined_pairs_are_what_gloocy_accepts():
    """The oracle's table (MPI's rules) against the library: a defined pair
    reduces, any other is refused with OpError before anything is sent."""
    import gloocy
    from gloocy.errors import GloocyError
    comm = gloocy.connect(0, 1, None)
    try:
        for dtype in oracle.DTYPES + oracle.COMPLEX:
            for op in oracle.OPS:
                x = np.zeros(2, dtype=dtype)
                try:
                    comm.Allreduce(gloocy.IN_PLACE, x, op=getattr(gloocy, op))
                    accepted = True
                except (GloocyError, ValueError, TypeError) as e:
                    assert "not defined" in str(e), e
                    accepted = False
                assert accepted == oracle.defined(dtype, op), (dtype, op)
    finally:
        comm.Free()
