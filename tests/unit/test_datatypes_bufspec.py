"""gloocy.datatypes and gloocy.bufspec against real mpi4py (single process).

mpi4py (on MPICH) is the oracle: sizes, extents, names and typecodes of the
predefined types, the layout of derived types (MPI_Pack gives the typemap
order), and how a buffer spec is read (COMM_SELF moves the bytes; a bad spec
raises the same exception type). NumPy fancy indexing checks pack/unpack.
"""

import array
import ctypes
import gc
import pickle
import types

import numpy as np
import pytest

from gloocy import bufspec, datatypes, ops
from gloocy.bufspec import BOTTOM, message, vector_message
from gloocy.constants import IN_PLACE
from peers import MPI as INSTALL_MPI

try:
    from mpi4py import MPI
except ImportError:
    MPI = None

needs_mpi4py = pytest.mark.skipif(MPI is None, reason="no oracle to compare with: "
                                  f"needs {INSTALL_MPI}")

NAMES = [n for n in datatypes.__all__
         if isinstance(getattr(datatypes, n), datatypes.Datatype)]

# gloocy's counterpart of the mpi4py.MPI module, for spec builders
G = types.SimpleNamespace(**vars(datatypes), BOTTOM=BOTTOM)


# -- predefined types ---------------------------------------------------------

@needs_mpi4py
def test_same_predefined_names_as_mpi4py():
    theirs = {n for n in dir(MPI) if isinstance(getattr(MPI, n), MPI.Datatype)}
    assert set(NAMES) == theirs


@needs_mpi4py
def test_predefined_match_mpi4py():
    for name in NAMES:
        ours, theirs = getattr(datatypes, name), getattr(MPI, name)
        assert ours.is_predefined, name
        if name == "BFLOAT16_T":    # MPICH has none; gloocy's core has
            assert not theirs and ours.Get_size() == 2
            continue
        assert bool(ours) == bool(theirs), name
        assert ours.Get_name() == theirs.Get_name(), name
        assert datatypes.typecode(ours) == MPI._typecode(theirs), name
        if theirs:
            assert (ours.Get_size(), ours.Get_extent(), ours.Get_true_extent(),
                    ours.lb, ours.ub) == (
                theirs.Get_size(), theirs.Get_extent(),
                theirs.Get_true_extent(), theirs.lb, theirs.ub), name
            assert ours.np_dtype.itemsize == theirs.extent, name


@needs_mpi4py
def test_aliases_and_equality_like_mpi4py():
    for a in NAMES:
        for b in NAMES:
            ours = (getattr(datatypes, a), getattr(datatypes, b))
            theirs = (getattr(MPI, a), getattr(MPI, b))
            if "BFLOAT16_T" in (a, b) and a != b:
                continue
            assert (ours[0] is ours[1]) == (theirs[0] is theirs[1]), (a, b)
            assert (ours[0] == ours[1]) == (theirs[0] == theirs[1]), (a, b)


@needs_mpi4py
@pytest.mark.parametrize("table", ["_typedict", "_typedict_c", "_typedict_f"])
def test_typecode_tables_match_mpi4py(table):
    ours, theirs = getattr(datatypes, table), getattr(MPI, table)
    assert ours.keys() == theirs.keys()
    for code, datatype in theirs.items():
        assert ours[code].Get_name() == datatype.Get_name(), code
    if table == "_typedict":
        for code in theirs:
            assert datatypes.from_typecode(code) is ours[code]


def test_typecodes():
    assert datatypes.from_typecode("i4") is datatypes.INT32_T
    with pytest.raises(KeyError):
        datatypes.from_typecode("x")
    with pytest.raises(TypeError):
        datatypes.from_typecode(["i"])
    assert datatypes.typecode(datatypes.INT.Dup()) == "i"
    assert datatypes.typecode(datatypes.INT.Create_contiguous(2)) is None
    assert datatypes.typecode(datatypes.DOUBLE_INT) is None
    assert datatypes.typecode(datatypes.DATATYPE_NULL) is None


def test_handles_names_and_life_cycle():
    D = datatypes
    assert D.Datatype(D.INT) == D.INT and D.Datatype(D.INT) is not D.INT
    with pytest.raises(TypeError):      # unhashable, as mpi4py's handles
        hash(D.INT)
    assert D.Datatype() == D.DATATYPE_NULL and not D.Datatype()
    assert D.LOGICAL1 == D.DATATYPE_NULL and D.LOGICAL1 is not D.DATATYPE_NULL
    dup = D.INT.Dup()
    assert dup != D.INT and dup.Get_name() == "" and not dup.is_predefined
    assert dup.Get_size() == 4 and dup.Commit() is dup
    dup.Set_name("mine")
    assert dup.name == "mine"
    dup.Free()
    assert dup == D.DATATYPE_NULL and not dup
    with pytest.raises(ValueError):
        dup.Get_size()
    with pytest.raises(ValueError):
        dup.Free()
    with pytest.raises(ValueError):
        D.INT.Free()
    with pytest.raises(ValueError):
        D.DATATYPE_NULL.Free()
    assert D.INT == D.SIGNED_INT and D.INT != D.INT32_T
    assert (D.INT == 4) is False


def test_pickle():
    D = datatypes
    assert pickle.loads(pickle.dumps(D.FLOAT32_T)) is D.FLOAT
    assert pickle.loads(pickle.dumps(D.DATATYPE_NULL)) is D.DATATYPE_NULL
    vec = D.DOUBLE.Create_vector(3, 1, 4)
    back = pickle.loads(pickle.dumps(vec))
    assert back != vec and back.Get_extent() == vec.Get_extent()
    assert back._h.elem is D.DOUBLE._h
    assert pickle.loads(pickle.dumps(BOTTOM)) is BOTTOM


# -- derived types --------------------------------------------------------------

