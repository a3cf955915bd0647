"""Datatype and Op as extension types: Python subclasses, copies, pickling,
and both as the message layer reads them, against mpi4py (single process:
COMM_SELF of gloocy.MPI and of mpi4py side by side)."""

import pickle

import numpy as np
import pytest

from gloocy import datatypes, ops
from peers import MPI as INSTALL_MPI

try:
    from mpi4py import MPI
except ImportError:
    MPI = None

pytestmark = pytest.mark.skipif(MPI is None, reason="no oracle to compare "
                                f"with: needs {INSTALL_MPI}")


@pytest.fixture(scope="module")
def GM():
    from gloocy import MPI as GM
    return GM


def _subclasses(M):
    class MyDatatype(M.Datatype):
        pass

    class MyOp(M.Op):
        pass
    return MyDatatype, MyOp


# -- object semantics ---------------------------------------------------------

def _datatype_facts(M):
    D, _ = _subclasses(M)
    d = D(M.FLOAT)
    derived = [d.Dup(), d.Create_contiguous(2), D.Create_struct([1], [0], [M.INT]),
               d.Create_resized(0, 8), d.Create_subarray([4], [2], [1]),
               d.Create_vector(2, 1, 2)]
    return [type(d) is D, d == M.FLOAT, d != M.FLOAT, d is not M.FLOAT,
            d.Get_size(), d.Get_extent(), d.is_predefined, d.tocode(),
            [type(t) is D for t in derived],
            [(t.Get_size(), t.Get_extent()) for t in derived],
            [t.is_predefined for t in derived],
            D() == M.DATATYPE_NULL, bool(D())]


def test_datatype_subclass_like_mpi4py(GM):
    assert _datatype_facts(GM) == _datatype_facts(MPI)


def _op_facts(M):
    _, O = _subclasses(M)
    o = O(M.SUM)
    user = O.Create(lambda a, b, t: None, commute=True)
    freed = []
    try:
        o.Free()
    except Exception as e:      # predefined: cannot be freed
        freed.append(type(e).__name__ in ("Exception", "ArgumentError"))
    return [type(o) is O, o == M.SUM, o != M.SUM, o.is_predefined,
            o.Is_commutative(), o(2, 3), freed,
            type(user) is O, user.is_commutative, user.is_predefined,
            M.Op() == M.OP_NULL, M.Op().is_predefined,
            M.Op(M.MAX) == M.MAX, M.Op(M.MAX).is_predefined]


def test_op_subclass_like_mpi4py(GM):
    assert _op_facts(GM) == _op_facts(MPI)


def _new_overridden(M):
    """Subclasses that pick the handle in __new__ (mpi4py's own tests
    subclass its handle types so)."""
    class NewDatatype(M.Datatype):
        def __new__(cls, datatype=None):
            return super().__new__(cls, datatype)

    class NewOp(M.Op):
        def __new__(cls, op=None):
            return super().__new__(cls, op)
    made = [M.Datatype.__new__(NewDatatype, M.INT),
            M.Op.__new__(NewOp, M.MAX)]
    return [NewDatatype(M.INT) == M.INT, NewDatatype() == M.DATATYPE_NULL,
            NewOp(M.MAX) == M.MAX, NewOp(M.MAX)(2, 5),
            made[0] == M.INT, made[0].Get_size(), made[1] == M.MAX,
            made[1](2, 5), [type(x).__name__ for x in made]]


def test_subclass_new_like_mpi4py(GM):
    assert _new_overridden(GM) == _new_overridden(MPI)


def test_pickled_subclass_instances_keep_their_class(GM):
    D, O = _subclasses(GM)
    # subclasses defined in a function cannot be pickled by name: register
    # them as module attributes for the round trip
    D.__qualname__, O.__qualname__ = "_PickledDatatype", "_PickledOp"
    globals().update(_PickledDatatype=D, _PickledOp=O)
    for obj, base in ((D(GM.FLOAT), GM.FLOAT), (D(), GM.DATATYPE_NULL),
                      (O(GM.MAX), GM.MAX)):
        back = pickle.loads(pickle.dumps(obj))
        assert type(back) is type(obj) and back == base
    vec = D(GM.INT).Create_vector(2, 1, 3)
    back = pickle.loads(pickle.dumps(vec))
    assert type(back) is D and back.Get_extent() == vec.Get_extent()
    # the base classes still pickle to the module's objects
    assert pickle.loads(pickle.dumps(GM.FLOAT)) is GM.FLOAT
    assert pickle.loads(pickle.dumps(GM.SUM)) is GM.SUM


def test_equal_ops_are_unhashable_as_mpi4py():
    assert ops.Op(ops.SUM) == ops.SUM
    for op in (ops.SUM, ops.Op(ops.MAX), ops.Op(), ops.OP_NULL):
        with pytest.raises(TypeError):      # as mpi4py's Op
            hash(op)


def test_tocode_like_mpi4py():
    for name in ("INT", "FLOAT", "DOUBLE", "C_BOOL", "INT8_T", "UINT64_T",
                 "C_DOUBLE_COMPLEX", "FLOAT32_T"):
        assert getattr(datatypes, name).tocode() == getattr(MPI, name).tocode()
    for build in (lambda M: M.INT.Create_contiguous(2), lambda M: M.DOUBLE_INT):
        with pytest.raises(ValueError):
            build(MPI).tocode()
        with pytest.raises(ValueError):
            build(datatypes).tocode()


# -- in buffer specs and reductions -------------------------------------------

