"""mpi4py's object model where gloocy follows it by construction: the
address constants (BOTTOM, IN_PLACE, BUFFER_AUTOMATIC), unhashable
handles, MPI._typealign; and derived types of 2**31 elements kept as one
run (O(1) memory). mpi4py on MPICH is the oracle."""

import operator
import pickle
import tracemalloc

import numpy as np
import pytest

from gloocy import MPI as GM
from peers import MPI as INSTALL_MPI

try:
    from mpi4py import MPI
except ImportError:
    MPI = None

needs_mpi4py = pytest.mark.skipif(MPI is None, reason="no oracle to compare with: "
                                  f"needs {INSTALL_MPI}")
CONSTANTS = ["BOTTOM", "IN_PLACE", "BUFFER_AUTOMATIC"]


def _behaviour(constant):
    """What a program can observe of an address constant."""
    view = memoryview(constant)
    try:
        constant + 1
        adds = True
    except TypeError:
        adds = False
    return (int(constant), repr(constant), bool(constant), hash(constant),
            constant == int(constant), constant != int(constant),
            constant == None, view.nbytes, view.obj is None, view.readonly,  # noqa: E711
            adds, hasattr(constant, "__index__"), type(constant)() == constant)


@needs_mpi4py
@pytest.mark.parametrize("name", CONSTANTS)
def test_address_constants_behave_as_mpi4py(name):
    ours, theirs = getattr(GM, name), getattr(MPI, name)
    assert _behaviour(ours) == _behaviour(theirs)
    assert GM.Get_address(ours) == MPI.Get_address(theirs)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(ours, protocol)) is ours
    assert ours.__reduce__() == theirs.__reduce__() == name


def test_address_constants_keep_their_meaning_in_messages():
    x = np.arange(4.0)
    GM.COMM_SELF.Allreduce(GM.IN_PLACE, x, op=GM.SUM)       # in place
    np.testing.assert_array_equal(x, np.arange(4.0))
    with pytest.raises(KeyError):                 # no datatype to infer
        GM.COMM_SELF.Send(GM.BOTTOM, 0)
    assert operator.index(GM.BOTTOM) == 0


@needs_mpi4py
def test_handles_are_unhashable_as_mpi4py():
    pairs = [(GM.INT, MPI.INT), (GM.INT.Dup(), MPI.INT.Dup()),
             (GM.DATATYPE_NULL, MPI.DATATYPE_NULL), (GM.SUM, MPI.SUM),
             (GM.OP_NULL, MPI.OP_NULL), (GM.MESSAGE_NULL, MPI.MESSAGE_NULL)]
    for ours, theirs in pairs:
        with pytest.raises(TypeError):
            hash(theirs)
        with pytest.raises(TypeError):
            hash(ours)


@needs_mpi4py
def test_typealign_as_mpi4py():
    names = ["INT", "DOUBLE", "BYTE", "PACKED", "CHARACTER", "AINT",
             "SHORT_INT", "LONG_DOUBLE_INT", "DOUBLE_INT", "COMPLEX32",
             "DATATYPE_NULL"]
    for name in names:
        assert GM._typealign(getattr(GM, name)) == \
            MPI._typealign(getattr(MPI, name)), name
    for make in (lambda M: M.INT.Dup(), lambda M: M.SHORT_INT.Dup(),
                 lambda M: M.INT.Create_contiguous(2),
                 lambda M: M.Datatype.Create_f90_real(7, M.UNDEFINED)):
        assert GM._typealign(make(GM)) == MPI._typealign(make(MPI))


@needs_mpi4py
def test_contiguous_types_of_2_31_elements_cost_no_memory():
    count = (1 << 31) + (1 << 21)
    tracemalloc.start()
    try:
        t = GM.BYTE.Create_contiguous(count)
        v = GM.INT.Create_vector(count, 1, 1)         # no gaps: one run
        r = GM.BYTE.Create_resized(0, 4).Create_contiguous(count)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    theirs = MPI.BYTE.Create_contiguous(count)
    assert (t.size, t.extent, t.true_extent, t.decode()[1:]) == \
        (theirs.size, theirs.extent, theirs.true_extent, theirs.decode()[1:])
    assert t.decode()[0] == GM.BYTE
    assert (v.size, v.extent) == (4 * count, 4 * count)
    assert (r.size, r.extent, r.true_extent) == (count, 4 * count,
                                                 4 * (count - 1) + 1)
    assert t.is_contiguous and v.is_contiguous and not r.is_contiguous
    theirs.Free()


def test_runs_pack_as_spelled_out_layouts():
    """A run (resized BYTE, contiguous) packs what NumPy's strided view
    selects; so does the same layout spelled out by an indexed type."""
    run = GM.BYTE.Create_resized(0, 3).Create_contiguous(5).Commit()
    spelled = GM.BYTE.Create_indexed([1] * 5, [0, 3, 6, 9, 12]).Create_resized(
        0, 15).Commit()
    data = np.arange(30, dtype=np.uint8)
    for t in (run, spelled):
        out = bytearray(t.Pack_size(2, GM.COMM_SELF))
        items = np.frombuffer(data, np.uint8)[:2 * 15]
        t.Pack(items, out, 0, GM.COMM_SELF)
        np.testing.assert_array_equal(np.frombuffer(out, np.uint8),
                                      data[:30:3])