# builders of derived types, written once for both modules
DERIVED = {
    "contiguous": lambda M: M.INT.Create_contiguous(5),
    "contiguous0": lambda M: M.INT.Create_contiguous(0),
    "vector": lambda M: M.INT.Create_vector(3, 2, 4),
    "vector overlap": lambda M: M.SHORT.Create_vector(3, 3, 2),
    "vector negative stride": lambda M: M.INT.Create_vector(3, 1, -2),
    "hvector": lambda M: M.DOUBLE.Create_hvector(3, 2, 20),
    "hvector unaligned": lambda M: M.INT.Create_hvector(4, 1, 5),
    "indexed": lambda M: M.INT.Create_indexed([1, 2], [5, -1]),
    "indexed empty block": lambda M: M.INT.Create_indexed([0, 2], [10, 1]),
    "indexed all empty": lambda M: M.INT.Create_indexed([0, 0], [10, 1]),
    "hindexed": lambda M: M.FLOAT.Create_hindexed([2, 1, 3], [0, 16, 40]),
    "indexed_block": lambda M: M.INT.Create_indexed_block(2, [4, 0, 9]),
    "hindexed_block": lambda M: M.UINT8_T.Create_hindexed_block(3, [7, 0]),
    "resized": lambda M: M.INT.Create_resized(-4, 20),
    "resized negative extent": lambda M: M.INT.Create_resized(0, -4)
    .Create_contiguous(3),
    "vector of resized": lambda M: M.INT.Create_resized(-4, 20)
    .Create_vector(2, 2, 3),
    "vector of vector": lambda M: M.INT.Create_vector(2, 1, 3)
    .Create_vector(2, 2, 3),
    "subarray C": lambda M: M.INT.Create_subarray([4, 5], [2, 3], [1, 1]),
    "subarray F": lambda M: M.INT.Create_subarray([4, 5], [2, 3], [1, 1],
                                                  order=M.ORDER_F),
    "subarray 3d": lambda M: M.DOUBLE.Create_subarray([3, 4, 2], [2, 2, 1],
                                                      [1, 0, 1]),
    "subarray of resized": lambda M: M.INT.Create_resized(-4, 12)
    .Create_subarray([4], [2], [1]),
    "subarray empty": lambda M: M.INT.Create_subarray([4], [0], [1]),
    "struct": lambda M: M.Datatype.Create_struct(
        [1, 2], [0, 12], [M.DOUBLE, M.DOUBLE]),
    "struct of derived": lambda M: M.Datatype.Create_struct(
        [1, 1], [0, 40], [M.INT.Create_vector(2, 1, 3), M.INT]),
    "struct negative": lambda M: M.Datatype.Create_struct([1], [-3], [M.INT]),
    "struct empty": lambda M: M.Datatype.Create_struct([], [], []),
    "dup of vector": lambda M: M.INT.Create_vector(2, 1, 2).Dup(),
    "mixed struct": lambda M: M.Datatype.Create_struct(
        [1, 1], [0, 8], [M.DOUBLE, M.CHAR]),
    "mixed struct padded": lambda M: M.Datatype.Create_struct(
        [1, 1, 2], [4, 12, 14], [M.INT, M.CHAR, M.SHORT]),
    "mixed struct of pair": lambda M: M.Datatype.Create_struct(
        [1, 3], [0, 16], [M.DOUBLE_INT, M.CHAR]),
    "mixed vector": lambda M: M.Datatype.Create_struct(
        [2, 1], [0, 8], [M.FLOAT, M.SHORT]).Create_vector(3, 1, -2),
    "mixed of mixed": lambda M: M.Datatype.Create_struct(
        [2, 1], [0, 40], [M.Datatype.Create_struct(
            [1, 1], [0, 8], [M.DOUBLE, M.CHAR]), M.INT]),
    "mixed resized": lambda M: M.Datatype.Create_struct(
        [1, 1], [0, 2], [M.SHORT, M.UNSIGNED_CHAR]).Create_resized(-2, 8)
    .Create_contiguous(2),
    "pair contiguous": lambda M: M.DOUBLE_INT.Create_contiguous(2),
    "short_int contiguous": lambda M: M.SHORT_INT.Create_contiguous(2),
    "pair vector": lambda M: M.FLOAT_INT.Create_vector(2, 1, 3),
    "bool vector": lambda M: M.C_BOOL.Create_vector(3, 1, 2),
    "complex indexed": lambda M: M.C_DOUBLE_COMPLEX.Create_indexed([1, 1],
                                                                   [2, 0]),
}

PAIRS = ("pair", "short_int")       # MPI_Pack drops the struct padding


@needs_mpi4py
@pytest.mark.parametrize("case", DERIVED)
def test_derived_bounds_match_mpi4py(case):
    ours, theirs = DERIVED[case](datatypes), DERIVED[case](MPI)
    assert ours.Get_size() == theirs.Get_size()
    assert ours.Get_extent() == theirs.Get_extent()
    assert ours.Get_true_extent() == theirs.Get_true_extent()
    assert ours.Get_name() == theirs.Get_name() == ""
    assert datatypes.typecode(ours) == MPI._typecode(theirs)
    theirs.Free()


def _room(datatype, count):
    """(buffer bytes, byte start) that hold `count` items."""
    first, end = datatype.span(count)
    start = max(0, -first)
    return start + end + 3, start


@needs_mpi4py
@pytest.mark.parametrize("case", [c for c in DERIVED
                                  if not c.startswith(PAIRS)])