# case -> (the datatype, made once per call: send and receive share it as
# mpi4py requires; the spec around a buffer)
SPECS = {
    "[buf, sub]": (lambda M, D: D(M.FLOAT), lambda a, t: [a, t]),
    "[buf, count, sub]": (lambda M, D: D(M.FLOAT), lambda a, t: [a, 3, t]),
    "[buf, (count, displ), sub]": (lambda M, D: D(M.FLOAT),
                                   lambda a, t: [a, (2, 1), t]),
    "[buf, count, displ, sub]": (lambda M, D: D(M.FLOAT),
                                 lambda a, t: [a, 2, 2, t]),
    "dense derived sub": (lambda M, D: D(M.FLOAT).Create_contiguous(2).Commit(),
                          lambda a, t: [a, 2, t]),
    "strided derived sub": (
        lambda M, D: D(M.FLOAT).Create_vector(2, 1, 2).Commit(),
        lambda a, t: [a, 2, t]),
    "resized sub": (lambda M, D: D(M.FLOAT).Create_resized(0, 8).Commit(),
                    lambda a, t: [a, 2, t]),
}


def _allreduce(M, case, use_op, copy=False):
    """b after Allreduce on one rank; copy: after Sendrecv instead (on one
    rank the same bytes land: MPICH defines predefined ops on predefined
    types only, gloocy on derived ones of one element type too)."""
    D, O = _subclasses(M)
    make_type, spec = SPECS[case]
    t = make_type(M, D)
    a = np.arange(1.0, 9.0, dtype=np.float32)
    b = np.full(8, -1.0, np.float32)
    if copy:
        M.COMM_SELF.Sendrecv(spec(a, t), 0, 0, spec(b, t), 0, 0)
    else:
        M.COMM_SELF.Allreduce(spec(a, t), spec(b, t), op=use_op(M, O))
    return b.tolist()


OPS = {
    "subclass copy of MAX": lambda M, O: O(M.MAX),
    "subclass user op": lambda M, O: O.Create(_add_floats, commute=True),
}


def _add_floats(inbuf, inoutbuf, datatype):
    x = np.frombuffer(inbuf, np.float32)
    y = np.frombuffer(inoutbuf, np.float32)
    y += x


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", SPECS)
def test_subclasses_in_allreduce_like_mpi4py(GM, case, op):
    derived = "derived" in case or "resized" in case
    theirs = _allreduce(MPI, case, OPS[op], copy=derived and "copy" in op)
    assert _allreduce(GM, case, OPS[op]) == theirs


def _reduce_local(M):
    D, O = _subclasses(M)
    a = np.arange(4, dtype=np.float32)
    b = np.ones(4, np.float32)
    O(M.SUM).Reduce_local([a, D(M.FLOAT)], [b, D(M.FLOAT)])
    O(M.MAX).Reduce_local([a, 2, D(M.FLOAT)], [b, 2, D(M.FLOAT)])
    return b.tolist()


def test_subclasses_in_reduce_local_like_mpi4py(GM):
    assert _reduce_local(GM) == _reduce_local(MPI)


def _vector(M):
    D, _ = _subclasses(M)
    a = np.arange(6, dtype=np.int32)
    out = np.zeros(6, np.int32)
    M.COMM_SELF.Gatherv([a, 4, D(M.INT)], [out, [4], [1], D(M.INT)])
    return out.tolist()


def test_subclass_in_vector_spec_like_mpi4py(GM):
    assert _vector(GM) == _vector(MPI)


def _misuse(M, build):
    D, _ = _subclasses(M)
    a = np.zeros(4, np.float32)
    try:
        M.COMM_SELF.Allreduce(M.IN_PLACE, build(M, D, a))
    except Exception as e:
        return "error"
    return a.tolist()


@pytest.mark.parametrize("build", [
    lambda M, D, a: [a, D(M.FLOAT).Create_contiguous(2)],   # not committed
    lambda M, D, a: [a, D()],                               # DATATYPE_NULL
    lambda M, D, a: [a, "x"],                               # no such typecode
    lambda M, D, a: [a, 2, "f"],
], ids=["uncommitted", "null", "bad typecode", "typecode"])
def test_subclass_misuse_like_mpi4py(GM, build):
    assert _misuse(GM, build) == _misuse(MPI, build)


def test_freed_datatype_is_refused(GM):
    D, _ = _subclasses(GM)
    t = D(GM.FLOAT).Create_contiguous(1).Commit()
    a = np.zeros(2, np.float32)
    GM.COMM_SELF.Allreduce(GM.IN_PLACE, [a, t])
    t.Free()
    with pytest.raises(ValueError):
        GM.COMM_SELF.Allreduce(GM.IN_PLACE, [a, t])


# -- a datatype in the spec overrides the buffer's own format ------------------

def _reinterpreted(M):
    """int32 memory holding float bit patterns, reduced as FLOAT (one rank:
    the bytes are copied); then a pair of different datatypes."""
    a = np.arange(1.0, 5.0, dtype=np.float32).view(np.int32)
    b = np.zeros(4, np.int32)
    M.COMM_SELF.Allreduce([a, M.FLOAT], [b, 4, M.FLOAT], op=M.SUM)
    c = np.zeros(2, np.float64)
    M.COMM_SELF.Allreduce([np.ones(4, np.float32), M.FLOAT], [c, "f"])
    try:
        M.COMM_SELF.Allreduce([a, M.FLOAT], [b, M.INT])
    except ValueError as e:
        error = type(e).__name__
    return b.view(np.float32).tolist(), c.view(np.float32).tolist(), error


def test_spec_datatype_overrides_the_buffer_format_like_mpi4py(GM):
    assert _reinterpreted(GM) == _reinterpreted(MPI)


def test_datatypes_differ_names_them(GM):
    a = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="'float32'.*'int32'"):
        GM.COMM_SELF.Allreduce([a, GM.FLOAT], [np.zeros(4, np.float32), GM.INT])
