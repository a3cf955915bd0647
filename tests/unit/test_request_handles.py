"""Request handles (handle/fromhandle, toint/fromint, py2f/f2py, copies) and
generalized requests (Grequest), with mpi4py's semantics, in one process."""

import io
import sys
import threading

import pytest

from gloocy import MPI


def _send_init():
    return MPI.COMM_SELF.Send_init(b"", MPI.PROC_NULL, 0)


@pytest.mark.parametrize("cls", [MPI.Request, MPI.Prequest, MPI.Grequest])
def test_null_handle_round_trip(cls):
    null = cls(MPI.REQUEST_NULL)
    assert type(null) is cls and not null and null == MPI.REQUEST_NULL
    assert null.handle == 0 and null.toint() == 0 and null.py2f() == 0
    back = cls.fromhandle(0)
    assert type(back) is cls and back == null
    with pytest.raises(AttributeError):
        null.handle = 1
    with pytest.raises(AttributeError):
        del null.handle


def test_prequest_handles_name_the_same_operation():
    preq = _send_init()
    for dupe in (MPI.Prequest(preq), MPI.Prequest.fromhandle(preq.handle),
                 MPI.Prequest.fromint(preq.toint()), MPI.Prequest.f2py(preq.py2f())):
        assert type(dupe) is MPI.Prequest and dupe == preq
    plain = MPI.Request(preq)
    assert type(plain) is MPI.Request and plain == preq
    assert preq.handle == plain.handle != 0
    with pytest.raises(TypeError):
        MPI.Grequest(preq)
    dupe = MPI.Prequest(preq)
    dupe.Start()                    # started through one handle...
    preq.Wait()                     # ...completed through the other
    dupe.Free()
    assert not preq and preq == MPI.REQUEST_NULL


def test_copies_of_a_receive_share_it():
    comm = MPI.COMM_SELF
    recv = comm.irecv(source=0, tag=3)
    copy = MPI.Request.fromhandle(recv.handle)
    assert copy == recv and copy != MPI.REQUEST_NULL
    comm.send({"x": 1}, dest=0, tag=3)
    assert copy.wait() == {"x": 1}
    assert not recv and recv.Test()          # done through the copy
    assert recv.wait() is None               # the object is handed out once


def test_fromhandle_of_a_finished_request_is_an_error():
    req = MPI.COMM_SELF.Isend(b"", MPI.PROC_NULL)
    h = req.handle
    req.Wait()
    assert req.handle == 0
    del req
    with pytest.raises(MPI.Exception):
        MPI.Request.fromhandle(h)


class Ctx:
    completed = False
    cancel_called = free_called = 0

    def query(self, status, source=3, tag=7):
        status.Set_source(source)
        status.Set_tag(tag)

    def free(self, *args, **kwargs):
        self.free_called += 1

    def cancel(self, completed, *args, **kwargs):
        self.cancel_called += 1
        assert completed is self.completed


def test_grequest_callbacks_run_when_mpi_says():
    ctx = Ctx()
    greq = MPI.Grequest.Start(ctx.query, ctx.free, ctx.cancel)
    assert greq and not greq.Test() and not greq.Get_status()
    greq.Cancel()
    assert ctx.cancel_called == 1 and ctx.free_called == 0
    greq.Complete()
    ctx.completed = True
    greq.Cancel()
    assert ctx.cancel_called == 2
    status = MPI.Status()
    assert greq.Get_status(status) and greq            # not freed by a look
    assert ctx.free_called == 0
    assert greq.Test(status)
    assert (status.Get_source(), status.Get_tag(), status.Get_error()) == (3, 7, 0)
    assert not status.Is_cancelled()
    assert ctx.free_called == 1 and not greq
    greq.Wait()
    assert ctx.free_called == 1


def test_grequest_args_and_kwargs_reach_every_callback():
    seen = []
    greq = MPI.Grequest.Start(
        lambda status, *a, **k: seen.append(("query", a, k)),
        lambda *a, **k: seen.append(("free", a, k)),
        lambda done, *a, **k: seen.append(("cancel", done, a, k)),
        args=[1, 2], kwargs={"k": 3})
    greq.Cancel()
    greq.Complete()
    greq.Wait()
    assert seen == [("cancel", False, (1, 2), {"k": 3}),
                    ("query", (1, 2), {"k": 3}), ("free", (1, 2), {"k": 3})]


def test_grequest_without_callbacks_has_an_empty_status():
    greq = MPI.Grequest.Start()
    greq.cancel()
    greq.complete(42)
    status = MPI.Status()
    assert greq.wait(status) == 42
    assert (status.source, status.tag, status.error) == (MPI.ANY_SOURCE, MPI.ANY_TAG, 0)
    assert status.Get_count(MPI.BYTE) == 0
    assert greq.test() == (True, None)


def test_grequest_completed_from_another_thread():
    greq = MPI.Grequest.Start()
    t = threading.Timer(0.05, greq.complete, args=("done",))
    t.start()
    assert greq.wait() == "done"
    t.join()


def test_grequest_free_before_complete_frees_at_complete():
    ctx = Ctx()
    greq = MPI.Grequest.Start(None, ctx.free)
    keep = MPI.Grequest(greq)
    greq.Free()
    assert ctx.free_called == 0 and not greq
    keep.Complete()
    assert ctx.free_called == 1


@pytest.mark.parametrize("fails", ["query", "free", "cancel"])
@pytest.mark.parametrize("error", [MPI.Exception(MPI.ERR_BUFFER), ValueError(42)])
def test_grequest_callback_errors_become_mpi_exceptions(fails, error, monkeypatch):
    def boom(*args):
        raise error
    ctx = Ctx()
    fns = {"query": ctx.query, "free": ctx.free, "cancel": ctx.cancel}
    fns[fails] = boom
    greq = MPI.Grequest.Start(fns["query"], fns["free"], fns["cancel"])
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    if fails == "cancel":
        with pytest.raises(MPI.Exception) as info:
            greq.Cancel()
        greq.Complete()
        greq.Wait()
    else:
        greq.Complete()
        with pytest.raises(MPI.Exception) as info:
            greq.Wait()
        assert not greq                 # over, and freed
    expected = MPI.ERR_BUFFER if isinstance(error, MPI.Exception) else MPI.ERR_OTHER
    assert info.value.Get_error_class() == expected
    assert stderr.getvalue().startswith("Traceback (most recent call last):\n")
    assert type(error).__name__ in stderr.getvalue()


def test_grequest_in_the_multi_request_functions():
    greqs = [MPI.Grequest.Start() for _ in range(3)]
    assert MPI.Request.Testall(greqs) is False
    greqs[1].complete("b")
    assert MPI.Request.waitany(greqs) == (1, "b")
    for g in greqs:
        if g:
            g.Complete()
    assert MPI.Request.Waitall(greqs)
    assert not any(greqs)