def test_pack_unpack_match_mpi(case):
    for count in (1, 3):
        ours, theirs = DERIVED[case](datatypes), DERIVED[case](MPI).Commit()
        nbytes, start = _room(ours, count)
        rng = np.random.default_rng(7)
        mem = rng.integers(0, 100, nbytes, dtype=np.uint8)
        if ours.np_dtype == np.bool_:
            mem %= 2
        packed = ours.pack(mem, count, start)
        assert packed.dtype == ours.np_dtype and packed.flags.c_contiguous
        assert packed.nbytes == count * ours.Get_size()
        if packed.size:
            assert np.shares_memory(packed, mem) == ours.is_contiguous
        # MPI moves the same items as bytes, in typemap order, both ways
        expect = np.zeros(count * ours.Get_size(), np.uint8)
        MPI.COMM_SELF.Sendrecv([mem[start:], count, theirs], 0, 0,
                               [expect, MPI.BYTE], 0, 0)
        assert packed.tobytes() == expect.tobytes(), count
        out, mpi_out = np.zeros(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
        ours.unpack(packed.copy(), out, count, start)
        MPI.COMM_SELF.Sendrecv([expect, MPI.BYTE], 0, 0,
                               [mpi_out[start:], count, theirs], 0, 0)
        assert out.tobytes() == mpi_out.tobytes(), count
        theirs.Free()


def test_pack_matches_numpy_indexing():
    D = datatypes
    matrix = np.arange(30, dtype=np.float64).reshape(5, 6)
    mem = matrix.reshape(-1).view(np.uint8)
    column = D.DOUBLE.Create_vector(5, 1, 6)
    np.testing.assert_array_equal(column.pack(mem, 1, 2 * 8), matrix[:, 2])
    # columns 1, 2, 3: resized to one double apart, as in MPI's column trick
    columns = column.Create_resized(0, 8)
    np.testing.assert_array_equal(columns.pack(mem, 3, 8),
                                  matrix[:, 1:4].T.reshape(-1))
    picks = D.DOUBLE.Create_indexed_block(1, [7, 3, 29, 0])
    np.testing.assert_array_equal(picks.pack(mem, 1), matrix.reshape(-1)[
        [7, 3, 29, 0]])
    block = D.DOUBLE.Create_subarray([5, 6], [2, 3], [2, 1])
    np.testing.assert_array_equal(block.pack(mem, 1),
                                  matrix[2:4, 1:4].reshape(-1))
    fblock = D.DOUBLE.Create_subarray([6, 5], [3, 2], [1, 2],
                                      order=D.ORDER_F)
    np.testing.assert_array_equal(fblock.pack(mem, 1),
                                  matrix[2:4, 1:4].reshape(-1))
    target = np.zeros_like(matrix)
    block.unpack(np.arange(6.0), target.reshape(-1).view(np.uint8), 1)
    expect = np.zeros_like(matrix)
    expect[2:4, 1:4] = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(target, expect)
    # a short unpack fills only the first elements
    target[:] = 0
    block.unpack(np.arange(2.0), target.reshape(-1).view(np.uint8), 1)
    assert target[2, 1:3].tolist() == [0, 1] and target.sum() == 1
    with pytest.raises(ValueError):
        column.pack(mem, 2)              # past the end
    with pytest.raises(ValueError):
        D.INT.Create_indexed([1], [-1]).pack(mem, 1)   # before the start


def test_pair_layout_keeps_c_padding():
    D = datatypes
    pairs = np.zeros(4, D.DOUBLE_INT.np_dtype)
    pairs["v"], pairs["i"] = [1.5, 2.5, 3.5, 4.5], [1, 2, 3, 4]
    every_other = D.DOUBLE_INT.Create_vector(2, 1, 2)
    got = every_other.pack(pairs.view(np.uint8), 1)
    assert got.dtype == D.DOUBLE_INT.np_dtype and got.nbytes == 32
    assert got["v"].tolist() == [1.5, 3.5] and got["i"].tolist() == [1, 3]
    assert D.SHORT_INT.np_dtype.itemsize == 8 and D.SHORT_INT.Get_size() == 6


def test_constructor_errors():
    D = datatypes
    with pytest.raises(ValueError):
        D.INT.Create_contiguous(-1)
    with pytest.raises(ValueError):
        D.INT.Create_vector(2, -1, 1)
    with pytest.raises(TypeError):
        D.INT.Create_contiguous(2.0)
    with pytest.raises(ValueError):
        D.INT.Create_indexed([1, 2], [5])
    with pytest.raises(ValueError):
        D.INT.Create_subarray([4], [2], [3])
    with pytest.raises(ValueError):
        D.INT.Create_subarray([4], [2], [0], order=5)
    with pytest.raises(ValueError):
        D.DATATYPE_NULL.Create_contiguous(2)


# -- buffer specs against mpi4py -------------------------------------------------

def _ints(n=6):
    return np.arange(10, 10 + n, dtype="i")


# spec builders (M: the module the datatypes come from)
SPECS = {
    "array": lambda M: _ints(),
    "2d array": lambda M: np.arange(6.0).reshape(2, 3),
    "F-order array": lambda M: np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    "0-d array": lambda M: np.array(2.5),
    "float16": lambda M: np.arange(4, dtype=np.float16),
    "complex": lambda M: np.arange(3, dtype=np.complex64),
    "bool": lambda M: np.array([True, False, True]),
    "long double": lambda M: np.arange(3, dtype=np.longdouble),
    "bytearray": lambda M: bytearray(b"abcdefgh"),
    "array.array": lambda M: array.array("d", [1.0, 2.0]),
    "memoryview": lambda M: memoryview(bytearray(b"01234567")).cast("i"),
    "ctypes": lambda M: (ctypes.c_long * 3)(1, 2, 3),
    "ctypes char": lambda M: (ctypes.c_char * 3)(b"a", b"b", b"c"),
    "[buf, type]": lambda M: [_ints(), M.INT],
    "[buf, code]": lambda M: [_ints(), "i"],
    "[buf, other code]": lambda M: [_ints(), "h"],
    "[buf, count]": lambda M: [_ints(), 3],
    "[buf, True]": lambda M: [_ints(), True],
    "[buf, np count]": lambda M: [_ints(), np.int64(2)],
    "[buf, (count, displ)]": lambda M: [_ints(), (3, 1)],
    "[buf, [count, displ]]": lambda M: [_ints(), [3, 1]],
    "[buf, None]": lambda M: [_ints(), None],
    "(buf, type)": lambda M: (_ints(), M.INT),
    "[buf, count, type]": lambda M: [_ints(), 3, M.INT],
    "[buf, None, type]": lambda M: [_ints(), None, M.INT],
    "[buf, count, None]": lambda M: [_ints(), 3, None],
    "[buf, (count, displ), type]": lambda M: [_ints(), (2, 1), "i"],
    "[buf, (None, displ), type]": lambda M: [_ints(), (None, 1), "i"],
    "[buf, (count, None), type]": lambda M: [_ints(), (2, None), "i"],
    "[buf, count, displ, type]": lambda M: [_ints(), 2, 1, "i"],
    "[buf, None, None, type]": lambda M: [_ints(), None, None, M.INT],
    "[buf, count, None, type]": lambda M: [_ints(), 3, None, M.INT],
    "displ at the end": lambda M: [_ints(), 0, 6, "i"],
    "bytes as ints": lambda M: [bytearray(range(16)), "i"],
    "derived send": lambda M: [_ints(9), 2, M.INT.Create_vector(2, 1, 2)
                               .Commit()],
    "derived displ": lambda M: [_ints(12), 1, 1, M.INT.Create_vector(
        2, 1, 3).Create_resized(0, 16).Commit()],
    "derived inferred": lambda M: [_ints(8), M.SHORT.Create_vector(
        2, 1, 2).Create_resized(0, 16).Commit()],
    "[None, type]": lambda M: [None, M.INT],
    "[None, 0, type]": lambda M: [None, 0, M.INT],
    "[BOTTOM, 0, type]": lambda M: [M.BOTTOM, 0, M.INT],
    # errors
    "None": lambda M: None,
    "int": lambda M: 5,
    "str": lambda M: "abc",
    "object with __array_interface__ only": lambda M: type(
        "Iface", (), {"__array_interface__": {"shape": (0,), "typestr": "<f8",
                                              "data": (0, False),
                                              "version": 3}})(),
    "[]": lambda M: [],
    "[buf]": lambda M: [_ints()],
    "5 items": lambda M: [_ints(), 3, 1, M.INT, 0],
    "bad code": lambda M: [_ints(), "x"],
    "bad code 3": lambda M: [_ints(), 3, "x"],
    "int as type": lambda M: [_ints(), 3, 5],
    "object as type": lambda M: [_ints(), 3, object()],
    "list as type": lambda M: [_ints(), 3, [1]],
    "bytes count": lambda M: [_ints(), b"i"],
    "float count": lambda M: [_ints(), 2.0, M.INT],
    "str count": lambda M: [_ints(), "2", M.INT],
    "code as count": lambda M: [_ints(), "i", None],
    "object count": lambda M: [_ints(), object()],
    "negative count": lambda M: [_ints(), -1, M.INT],
    "negative displ": lambda M: [_ints(), 1, -1, M.INT],
    "displ past the end": lambda M: [_ints(), 1, 8, M.INT],
    "(count,)": lambda M: [_ints(), (3,)],
    "(count, displ, x)": lambda M: [_ints(), (3, 1, 1), M.INT],
    "null type": lambda M: [_ints(), M.DATATYPE_NULL],
    "length not a multiple": lambda M: [bytearray(7), M.INT],
    "extent past the buffer": lambda M: [_ints(), M.INT.Create_contiguous(4)
                                         .Commit()],
    "[None] no type": lambda M: [None, [0]],
    "[None, 3, type]": lambda M: [None, 3, M.INT],
    "BOTTOM": lambda M: M.BOTTOM,
    "non-contiguous array": lambda M: np.zeros((4, 4))[:, 0],
    "non-contiguous memoryview": lambda M: memoryview(bytearray(16))[::2],
    "big-endian memoryview": lambda M: memoryview(np.zeros(2, ">i4")),
    "structured array": lambda M: np.zeros(3, [("a", "f8"), ("b", "f4")]),
    "object array": lambda M: np.zeros(3, object),
    "unicode array": lambda M: np.zeros(2, "U3"),
    "bytes array": lambda M: np.zeros(2, "S3"),
    "datetime array": lambda M: np.zeros(2, "M8[s]"),
    "c_char_p": lambda M: (ctypes.c_char_p * 2)(),
}

# mpi4py does not look here; gloocy refuses (see test_stricter_than_mpi4py)
STRICTER = {"object with __array_interface__ only"}


def _mpi_roundtrip(spec, role):
    """What mpi4py moves for `spec`: the bytes sent, or the user buffer
    after receiving `role` (a bytes pattern)."""
    out = bytearray(1024)
    status = MPI.Status()
    if role == "send":
        MPI.COMM_SELF.Sendrecv(spec, 0, 0, out, 0, 0, status)
        return bytes(out[:status.Get_count(MPI.BYTE)])
    MPI.COMM_SELF.Sendrecv(role, 0, 0, spec, 0, 0, status)
    assert status.Get_count(MPI.BYTE) == len(role)
    return None


def _user_bytes(spec):
    buf = spec[0] if isinstance(spec, (list, tuple)) else spec
    if buf is None or buf is BOTTOM or buf is MPI.BOTTOM:
        return None
    return memoryview(buf).tobytes(order="A")


def _same_error(ours, theirs):
    """The same exception type (None: no error). Where MPI returns an error
    code (mpi4py raises MPI.Exception) gloocy raises a ValueError."""
    if theirs is MPI.Exception:
        theirs = ValueError
    if ours is None or theirs is None:
        return ours is theirs
    return issubclass(ours, theirs)


def _outcome(call):
    try:
        return call(), None
    except Exception as exc:        # noqa: BLE001 - the type is compared
        return None, type(exc)


@needs_mpi4py
@pytest.mark.parametrize("role", ["send", "recv"])
@pytest.mark.parametrize("case", [c for c in SPECS if c not in STRICTER])
def test_message_like_mpi4py(case, role):
    readonly = role == "send"
    ours, our_error = _outcome(lambda: message(
        SPECS[case](G), name="buf", readonly=readonly))
    pattern = b""
    if role == "recv" and our_error is None:
        pattern = bytes(np.arange(ours.nbytes, dtype=np.uint8) + 1)
    theirs_spec = SPECS[case](MPI)
    theirs, their_error = _outcome(lambda: _mpi_roundtrip(
        theirs_spec, "send" if readonly else pattern))
    assert _same_error(our_error, their_error), (our_error, their_error)
    if our_error:
        return
    assert ours.data.ndim == 1 and ours.data.flags.c_contiguous
    assert ours.data.dtype == ours.datatype.np_dtype
    assert ours.nbytes == ours.count * ours.datatype.Get_size()
    if role == "send":
        assert ours.data.tobytes() == theirs
        return
    # receive the same pattern both ways; the user buffers must agree
    spec = SPECS[case](G)
    ours = message(spec, name="buf")
    ours.data.view(np.uint8)[:] = np.frombuffer(pattern, np.uint8)
    ours.unpack()
    assert _user_bytes(spec) == _user_bytes(theirs_spec)


VECTOR_SPECS = {
    "array": lambda M: _ints(),
    "[buf, count]": lambda M: [_ints(), 3],
    "[buf, [count]]": lambda M: [_ints(), [3]],
    "[buf, np counts]": lambda M: [_ints(), np.array([3])],
    "[buf, None]": lambda M: [_ints(), None],
    "[buf, code]": lambda M: [_ints(), "i"],
    "[buf, type]": lambda M: [_ints(), M.INT],
    "[buf, (counts, displs)]": lambda M: [_ints(), ([3], [1])],
    "[buf, (count, displ)]": lambda M: [_ints(), (3, 1)],
    "[buf, (None, displs)]": lambda M: [_ints(), (None, [0])],
    "[buf, (counts, None)]": lambda M: [_ints(), ([3], None)],
    "[buf, counts, type]": lambda M: [_ints(), [3], "i"],
    "[buf, (counts, displs), type]": lambda M: [_ints(), ([3], [1]), "i"],
    "[buf, counts, displs, type]": lambda M: [_ints(), [3], [1], "i"],
    "[buf, counts, None, type]": lambda M: [_ints(), [3], None, "i"],
    "[buf, None, None, type]": lambda M: [_ints(), None, None, "i"],
    "[buf, counts, displs, None]": lambda M: [_ints(), [3], [1], None],
    "derived": lambda M: [_ints(), [2], [1], M.INT.Create_contiguous(2)
                          .Commit()],
    "derived strided": lambda M: [_ints(9), [2], [0], M.INT.Create_vector(
        2, 1, 2).Create_resized(0, 12).Commit()],
    "[None, counts, type]": lambda M: [None, [0], "i"],
    # errors
    "None": lambda M: None,
    "[buf]": lambda M: [_ints()],
    "5 items": lambda M: [_ints(), [3], [1], "i", 0],
    "[buf, counts, displs] (a list is no pair)": lambda M: [_ints(), [3], [1]],
    "[buf, count, displ]": lambda M: [_ints(), 3, 1],
    "[buf, [counts, displs]]": lambda M: [_ints(), [[3], [1]]],
    "too many counts": lambda M: [_ints(), [3, 1]],
    "too many displs": lambda M: [_ints(), [3], [1, 2], "i"],
    "(counts,)": lambda M: [_ints(), ([3],)],
    "(counts, displs, x)": lambda M: [_ints(), ([3], [1], [2])],
    "float counts": lambda M: [_ints(), [2.0]],
    "str displs": lambda M: [_ints(), [3], "0", "i"],
    "set counts": lambda M: [_ints(), {3}],
    "bad code": lambda M: [_ints(), "x"],
    "int as type": lambda M: [_ints(), [3], 2],
    "[None, counts] no type": lambda M: [None, [0]],
}


@needs_mpi4py
@pytest.mark.parametrize("role", ["send", "recv"])
@pytest.mark.parametrize("case", VECTOR_SPECS)
def test_vector_message_like_mpi4py(case, role):
    """One rank: mpi4py's Scatterv sends the block, Gatherv receives it."""
    readonly = role == "send"
    ours, our_error = _outcome(lambda: vector_message(
        VECTOR_SPECS[case](G), 1, name="buf", readonly=readonly))
    theirs_spec = VECTOR_SPECS[case](MPI)
    if role == "send":
        out = np.full(64, 0xEE, np.uint8)

        def mpi():
            MPI.COMM_SELF.Scatterv(theirs_spec, [out, MPI.BYTE], root=0)
            return out
    else:
        def mpi():
            block = ours.sizes[0] if our_error is None else 0
            pattern = np.arange(block, dtype=np.uint8) + 1
            MPI.COMM_SELF.Gatherv([pattern, MPI.BYTE], theirs_spec, root=0)
            return pattern
    theirs, their_error = _outcome(mpi)
    assert _same_error(our_error, their_error), (our_error, their_error)
    if our_error:
        return
    assert ours.data.ndim == 1 and ours.data.dtype == ours.datatype.np_dtype
    block = ours.data.view(np.uint8)[ours.offsets[0]:][:ours.sizes[0]]
    if role == "send":
        assert block.tobytes() == theirs[:ours.sizes[0]].tobytes()
        assert (theirs[ours.sizes[0]:] == 0xEE).all()
        return
    spec = VECTOR_SPECS[case](G)
    ours = vector_message(spec, 1, name="buf")
    ours.data.view(np.uint8)[ours.offsets[0]:][:ours.sizes[0]] = theirs
    ours.unpack()
    assert _user_bytes(spec) == _user_bytes(theirs_spec)


# Several ranks: what mpi4py's Scatterv sent to each of 3 ranks (checked once
# with mpiexec -n 3) from a buffer of the ints 10..29.
SCATTERV_3 = [
    (lambda M: np.arange(10, 30, dtype="i"),
     [[10, 11, 12, 13, 14, 15, 16], [17, 18, 19, 20, 21, 22, 23],
      [24, 25, 26, 27, 28, 29]]),
    (lambda M: np.arange(10, 29, dtype="i"),
     [[10, 11, 12, 13, 14, 15, 16], [17, 18, 19, 20, 21, 22],
      [23, 24, 25, 26, 27, 28]]),
    (lambda M: [np.arange(10, 30, dtype="i"), 2],
     [[10, 11], [12, 13], [14, 15]]),
    (lambda M: [np.arange(10, 30, dtype="i"), (2, 3)],
     [[10, 11], [13, 14], [16, 17]]),
    (lambda M: [np.arange(10, 30, dtype="i"), (2, [0, 5, 9])],
     [[10, 11], [15, 16], [19, 20]]),
    (lambda M: [np.arange(10, 30, dtype="i"), ([1, 2, 3], 3)],
     [[10], [13, 14], [16, 17, 18]]),
    (lambda M: [np.arange(10, 30, dtype="i"), [1, 2, 3], "i"],
     [[10], [11, 12], [13, 14, 15]]),
    (lambda M: [np.arange(10, 30, dtype="i"), (None, 5)],
     [[10, 11, 12, 13, 14, 15, 16], [15, 16, 17, 18, 19, 20, 21],
      [20, 21, 22, 23, 24, 25]]),
    (lambda M: [np.arange(10, 30, dtype="i"), 2, 3, "i"],
     [[10, 11], [13, 14], [16, 17]]),
    (lambda M: [np.arange(10, 30, dtype="i"), ([1, 2, 3], [0, 1, 2]),
                M.INT.Create_contiguous(2).Commit()],
     [[10, 11], [12, 13, 14, 15], [14, 15, 16, 17, 18, 19]]),
]


@pytest.mark.parametrize("spec, blocks", SCATTERV_3)
def test_vector_message_three_ranks(spec, blocks):
    msg = vector_message(spec(datatypes), 3, name="sendbuf", readonly=True)
    got = [msg.data.view(np.uint8)[o:o + n].view("i").tolist()
           for o, n in zip(msg.offsets, msg.sizes)]
    assert got == blocks
    assert msg.counts == [len(b) // (msg.datatype.Get_size() // 4)
                          for b in blocks]


def test_vector_message_errors_three_ranks():
    buf = np.arange(20, dtype="i")
    for counts in ([1, 2], [1, 2, 3, 4], np.array([1, 2])):
        with pytest.raises(ValueError, match="sendbuf: expected 3 counts"):
            vector_message([buf, counts], 3, name="sendbuf")
    with pytest.raises(ValueError, match="recvbuf: expected 3 displs"):
        vector_message([buf, [1, 2, 3], (0, 1), "i"], 3, name="recvbuf")
    with pytest.raises(ValueError):
        vector_message([buf, [1, -2, 3]], 3, name="recvbuf")
    with pytest.raises(ValueError, match="need bytes"):
        vector_message([buf, ([1, 2, 30], None)], 3, name="recvbuf")
    with pytest.raises(ValueError, match="need bytes"):
        vector_message([buf, ([1, 2, 3], [0, -1, 2])], 3, name="recvbuf")


def test_vector_message_derived_three_ranks():
    matrix = np.arange(24, dtype=np.float64).reshape(4, 6)
    column = datatypes.DOUBLE.Create_vector(4, 1, 6).Create_resized(0, 8).Commit()
    send = vector_message([matrix, [1, 2, 3], column], 3, name="sendbuf",
                          readonly=True)
    assert send.sizes == [32, 64, 96] and send.offsets == [0, 32, 96]
    assert send.data.tolist() == matrix[:, :6].T.reshape(-1).tolist()
    out = np.zeros_like(matrix)
    recv = vector_message([out, ([1, 2, 1], [5, 0, 3]), column], 3,
                          name="recvbuf")
    assert not np.shares_memory(recv.data, out)
    recv.data[:] = np.arange(16.0)
    recv.unpack()
    expect = np.zeros_like(matrix)
    expect[:, 5] = [0, 1, 2, 3]
    expect[:, 0:2] = np.arange(4.0, 12.0).reshape(2, 4).T
    expect[:, 3] = [12, 13, 14, 15]
    np.testing.assert_array_equal(out, expect)


# -- buffer objects and gloocy's own rules ---------------------------------------

def test_contiguous_data_is_a_view():
    for order, spec in (("C", lambda a: a), ("F", lambda a: a),
                        ("C", lambda a: [a, datatypes.FLOAT]),
                        ("C", lambda a: [a, 5, 2, "f"])):
        a = np.zeros((3, 4), np.float32, order=order)
        msg = message(spec(a), name="recvbuf")
        msg.data[:] = 7
        assert (a == 7).sum() == msg.count
    msg = message([a, 5, 2, "f"], name="recvbuf")
    assert msg.count == 5 and msg.nbytes == 20
    assert msg.data.ctypes.data == a.ctypes.data + 8
    b = bytearray(8)
    message([b, "i"], name="recvbuf").data[:] = [1, 2]
    assert bytes(b) == np.array([1, 2], "i").tobytes()


def test_non_contiguous_send_is_a_copy_and_receive_unpacks():
    a = np.arange(8, dtype="i")
    every_other = datatypes.INT.Create_vector(4, 1, 2).Commit()
    send = message([a, 1, every_other], name="sendbuf", readonly=True)
    assert send.data.tolist() == [0, 2, 4, 6] and not np.shares_memory(
        send.data, a)
    send.unpack()                       # no-op on a send buffer
    recv = message([a, 1, every_other], name="recvbuf")
    recv.data[:] = [-1, -2, -3, -4]
    assert a.tolist() == list(range(8))     # nothing lands before unpack
    recv.unpack(nbytes=8)               # a short receive: two elements
    assert a.tolist() == [-1, 1, -2, 3, 4, 5, 6, 7]


def test_in_place_none_and_bottom():
    a = np.zeros(3)
    assert message(IN_PLACE, name="sendbuf", allow_in_place=True) is None
    assert message(None, name="sendbuf", allow_in_place=True) is None
    for spec in (IN_PLACE, None, [IN_PLACE, "d"]):
        with pytest.raises(TypeError, match="sendbuf"):
            message(spec, name="sendbuf")
    with pytest.raises(TypeError, match="recvbuf"):
        vector_message(IN_PLACE, 2, name="recvbuf")
    assert repr(BOTTOM) == "BOTTOM"
    assert message([BOTTOM, 0, "d"], name="buf").nbytes == 0
    with pytest.raises(ValueError, match="absolute addresses"):
        message([BOTTOM, 2, "d"], name="buf")      # address 0: nothing there
    assert message([a, 0, "d"], name="buf").nbytes == 0
    # a struct of absolute addresses reads and writes the arrays there
    b = np.array([5, 6], np.int32)
    at = datatypes.Datatype.Create_struct(
        [3, 2], [a.ctypes.data, b.ctypes.data],
        [datatypes.DOUBLE, datatypes.INT]).Commit()
    a[:] = [1.5, 2.5, 3.5]
    sent = message([BOTTOM, 1, at], name="buf", readonly=True)
    assert sent.data.tobytes() == a.tobytes() + b.tobytes()
    into = message([BOTTOM, 1, at], name="buf")
    into.data[:] = np.frombuffer(np.arange(3.0).tobytes()
                                 + np.array([8, 9], np.int32).tobytes(),
                                 np.uint8).view(into.data.dtype)
    into.unpack()
    assert a.tolist() == [0.0, 1.0, 2.0] and b.tolist() == [8, 9]


def test_stricter_than_mpi4py():
    """mpi4py hands these to MPI, which reads or writes past the buffer;
    gloocy refuses before any byte moves."""
    a = np.arange(6, dtype="i")
    for spec in ([a, 7, "i"], [a, 4, 3, "i"],
                 [a, 2, datatypes.INT.Create_contiguous(4).Commit()]):
        with pytest.raises(ValueError, match="buf: .*need bytes"):
            message(spec, name="buf")
    with pytest.raises(ValueError, match="need bytes"):
        vector_message([a, [7]], 1, name="buf")
    with pytest.raises(ValueError, match="need bytes"):
        vector_message([a, (None, [1])], 1, name="buf")


def test_readonly_buffers():
    ro = np.arange(4, dtype=np.uint8)
    ro.flags.writeable = False
    for buf in (ro, b"abcd", memoryview(b"abcd")):
        assert message(buf, name="sendbuf", readonly=True).nbytes == 4
        with pytest.raises(BufferError, match="recvbuf: .*read-only"):
            message(buf, name="recvbuf")
        with pytest.raises(BufferError, match="recvbuf: .*read-only"):
            vector_message(buf, 2, name="recvbuf")


class _DLPackOnly:
    """A DLPack producer without the buffer protocol (like a CPU tensor)."""

    def __init__(self, array, device=(1, 0)):
        self.array, self.device = array, device

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device


class _CudaInterface:
    """__cuda_array_interface__ over host memory, as numba can export."""

    def __init__(self, array):
        self.array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str,
            "data": (array.ctypes.data, False), "strides": None,
            "version": 3}


