"""Error handlers on communicators, against mpi4py on MPICH: the same
scenario runs on a gloocy communicator of one rank and on mpi4py's
COMM_SELF.Dup(), and both must log the same events."""

import pickle

import pytest

from gloocy import _core, errhandler
from gloocy.communicator import Intracomm
from gloocy.errors import ERR_ERRHANDLER, ERR_OTHER, GloocyError
from peers import MPI as INSTALL_MPI

try:
    from mpi4py import MPI
except ImportError:
    MPI = None

needs_mpi4py = pytest.mark.skipif(MPI is None, reason="no oracle to compare with: "
                                  f"needs {INSTALL_MPI}")


def scenario(M, comm):
    log = []
    log.append(("default is ERRORS_RETURN", comm.Get_errhandler() == M.ERRORS_RETURN))
    eh = type(comm).Create_errhandler(lambda c, code: log.append(("called", c == comm, code)))
    log.append(("live", bool(eh), eh != M.ERRHANDLER_NULL))
    comm.Set_errhandler(eh)
    comm.Call_errhandler(M.ERR_OTHER)
    comm.Call_errhandler(M.SUCCESS)
    got = comm.Get_errhandler()
    log.append(("a new equal handle", got == eh, got is not eh))
    got.Free()
    log.append(("freed handle is null", got == M.ERRHANDLER_NULL))
    log.append(("comm keeps it", comm.Get_errhandler() == eh))
    dup = comm.Dup()
    log.append(("Dup has mpi4py's ERRORS_RETURN", dup.Get_errhandler() == M.ERRORS_RETURN))
    dup.Free()
    log.append(("by int", type(eh).fromint(eh.toint()) == eh, type(eh).f2py(eh.py2f()) == eh))
    for predefined in (M.ERRORS_RETURN, M.ERRORS_ARE_FATAL, M.ERRORS_ABORT):
        log.append(("pickle", pickle.loads(pickle.dumps(predefined)) is predefined,
                    pickle.loads(pickle.dumps(type(eh)(predefined))) == predefined))
    with pytest.raises(ValueError):
        eh.__reduce__()
    comm.Set_errhandler(M.ERRORS_RETURN)
    comm.Call_errhandler(M.ERR_OTHER)                # returns: nothing happens
    eh.Free()
    log.append(("Free", eh == M.ERRHANDLER_NULL, bool(M.Errhandler())))
    comm.Free()
    return log


@needs_mpi4py
def test_errhandler_events_match_mpi4py():
    ours = scenario(_GloocyMPI, Intracomm(_core.Context(0, 1, [None])))
    theirs = scenario(MPI, MPI.COMM_SELF.Dup())
    assert ours == theirs


class _GloocyMPI:
    """The names the scenario uses, from gloocy's modules (importing
    gloocy.MPI would join a job)."""
    ERRORS_RETURN = errhandler.ERRORS_RETURN
    ERRORS_ARE_FATAL = errhandler.ERRORS_ARE_FATAL
    ERRORS_ABORT = errhandler.ERRORS_ABORT
    ERRHANDLER_NULL = errhandler.ERRHANDLER_NULL
    Errhandler = errhandler.Errhandler
    ERR_OTHER = ERR_OTHER
    SUCCESS = 0


def test_null_cannot_be_set_and_slots_run_out():
    comm = Intracomm(_core.Context(0, 1, [None]))
    with pytest.raises(GloocyError) as info:
        comm.Set_errhandler(errhandler.ERRHANDLER_NULL)
    assert info.value.Get_error_class() == ERR_ERRHANDLER
    with pytest.raises(TypeError, match="errhandler"):
        comm.Set_errhandler("ERRORS_RETURN")
    made = [Intracomm.Create_errhandler(lambda c, e: None)
            for _ in range(errhandler.MAX_USER_HANDLERS - len(errhandler._user))]
    with pytest.raises(RuntimeError, match="Free some"):
        Intracomm.Create_errhandler(lambda c, e: None)
    made.pop().Free()
    made.append(Intracomm.Create_errhandler(lambda c, e: None))   # a slot again
    for eh in made:
        eh.Free()
    comm.Free()
