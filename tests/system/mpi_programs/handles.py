"""Request and Status as Python objects: subclasses, copies, equality,
pickles, and what a finished request turns into."""
import pickle
import numpy as np

from _world import MPI, comm, rank, say, size

right, left = (rank + 1) % size, (rank - 1) % size


def fields(st):
    return (st.source, st.tag, st.error, st.Get_count(), st.cancelled)


# --- Status: defaults, copies, equality, pickles
st = MPI.Status()
say("Status()", fields(st), st.Get_source() == MPI.ANY_SOURCE, st.Get_tag() == MPI.ANY_TAG)
st.source, st.tag, st.error = 3, 7, 0
st.Set_elements(MPI.INT, 5)
copy = MPI.Status(st)
say("copy", fields(copy), copy == st, copy != st, copy is st, type(copy).__name__)
copy.tag = 8
say("copy is its own", st.tag, copy.tag, copy == st)
back = pickle.loads(pickle.dumps(st))
say("pickled Status", fields(back), back == st, type(back).__name__)
try:
    MPI.Status(1)
except TypeError:
    say("Status(1): TypeError")
try:
    st.source = "x"
except TypeError:
    say("Status.source = 'x': TypeError")
try:
    hash(st)
except TypeError:
    say("Status: unhashable")


class MyStatus(MPI.Status):
    def where(self):
        return (self.source, self.tag)


mine = MyStatus()
mine.mark = "extra"              # a Python subclass has a __dict__
say("MyStatus", isinstance(mine, MPI.Status), mine.where(), mine.mark)
buf = np.zeros(4, "i4")
comm.Sendrecv(np.arange(3, dtype="i4"), right, 4, buf, left, 4, status=mine)
say("MyStatus filled", mine.where() == (left, 4), mine.Get_count(MPI.INT), buf.tolist())
say("MyStatus copy", type(MPI.Status(mine)).__name__, MPI.Status(mine) == mine)


# --- Request: the null one, subclasses, what a finished request becomes
class MyRequest(MPI.Request):
    def label(self):
        return "mine"


null = MyRequest()
say("MyRequest()", null == MPI.REQUEST_NULL, bool(null), null.label(), isinstance(null, MPI.Request))
say("REQUEST_NULL", bool(MPI.REQUEST_NULL), MPI.Request() == MPI.REQUEST_NULL,
    MPI.Request() != MPI.REQUEST_NULL)
back = pickle.loads(pickle.dumps(MPI.REQUEST_NULL))
say("pickled REQUEST_NULL", back == MPI.REQUEST_NULL, back is MPI.REQUEST_NULL)

st = MPI.Status()
say("Wait on null", MPI.REQUEST_NULL.Wait(st), st.Get_source() == MPI.ANY_SOURCE,
    st.Get_tag() == MPI.ANY_TAG, st.Get_count())
say("Test on null", MPI.REQUEST_NULL.Test(), MPI.REQUEST_NULL.wait(), MPI.REQUEST_NULL.test())

out = np.full(2, -1, "i4")
reqs = [comm.Irecv(out, left, 9), comm.Isend(np.array([rank, 9], "i4"), right, 9)]
say("active", [bool(r) for r in reqs], [r == MPI.REQUEST_NULL for r in reqs],
    reqs[0] != reqs[1])
sts = [MPI.Status(), MPI.Status()]
say("Waitall", MPI.Request.Waitall(reqs, sts), out.tolist(),
    sts[0].Get_source() == left, sts[0].Get_tag(), sts[0].Get_count(MPI.INT))
say("done", [bool(r) for r in reqs], [r == MPI.REQUEST_NULL for r in reqs])
say("again", MPI.Request.Waitall(reqs), MPI.Request.Testall(reqs),
    MPI.Request.Waitany(reqs) == MPI.UNDEFINED, MPI.Request.Testsome(reqs))

r = comm.isend({"n": rank}, right, 10)
got = comm.recv(source=left, tag=10, status=st)
say("isend/recv", got, r.wait(), bool(r), st.Get_source() == left, st.Get_tag())
r = comm.irecv(source=left, tag=11)
s = comm.isend([rank] * 3, right, 11)
say("irecv", r.wait(st), s.test(), st.Get_source() == left, st.Get_tag(), bool(r))

# persistent requests: inactive, not null, until freed
buf = np.zeros(1, "i4")
rr = comm.Recv_init(buf, left, 12)
sr = comm.Send_init(np.array([rank + 100], "i4"), right, 12)
say("Prequest", type(rr).__name__, rr == MPI.REQUEST_NULL, isinstance(rr, MPI.Request))
for i in range(2):
    MPI.Prequest.Startall([rr, sr])
    MPI.Request.Waitall([rr, sr])
    say("Prequest round", i, buf.tolist(), rr == MPI.REQUEST_NULL)
rr.Free()
sr.Free()
say("Prequest freed", rr == MPI.REQUEST_NULL, sr == MPI.REQUEST_NULL)


# --- subclasses built from an existing request, as mpi4py's own tests do
class CopyRequest(MPI.Request):
    def __new__(cls, request=None):
        return super().__new__(cls, request)

    def test(self):
        return super(type(self), self).Test()

    def wait(self):
        return super(type(self), self).Wait()


class CopyPrequest(MPI.Prequest):
    def __new__(cls, request=None):
        return super().__new__(cls, request)

    def start(self):
        return super(type(self), self).Start()

    def test(self):
        return super(type(self), self).Test()

    def wait(self):
        return super(type(self), self).Wait()


for kind, base in ((CopyRequest, MPI.Request), (CopyPrequest, MPI.Prequest)):
    r = kind(MPI.REQUEST_NULL)
    say("from REQUEST_NULL", kind.__name__, type(r) is not base, isinstance(r, base),
        r.test(), r == MPI.REQUEST_NULL)
self_comm = MPI.COMM_SELF
r = CopyRequest(self_comm.Isend(np.zeros(1), dest=MPI.PROC_NULL, tag=0))
say("copy of an Isend", bool(r), r.test(), bool(r))
p = CopyPrequest(self_comm.Send_init(np.zeros(1), dest=MPI.PROC_NULL, tag=0))
for i in range(3):
    p.start()
    p.test()
    p.start()
    say("copy of a Send_init", i, p.wait(), p == MPI.REQUEST_NULL)
p.Free()
say("copy freed", p == MPI.REQUEST_NULL)
out = np.zeros(1)
s = comm.Isend(np.array([rank + 0.5]), right, 13)
r = CopyRequest(comm.Irecv(out, left, 13))
say("copy of an Irecv", bool(r), r.Wait(st), out.tolist() == [left + 0.5],
    st.Get_source() == left, st.Get_tag(), bool(r), s.Wait())
try:
    MPI.Request(1)
except TypeError:
    say("Request(1): TypeError")
comm.Barrier()