def test_foreign_buffers():
    a = np.arange(4.0)
    msg = message(_DLPackOnly(a), name="recvbuf")
    msg.data[:] = -1
    assert (a == -1).all() and msg.datatype == datatypes.DOUBLE
    # CUDA device type over host memory (mpi4py's tests make such arrays):
    # read through the pointer; a device gloocy cannot read is refused.
    msg = message(_DLPackOnly(a, device=(2, 0)), name="recvbuf")
    msg.data[:] = -2
    assert (a == -2).all()
    with pytest.raises(BufferError, match="recvbuf: .*device type 4"):
        message(_DLPackOnly(a, device=(4, 0)), name="recvbuf")
    b = np.arange(5, dtype=np.int16)
    msg = message(_CudaInterface(b), name="recvbuf")
    msg.data[:] = 9
    assert (b == 9).all() and msg.datatype == datatypes.SHORT
    c = np.arange(3, dtype=np.uint8)

    class ArrayInterface:
        __array_interface__ = c.__array_interface__

    msg = message(ArrayInterface(), name="recvbuf")
    msg.data[:] = 5
    assert (c == 5).all()
    with pytest.raises(TypeError, match="sendbuf: expected a buffer"):
        message(object(), name="sendbuf")


def test_device_pointer_is_refused(monkeypatch):
    monkeypatch.setattr(bufspec, "_is_device_pointer", lambda address: True)
    with pytest.raises(BufferError, match="buf: .*CUDA device memory"):
        message(_CudaInterface(np.zeros(2)), name="buf")


