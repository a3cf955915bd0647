"""MPI-4 sessions: process sets, their groups, error handlers, handles."""

import pickle

import numpy as np
import pytest

from gloocy import MPI


def test_process_sets_and_their_groups():
    s = MPI.Session.Init()
    names = [s.Get_nth_pset(i) for i in range(s.Get_num_psets())]
    assert names == ["mpi://WORLD", "mpi://SELF"]
    world = s.Create_group("mpi://WORLD")
    assert world.Get_size() == MPI.COMM_WORLD.Get_size()
    assert s.Create_group("mpi://SELF").Get_size() == 1
    assert s.Get_pset_info("mpi://WORLD").Get("mpi_size") == str(world.size)
    comm = MPI.Intracomm.Create_from_group(world)
    assert comm.allreduce(1) == world.size
    comm.Free()
    with pytest.raises(MPI.Exception):
        s.Create_group("mpi://NOWHERE")
    s.Finalize()
    assert not s and s == MPI.SESSION_NULL
    with pytest.raises(MPI.Exception):
        s.Get_num_psets()


def test_error_handlers_run_on_the_session():
    seen = []
    eh = MPI.Session.Create_errhandler(lambda obj, code: seen.append((obj, code)))
    s = MPI.Session.Init(errhandler=eh)
    assert s.Get_errhandler() == eh
    s.Call_errhandler(MPI.ERR_OTHER)
    assert seen == [(s, MPI.ERR_OTHER)]
    s.Set_errhandler(MPI.ERRORS_RETURN)
    s.Call_errhandler(MPI.ERR_OTHER)
    assert len(seen) == 1
    eh.Free()
    s.Finalize()


def test_handles_and_pickling():
    s = MPI.Session.Init()
    assert MPI.Session.fromhandle(s.handle) == s and s.handle != 0
    assert MPI.Session(s) == s and MPI.Session() == MPI.SESSION_NULL
    assert pickle.loads(pickle.dumps(MPI.SESSION_NULL)) is MPI.SESSION_NULL
    with pytest.raises(ValueError):
        pickle.dumps(s)
    s.free()
    assert not s


def test_a_sessions_buffer_serves_its_communicators_buffered_sends():
    s = MPI.Session.Init()
    group = MPI.Group.Create_from_session_pset(s, "mpi://SELF")
    assert group.Get_size() == 1
    comm = MPI.Intracomm.Create_from_group(group)
    data = np.arange(1000, dtype=np.uint8)
    with pytest.raises(MPI.Exception) as e:          # no buffer anywhere yet
        comm.Bsend(data, dest=0)
    assert e.value.Get_error_class() == MPI.ERR_BUFFER
    room = bytearray(data.nbytes + MPI.BSEND_OVERHEAD)
    s.Attach_buffer(room)
    with pytest.raises(MPI.Exception) as e:          # more than the room
        comm.Bsend(np.zeros(data.nbytes + 1, np.uint8), dest=0)
    assert e.value.Get_error_class() == MPI.ERR_BUFFER
    comm.Bsend(data, dest=0)
    out = np.empty_like(data)
    comm.Recv(out, source=0)
    assert (out == data).all()
    s.Flush_buffer()
    s.Iflush_buffer().Wait()
    assert s.Detach_buffer() is room
    with pytest.raises(MPI.Exception):
        s.Detach_buffer()
    with pytest.raises(MPI.Exception) as e:          # the world's: no buffer
        MPI.COMM_SELF.Bsend(data, dest=0)
    assert e.value.Get_error_class() == MPI.ERR_BUFFER
    comm.Free()
    s.Finalize()
