"""Attribute caching (keyvals) on communicators, against mpi4py on MPICH:
the same scenario runs on a gloocy communicator of one rank and on
mpi4py's COMM_SELF.Dup(), and both must log the same events."""

import pytest

from gloocy import _core, attributes
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
    for k in keys:
        log.append(("freed", cls.Free_keyval(k) == invalid))
    comm.Free()                                   # the rest go
    return log


@needs_mpi4py
def test_attribute_events_match_mpi4py():
    ours = scenario(gloocy_comm(), Intracomm, KEYVAL_INVALID)
    theirs = scenario(MPI.COMM_SELF.Dup(), MPI.Comm, MPI.KEYVAL_INVALID)
    assert ours == theirs


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