def test_inferred_beyond_mpi4py():
    """(value, index) structs and bfloat16: the core reduces them, so they
    get a datatype (mpi4py has none)."""
    D = datatypes
    pairs = np.zeros(3, np.dtype([("value", "f8"), ("rank", "i4")],
                                 align=True))
    msg = message(pairs, name="buf")
    assert msg.datatype is D.DOUBLE_INT and msg.count == 3
    assert message(np.zeros(2, D.SHORT_INT.np_dtype), name="buf"
                   ).datatype is D.SHORT_INT
    with pytest.raises(KeyError):       # packed: not a C struct
        message(np.zeros(2, [("v", "f8"), ("i", "i4")]), name="buf")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.arange(4).astype(ml_dtypes.bfloat16)
    msg = message(bf16, name="buf")
    assert msg.datatype is D.BFLOAT16_T and msg.data.dtype == bf16.dtype
    assert np.shares_memory(msg.data, bf16)


def test_error_messages_name_the_argument():
    a = np.arange(6, dtype="i")
    cases = [([a, "x"], KeyError), ([a, 2.0, "i"], TypeError),
             ([a, -1, "i"], ValueError), ([a], ValueError),
             ([bytearray(7), "i"], ValueError), (np.zeros(2, "U2"), KeyError),
             (np.zeros((2, 2))[:, 0], BufferError)]
    for spec, error in cases:
        with pytest.raises(error, match="myarg"):
            message(spec, name="myarg")
    with pytest.raises(TypeError, match="myarg"):
        vector_message([a, [1.5]], 1, name="myarg")


