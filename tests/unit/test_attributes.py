"""Attribute caching (keyvals) on communicators and datatypes, against
mpi4py on MPICH: the same scenario runs on a gloocy communicator of one rank
(a gloocy datatype) and on mpi4py's COMM_SELF.Dup() (MPI.INT.Dup()), and both
must log the same events."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from gloocy import _core, attributes, datatypes
from gloocy.communicator import Intracomm
from gloocy.constants import KEYVAL_INVALID
from gloocy.errors import ERR_KEYVAL, ERR_OTHER, GloocyError
from peers import MPI as INSTALL_MPI

try:
    from mpi4py import MPI
except ImportError:
    MPI = None

needs_mpi4py = pytest.mark.skipif(MPI is None, reason="no oracle to compare with: "
                                  f"needs {INSTALL_MPI}")


def gloocy_comm():
    return Intracomm(_core.Context(0, 1, [None]))


def scenario(comm, cls, invalid):
    """What happens to values under keys with every kind of copy_fn, through
    Dup, Set_attr over a value, Delete_attr and Free; as a list of events."""
    log = []

    def copy_fn(o, k, v):
        log.append(("copy", v))
        return v * 10 if v != 3 else NotImplemented

    def delete_fn(o, k, v):
        log.append(("delete", v))

    keys = [cls.Create_keyval(copy, delete_fn)
            for copy in (None, False, True, copy_fn)]
    log.append(("distinct", len(set(keys)) == 4, KEYVAL_INVALID not in keys))
    for i, k in enumerate(keys):
        log.append(("unset", comm.Get_attr(k)))
        comm.Set_attr(k, i)
    value = [1, 2]
    comm.Set_attr(keys[2], value)                 # over 2: deleted
    log.append(("same object", comm.Get_attr(keys[2]) is value))
    dup = comm.Dup()
    log.append(("dup", [dup.Get_attr(k) for k in keys]))
    log.append(("dup shares", dup.Get_attr(keys[2]) is value))
    dup.Free()                                    # deletes what it holds
    comm.Set_attr(keys[3], 3)                     # copy_fn: NotImplemented
    dup = comm.Dup()
    log.append(("not copied", dup.Get_attr(keys[3])))
    dup.Free()
    comm.Delete_attr(keys[0])
    comm.Delete_attr(keys[0])                     # nothing there: no error
    log.append(("deleted", comm.Get_attr(keys[0])))
    at = len(log)
    comm.Free()                                   # the rest go, in an order
    log[at:] = sorted(log[at:], key=repr)         # MPI leaves open
    for k in keys:
        log.append(("freed", cls.Free_keyval(k) == invalid))
    return log


def mpi4py_scenario(obj, cls):
    """scenario() on mpi4py, in a fresh process: MPICH hands freed keyvals
    out again, and mpi4py's callbacks of an earlier run then get in the way."""
    here = Path(__file__).parent
    code = (f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]\n"
            "from mpi4py import MPI\nfrom test_attributes import scenario\n"
            f"print(repr(scenario({obj}, {cls}, MPI.KEYVAL_INVALID)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return ast.literal_eval(out.strip().splitlines()[-1])


@needs_mpi4py
def test_attribute_events_match_mpi4py():
    ours = scenario(gloocy_comm(), Intracomm, KEYVAL_INVALID)
    assert ours == mpi4py_scenario("MPI.COMM_SELF.Dup()", "MPI.Comm")


@needs_mpi4py
def test_datatype_attribute_events_match_mpi4py():
    ours = scenario(datatypes.INT32_T.Dup(), datatypes.Datatype, KEYVAL_INVALID)
    assert ours == mpi4py_scenario("MPI.INT.Dup()", "MPI.Datatype")


@needs_mpi4py
def test_callback_errors_are_err_other_like_mpi4py(capfd):
    def raising(o, k, v):
        raise ValueError("no")

    got = []
    for comm, cls in ((gloocy_comm(), Intracomm), (MPI.COMM_SELF.Dup(), MPI.Comm)):
        k = cls.Create_keyval(None, raising)
        comm.Set_attr(k, 1)
        with pytest.raises(Exception) as info:
            comm.Delete_attr(k)
        got.append(info.value.Get_error_class())
        cls.Free_keyval(k)
        comm.Free()
    assert got == [ERR_OTHER, MPI.ERR_OTHER]
    assert "ValueError" in capfd.readouterr().err


def test_unknown_keyval_is_err_keyval():
    comm = gloocy_comm()
    with pytest.raises(GloocyError) as info:
        comm.Set_attr(12345, 1)
    assert info.value.Get_error_class() == ERR_KEYVAL and "12345" in str(info.value)
    with pytest.raises(TypeError, match="copy_fn"):
        attributes.create_keyval(copy_fn=42)
    comm.Free()


def test_second_handle_shares_attributes():
    comm = gloocy_comm()
    k = Intracomm.Create_keyval()
    comm.Set_attr(k, "x")
    assert Intracomm(comm).Get_attr(k) == "x"
    Intracomm(comm).Set_attr(k, "y")
    assert comm.Get_attr(k) == "y"
    Intracomm.Free_keyval(k)
    comm.Free()
