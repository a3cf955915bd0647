"""mpi4py's object model on gloocy.MPI, with mpi4py (on MPICH, in this same
process: COMM_SELF only) as the oracle: MPI.Pickle, null handles, Info as a
mapping, error classes and codes, subclasses built in __new__, Status's
memory."""

import json
import pickle
import weakref

import numpy as np
import pytest

from peers import MPI as INSTALL_MPI

try:
    from mpi4py import MPI
except ImportError:
    MPI = None

pytestmark = pytest.mark.skipif(MPI is None, reason=f"no oracle: needs {INSTALL_MPI}")


@pytest.fixture(scope="module")
def GM():
    from gloocy import MPI as GM
    return GM


def both(GM, facts):
    assert facts(GM) == facts(MPI)


NULLS = ["COMM_NULL", "GROUP_NULL", "INFO_NULL", "OP_NULL", "DATATYPE_NULL",
         "REQUEST_NULL", "ERRHANDLER_NULL", "WIN_NULL", "FILE_NULL",
         "SESSION_NULL", "MESSAGE_NULL"]


# -- MPI.Pickle ---------------------------------------------------------------

def test_pickle_settings_and_out_of_band_buffers(GM):
    def facts(M):
        p = M.Pickle()
        out = [p.PROTOCOL == pickle.HIGHEST_PROTOCOL, p.THRESHOLD]
        for threshold in (0, 1000, 10**6):
            p.THRESHOLD = threshold
            data, bufs = p.dumps_oob({"a": np.arange(100.0), "b": np.zeros(10, "u1")})
            back = p.loads_oob(data, bufs)
            out.append((len(bufs), back["a"].sum(), back["b"].shape))
        q = M.Pickle(json.dumps, json.loads)
        out.append((q.PROTOCOL, q.loads(q.dumps([1, "x"]))))
        q.PROTOCOL = 3
        out.append(q.PROTOCOL)
        return out
    both(GM, facts)


@pytest.mark.parametrize("serializer", ["default", "protocol2", "json"])
def test_lower_case_methods_use_mpi_pickle(GM, serializer):
    def facts(M):
        if serializer == "protocol2":
            M.pickle.__init__(pickle.dumps, pickle.loads, 2)
        elif serializer == "json":
            M.pickle.__init__(lambda o: json.dumps(o).encode(),
                              lambda s: json.loads(bytes(s).decode()))
        c = M.COMM_SELF.Dup()       # no message other tests left on COMM_SELF
        try:
            obj = {"k": [1, 2.5, "s"], "t": (1, 2)}
            return [c.sendrecv(obj, 0, 0, None, 0, 0), c.bcast(obj), c.allgather(obj),
                    c.alltoall([obj]), c.scatter([obj]), c.gather(obj),
                    c.allreduce(3), M.pickle.loads(M.pickle.dumps(obj))]
        finally:
            M.pickle.__init__()
            c.Free()
    both(GM, facts)


def test_user_op_pickles_as_its_function(GM):
    def facts(M):
        op = M.Op.Create(max, commute=True)
        back = pickle.loads(pickle.dumps(op))
        out = [type(back) is M.Op, back.Is_commutative()]
        for clone in (M.Op(op), M.Op.fromhandle(op.handle)):
            try:
                pickle.dumps(clone)
                out.append("pickles")
            except ValueError:
                out.append("ValueError")
        out += [ pickle.loads(pickle.dumps(M.SUM)) is M.SUM,
               pickle.loads(pickle.dumps(M.Op(M.SUM))) == M.SUM]
        back.Free()
        op.Free()
        return out
    both(GM, facts)


# -- handles -------------------------------------------------------------------

def test_null_handles(GM):
    def facts(M):
        out = []
        for name in NULLS:
            null = getattr(M, name)
            cls = type(null)
            copy = cls(null)
            out.append((name, bool(null), null == cls(), copy == null, copy is not null,
                        pickle.loads(pickle.dumps(null)) is null,
                        type(pickle.loads(pickle.dumps(copy))) is cls,
                        cls.fromhandle(null.handle) == null,
                        weakref.ref(null)() is null))
            null.free()
            out.append(bool(null))
            for other in NULLS:
                if other != name:
                    out.append(null == getattr(M, other))
        return out
    both(GM, facts)


def test_wrong_handle_types_are_type_errors(GM):
    def facts(M):
        out = []
        for name in NULLS:
            cls = type(getattr(M, name))
            for bad in (1234, "abc", M.DATATYPE_NULL if name != "DATATYPE_NULL" else M.OP_NULL):
                try:
                    cls(bad)
                    out.append("accepted")
                except TypeError:
                    out.append("TypeError")
        return out
    both(GM, facts)


def test_free_of_constants_and_copies(GM):
    def facts(M):
        out = []
        for obj in (M.INT, M.SUM, M.GROUP_EMPTY, M.INFO_ENV, M.COMM_SELF):
            obj.free()
            clone = type(obj)(obj)
            clone.free()
            out.append((bool(obj), bool(clone), clone == obj))
        for obj in (M.Op.Create(lambda a, b, t: None), M.COMM_SELF.Get_group(),
                    M.Info.Create(), M.COMM_SELF.Dup(), M.INT.Dup()):
            obj.free()
            out.append(bool(obj))
        return out
    both(GM, facts)