def test_fast_path_agrees_with_the_general_one():
    a = np.arange(6.0)
    first, second = message(a, name="buf"), message(a, name="buf")
    assert first.datatype is second.datatype is datatypes.DOUBLE
    assert first.count == second.count == 6
    assert np.shares_memory(second.data, a)
    ro = a.copy()
    ro.flags.writeable = False
    with pytest.raises(BufferError):
        message(ro, name="buf")


# -- the same specs through gloocy.MPI's calls (the message layer) ----------------
#
# bufspec is the message layer's slow path; the common forms are parsed in C
# (gloocy/_msg.pyx). Each spec goes through COMM_SELF of gloocy.MPI and of
# mpi4py alike: what is sent, what lands in the user's buffer, or the error.

def _self_roundtrip(M, spec, role):
    out = bytearray(1024)
    status = M.Status()
    if role == "send":
        M.COMM_SELF.Sendrecv(spec, 0, 0, out, 0, 0, status)
        return bytes(out[:status.Get_count(M.BYTE)])
    M.COMM_SELF.Sendrecv(role, 0, 0, spec, 0, 0, status)
    assert status.Get_count(M.BYTE) == len(role)
    return _user_bytes(spec)


@needs_mpi4py
@pytest.mark.parametrize("role", ["send", "recv"])
@pytest.mark.parametrize("case", [c for c in SPECS if c not in STRICTER])
def test_communicator_reads_specs_like_mpi4py(case, role):
    from gloocy import MPI as GM
    pattern = "send"
    if role == "recv":
        size = _outcome(lambda: message(SPECS[case](G), name="buf"))[0]
        pattern = bytes(np.arange(size.nbytes if size else 0, dtype=np.uint8) + 1)
    ours, our_error = _outcome(lambda: _self_roundtrip(GM, SPECS[case](GM),
                                                       pattern))
    theirs, their_error = _outcome(lambda: _self_roundtrip(
        MPI, SPECS[case](MPI), pattern))
    assert _same_error(our_error, their_error), (our_error, their_error)
    assert ours == theirs


