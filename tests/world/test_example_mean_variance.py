"""The worked example of "Testing your distributed code": a user's
distributed mean and variance, property-tested over thread worlds of 1-8
ranks with edge-case arrays -- and a buggy version that hypothesis catches
and shrinks to a world of 2."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gloocy
from gloocy.testing import strategies as gst

BACKEND = "threads"      # the suite's `world` fixture: thread worlds here


# -- the code under test (what a user writes) ---------------------------------

def mean_and_variance(comm, x):
    """Mean and population variance of the values spread over the ranks:
    each rank's (count, mean, sum of squared deviations), combined pairwise
    (Chan, Golub and LeVeque), so that no rank needs as many values as the
    others and large offsets do not cancel."""
    n = x.size
    mean = float(x.mean()) if n else 0.0
    m2 = float(((x - mean) ** 2).sum()) if n else 0.0
    count, total_mean, total_m2 = 0, 0.0, 0.0
    for nb, mb, m2b in comm.allgather((n, mean, m2)):
        if nb:
            delta = mb - total_mean
            both = count + nb
            total_mean += delta * nb / both
            total_m2 += m2b + delta * delta * count * nb / both
            count = both
    return total_mean, total_m2 / count


def mean_and_variance_buggy(comm, x):
    """The tempting version: two sums, and every rank assumed to hold as
    many values as this one."""
    sums = np.array([x.sum(), (x * x).sum()])
    comm.Allreduce(gloocy.IN_PLACE, sums)
    n = comm.size * x.size
    mean = sums[0] / n
    return mean, sums[1] / n - mean * mean


# -- the property -------------------------------------------------------------

def spread_values(max_size=8):
    """Each rank's share of the values, for worlds of 1-8 ranks (shares of
    any length, zero included; -0.0, 1, -1 and ±1e6 often)."""
    share = gst.arrays("float64", st.integers(0, 6), max_abs=1e6)
    return gst.per_rank(share, 1, max_size).filter(
        lambda shares: sum(s.size for s in shares) > 0)


def check(world, fn, shares):
    size = len(shares)
    everything = np.concatenate(shares)
    scale = 1.0 + np.abs(everything).max()
    for mean, var in world(size).run_each(fn, [(s,) for s in shares]):
        assert mean == pytest.approx(everything.mean(), rel=1e-9, abs=1e-12 * scale)
        assert var == pytest.approx(everything.var(), rel=1e-9, abs=1e-9 * scale)


@settings(max_examples=60, deadline=None)
@given(spread_values())
def test_mean_and_variance(world, data):
    check(world, mean_and_variance, data)


def test_hypothesis_finds_and_shrinks_the_bug(world):
    # No health checks: on a busy machine "too slow" would end the search
    # with an error of its own before it finds the bug.
    @settings(max_examples=200, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(spread_values())
    def test_buggy(data):
        check(world, mean_and_variance_buggy, data)

    with pytest.raises(Exception) as info:      # RankFailure or AssertionError
        test_buggy()
    notes = "\n".join(getattr(info.value, "__notes__", []))
    # (hypothesis >= 6.16x says "Failing test case")
    assert re.search("Falsifying example|Failing test case", notes), repr(info.value)
    # Shrunk to the smallest world that shows it: 2 ranks, one value apart.
    assert "data=[array([" in notes.replace("\n", "").replace(" ", ""), notes
    shares = notes.replace("\n", "").replace(" ", "").split("data=[", 1)[1]
    assert shares.count("array(") == 2, notes