def test_win_null_refuses_operations(GM):
    with pytest.raises(GM.Exception) as raised:
        GM.WIN_NULL.Fence()
    assert raised.value.Get_error_class() == GM.ERR_WIN


def test_file_handles(GM):
    def facts(M):
        f = M.File.Open(M.COMM_SELF, "/dev/null")
        copy = M.File(f)
        out = [bool(f), copy == f, copy is not f, f != M.FILE_NULL, M.File() == M.FILE_NULL,
               M.File.fromhandle(f.handle) == f, M.File.f2py(f.py2f()) == f,
               pickle.loads(pickle.dumps(M.FILE_NULL)) is M.FILE_NULL,
               f.amode == M.MODE_RDONLY, f.size, f.group_size, f.group_rank, f.atomicity,
               f.Get_view()[0], f.Get_view()[3], f.Get_type_extent(M.INT),
               f.Get_byte_offset(3), f.Get_errhandler() == M.ERRORS_RETURN]
        try:
            pickle.dumps(f)
        except ValueError:
            out.append("ValueError")
        for _ in range(2):
            f.free()
            out.append(bool(f))
        return out
    both(GM, facts)


# -- Info ------------------------------------------------------------------------

def test_info_mapping(GM):
    def facts(M):
        out = []
        info = M.Info.Create({"b": "2", "a": "1"})
        info["c"] = "3"
        info.update([("d", "4")], e="5")
        out += [len(info), sorted(info.keys()), sorted(info.values()), info.get("a"),
                info.get("zz", "dflt"), "a" in info, info.pop("b"), info.pop("b", None),
                info.popitem(), sorted(info.items())]
        copy = info.copy()
        out += [copy == info, sorted(copy.items()) == sorted(info.items()),
                M.Info(info) == info, type(pickle.loads(pickle.dumps(info))) is M.Info]
        copy.clear()
        out.append(len(copy))
        for info_ in (info, copy):
            info_.Free()
        out.append(info == M.INFO_NULL)
        null = M.INFO_NULL
        out += [len(null), null.keys(), null.get("k", 1), null.pop("k", 2), null.copy() == null]
        for op in (lambda: null["k"], lambda: null.__setitem__("k", "v"),
                   lambda: null.update([]), lambda: null.popitem()):
            try:
                op()
                out.append("ok")
            except KeyError:
                out.append("KeyError")
        env = M.Info.Create_env()
        out += [bool(env), type(env) is M.Info]
        env.Free()
        return out
    both(GM, facts)


# -- errors ------------------------------------------------------------------------

def test_error_classes_codes_strings(GM):
    def facts(M):
        cls = M.Add_error_class()
        code = M.Add_error_code(cls)
        out = [cls >= M.ERR_LASTCODE, M.Get_error_class(code) == cls,
               M.Get_error_string(code), M.COMM_SELF.Get_attr(M.LASTUSEDCODE) >= cls]
        M.Add_error_string(code, "mine")
        out.append(M.Get_error_string(code))
        for remove in (lambda: M.Remove_error_class(cls), lambda: M.Remove_error_code(code)):
            try:
                remove()
                out.append("removed")
            except M.Exception:
                out.append("refused")
        M.Remove_error_string(code)
        M.Remove_error_code(code)
        M.Remove_error_class(cls)
        exc = M.Exception(code)
        out += [exc.Get_error_code() == code, int(exc) == code]
        e = M.Exception(M.ERR_ARG)
        out += [repr(e), str(e) == M.Get_error_string(M.ERR_ARG), e == M.ERR_ARG,
                hash(e) == hash(M.ERR_ARG), M.Exception(M.SUCCESS) < e, bool(e),
                bool(M.Exception()), M.Exception(-5) == M.ERR_UNKNOWN]
        return out
    both(GM, facts)


# -- subclasses, Status ----------------------------------------------------------------

def test_subclass_built_in_new(GM):
    def facts(M):
        class Mine(M.Intracomm):
            def __new__(cls, comm=None):
                if comm is not None and comm != M.COMM_NULL:
                    comm = comm.Dup()
                return super().__new__(cls, comm)

        mine = Mine(M.COMM_SELF)
        dup, split = mine.Dup(), mine.Split(0, 0)
        out = [type(mine).__name__, mine.Compare(M.COMM_SELF), mine != M.COMM_SELF,
               type(dup).__name__, type(split).__name__, mine.allreduce(2),
               Mine() == M.COMM_NULL]
        for c in (dup, split, mine):
            c.Free()
        return out
    both(GM, facts)


def test_status_memory(GM):
    s = GM.Status()
    s.source, s.tag, s.error = 11, 22, 33
    mem = s.tomemory()
    seq = list(mem)
    for value in (11, 22, 33):
        mem[seq.index(value)] = value * 10
    assert (s.source, s.tag, s.error) == (110, 220, 330)
    assert GM.Status.f2py(s.py2f()) == s