@needs_mpi4py
@pytest.mark.parametrize("role", ["send", "recv"])
@pytest.mark.parametrize("case", VECTOR_SPECS)
def test_communicator_reads_vector_specs_like_mpi4py(case, role):
    """One rank: Scatterv sends the block, Gatherv receives it, on gloocy's
    COMM_SELF and mpi4py's."""
    from gloocy import MPI as GM

    parsed = _outcome(lambda: vector_message(VECTOR_SPECS[case](G), 1,
                                             name="buf"))[0]
    block = parsed.sizes[0] if parsed is not None else 0

    def run(M):
        spec = VECTOR_SPECS[case](M)
        if role == "send":      # gloocy wants the block's size exactly
            out = np.full(block, 0xEE, np.uint8)
            M.COMM_SELF.Scatterv(spec, [out, M.BYTE], root=0)
            return out.tobytes()
        pattern = np.arange(block, dtype=np.uint8) + 1
        M.COMM_SELF.Gatherv([pattern, M.BYTE], spec, root=0)
        return _user_bytes(spec)

    ours, our_error = _outcome(lambda: run(GM))
    theirs, their_error = _outcome(lambda: run(MPI))
    assert _same_error(our_error, their_error), (our_error, their_error)
    assert ours == theirs


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_released = []


