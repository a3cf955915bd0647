"""gloocy.util.dtlib against mpi4py.util.dtlib on MPICH (the oracle): the
NumPy dtype of the same datatype made in both, and the datatype of the
same NumPy dtype (its combiner, bounds and the dtype it gives back)."""

import numpy as np
import pytest

from gloocy import MPI as GM
from gloocy.util import dtlib
from peers import MPI as INSTALL_MPI

try:
    from mpi4py import MPI
    from mpi4py.util import dtlib as theirs
except ImportError:
    MPI = theirs = None

pytestmark = pytest.mark.skipif(MPI is None, reason="no oracle to compare "
                                f"with: needs {INSTALL_MPI}")

TYPES = {
    "INT": lambda M: M.INT,
    "DOUBLE_INT pair": lambda M: M.DOUBLE_INT,
    "SHORT_INT pair": lambda M: M.SHORT_INT,
    "Dup": lambda M: M.FLOAT.Dup(),
    "F90 real": lambda M: M.Datatype.Create_f90_real(7, M.UNDEFINED),
    "contiguous": lambda M: M.INT.Create_contiguous(3),
    "contiguous of contiguous": lambda M: M.DOUBLE.Create_contiguous(2).Create_contiguous(3),
    "vector": lambda M: M.INT.Create_vector(3, 4, 6),
    "vector, one block": lambda M: M.INT.Create_vector(1, 4, 6),
    "vector without gaps": lambda M: M.INT.Create_vector(3, 2, 2),
    "vector of vectors": lambda M: M.INT.Create_vector(3, 4, 6).Create_vector(2, 3, 4),
    "hvector, odd stride": lambda M: M.INT.Create_hvector(3, 4, 25),
    "indexed": lambda M: M.INT.Create_indexed([4, 4, 4], [1, 6, 12]),
    "indexed_block": lambda M: M.DOUBLE.Create_indexed_block(2, [0, 3]),
    "hindexed": lambda M: M.INT.Create_hindexed([4, 4, 4], [1, 25, 49]),
    "subarray C": lambda M: M.INT.Create_subarray([3, 4], [3, 4], [0, 0]),
    "subarray F": lambda M: M.INT.Create_subarray([3, 4], [3, 4], [0, 0],
                                                  M.ORDER_FORTRAN),
    "struct": lambda M: M.Datatype.Create_struct([1, 2, 3], [1, 27, 71],
                                                 [M.INT, M.DOUBLE, M.INT]),
    "struct of struct": lambda M: M.Datatype.Create_struct(
        [2], [0], [M.Datatype.Create_struct([1, 1], [0, 8], [M.INT, M.DOUBLE])]),
    "resized struct": lambda M: M.Datatype.Create_struct(
        [1, 1], [0, 4], [M.SHORT, M.INT]).Create_resized(0, 16),
}
FAILING = {
    "resized INT": lambda M: M.INT.Create_resized(0, 32),
    "part of an array": lambda M: M.INT.Create_subarray([2], [1], [0]),
    "DATATYPE_NULL": lambda M: M.DATATYPE_NULL,
}
DTYPES = ["i4", "f8", "c16", "?", "(2,3)f8", "i4,f8", "c,i4,f8,c",
          [("a", "i2"), ("b", "(3,)f4")]]


def _said(dtype):
    return dtype, dtype.itemsize, dtype.isalignedstruct


@pytest.mark.parametrize("name", sorted(TYPES))
def test_to_numpy_dtype_as_mpi4py(name):
    assert _said(dtlib.to_numpy_dtype(TYPES[name](GM))) == \
        _said(theirs.to_numpy_dtype(TYPES[name](MPI)))


@pytest.mark.parametrize("name", sorted(FAILING))
def test_what_numpy_cannot_say_is_a_value_error(name):
    with pytest.raises(ValueError):
        theirs.to_numpy_dtype(FAILING[name](MPI))
    with pytest.raises(ValueError):
        dtlib.to_numpy_dtype(FAILING[name](GM))


@pytest.mark.parametrize("spec", DTYPES, ids=str)
@pytest.mark.parametrize("align", [False, True])
def test_from_numpy_dtype_as_mpi4py(spec, align):
    dtype = np.dtype(spec, align=align)
    ours, mine = dtlib.from_numpy_dtype(dtype), theirs.from_numpy_dtype(dtype)
    assert (ours.combiner, ours.lb, ours.extent, ours.size) == \
        (mine.combiner, mine.lb, mine.extent, mine.size)
    # (field names are not kept: both give f0, f1...)
    assert _said(dtlib.to_numpy_dtype(ours)) == _said(theirs.to_numpy_dtype(mine))
    ours.Free()                 # a type of the caller's own, even when named
    mine.Free()


def test_from_numpy_dtype_refuses_what_mpi4py_refuses():
    foreign = ">i4" if np.dtype("<i4").isnative else "<i4"
    for spec in (foreign, "O"):
        with pytest.raises(ValueError):
            theirs.from_numpy_dtype(np.dtype(spec))
        with pytest.raises(ValueError):
            dtlib.from_numpy_dtype(np.dtype(spec))