@_CAPSULE_DESTRUCTOR
def _python_destructor(pointer):
    # Python code in a capsule destructor, as ctypes-made DLPack producers
    # (mpi4py's test arrays) have: it must not run while an error is raised.
    _released.append(ctypes.cast(pointer, ctypes.c_void_p).value)


class _CtypesDLPack:
    """A DLPack producer whose capsule's destructor is Python code."""

    def __init__(self, array):
        self.array = array
        self.shape = (ctypes.c_int64 * 1)(array.size)
        self.tensor = bufspec._DLTensor(array.ctypes.data, bufspec._DLDevice(1, 0), 1,
                                        bufspec._DLDataType(2, 64, 1), self.shape,
                                        None, 0)

    def __dlpack__(self, **kwargs):
        return _capsule_new(ctypes.addressof(self.tensor), b"dltensor",
                            _python_destructor)

    def __dlpack_device__(self):
        return (1, 0)


def test_an_error_with_a_dlpack_buffer_is_that_error():
    """The capsule is released after the error is raised, not during it
    (else CPython reports a SystemError instead)."""
    before = len(_released)
    source = _CtypesDLPack(np.arange(2.0))
    with pytest.raises(ValueError, match="2 elements but inoutbuf has 3"):
        ops.SUM.Reduce_local([source, 2, datatypes.DOUBLE],
                             [np.zeros(3), 3, datatypes.DOUBLE])
    gc.collect()
    assert len(_released) == before + 1


def test_mixed_structs_move_but_never_reduce():
    """A struct of a double and a char is sent as MPI packs it (its 9 bytes
    per item, padding skipped), and no predefined op reduces it."""
    from gloocy import MPI as G
    t = G.Datatype.Create_struct([1, 1], [0, 8], [G.DOUBLE, G.CHAR]).Commit()
    rec = np.dtype([("x", "f8"), ("c", "S1")], align=True)
    src = np.array([(1.5, b"a"), (-2.0, b"z")], rec)
    raw = np.zeros(2 * t.Get_size(), np.uint8)
    G.COMM_SELF.Sendrecv([src, 2, t], 0, 771, [raw, G.BYTE], 0, 771)
    packed = np.dtype([("x", "f8"), ("c", "S1")])       # no padding
    assert raw.tobytes() == src.astype(packed).tobytes()
    back = np.zeros(2, rec)
    G.COMM_SELF.Sendrecv([raw, G.BYTE], 0, 772, [back, 2, t], 0, 772)
    assert back.tolist() == src.tolist()
    for op in (G.SUM, G.MAX, G.MAXLOC):
        with pytest.raises(TypeError):
            G.COMM_SELF.Allreduce([src, 2, t], [back, 2, t], op)
    t.Free()
