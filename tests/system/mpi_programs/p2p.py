"""Point-to-point: blocking, Sendrecv(_replace), probes, wildcards, Status,
PROC_NULL, nonblocking requests and their Wait/Test families."""
import numpy as np

from _world import MPI, comm, rank, say, size

right, left = (rank + 1) % size, (rank - 1) % size


def status_fields(st, dtype=MPI.INT):
    return (st.Get_source(), st.Get_tag(), st.Get_count(dtype),
            st.Get_elements(dtype), st.source, st.tag, st.Get_error())


# --- ring exchanges (valid for a world of one too: left == right == self)
send = np.arange(4, dtype="i4") + 10 * rank
recv = np.zeros(4, "i4")
st = MPI.Status()
comm.Sendrecv(send, dest=right, sendtag=5, recvbuf=recv, source=left, recvtag=5, status=st)
say("Sendrecv", recv.tolist(), status_fields(st))

# receive buffer larger than the message: count tells how much arrived
recv = np.full(8, -1, "i4")
comm.Sendrecv(send[:3], dest=right, sendtag=6, recvbuf=recv, source=left, recvtag=MPI.ANY_TAG, status=st)
say("Sendrecv short", recv.tolist(), status_fields(st), st.Get_count(MPI.BYTE))

buf = np.arange(5, dtype="f8") * (rank + 1)
comm.Sendrecv_replace(buf, dest=right, sendtag=7, source=left, recvtag=7, status=st)
say("Sendrecv_replace", buf.tolist(), status_fields(st, MPI.DOUBLE))

got = comm.sendrecv({"from": rank}, dest=right, sendtag=8, source=left, recvtag=8, status=st)
say("sendrecv obj", got, st.Get_source(), st.Get_tag())

# --- PROC_NULL: completes at once, status says so
comm.Send(send, dest=MPI.PROC_NULL, tag=1)
recv = np.full(4, -1, "i4")
comm.Recv(recv, source=MPI.PROC_NULL, tag=1, status=st)
say("PROC_NULL recv", recv.tolist(), st.Get_source() == MPI.PROC_NULL,
    st.Get_tag() == MPI.ANY_TAG, st.Get_count(MPI.INT))
say("PROC_NULL obj", comm.recv(source=MPI.PROC_NULL), comm.sendrecv(1, dest=MPI.PROC_NULL, source=MPI.PROC_NULL))
r = comm.Isend(send, dest=MPI.PROC_NULL)
r.Wait()
say("PROC_NULL Isend done", r == MPI.REQUEST_NULL)
say("PROC_NULL Probe", comm.Iprobe(source=MPI.PROC_NULL, status=st), st.Get_source() == MPI.PROC_NULL)

# --- Iprobe of a tag nobody sends is False
say("Iprobe nothing", comm.Iprobe(source=MPI.ANY_SOURCE, tag=999))
comm.Barrier()

if size >= 2:
    # blocking Send/Recv, Ssend, object send/recv between 0 and 1
    if rank == 0:
        comm.Send(np.arange(6, dtype="i8"), dest=1, tag=11)
        comm.Ssend(np.arange(3, dtype="f4") / 2, dest=1, tag=12)
        comm.send(["hello", 1, 2.5], dest=1, tag=13)
        comm.ssend(("sync", None), dest=1, tag=14)
        comm.Send(np.arange(200_000, dtype="f8"), dest=1, tag=15)  # large: rendezvous
    elif rank == 1:
        a = np.zeros(6, "i8")
        comm.Recv(a, source=0, tag=11, status=st)
        say("Recv", a.tolist(), status_fields(st, MPI.INT64_T))
        b = np.zeros(3, "f4")
        comm.Recv([b, MPI.FLOAT], source=0, tag=12)
        say("Recv Ssend", b.tolist())
        say("recv obj", comm.recv(source=0, tag=13, status=st), st.Get_source(), st.Get_tag())
        say("recv ssend obj", comm.recv(source=0, tag=14))
        c = np.zeros(200_000)
        comm.Recv(c, source=0, tag=15)
        say("Recv large", float(c.sum()), float(c[-1]))
    comm.Barrier()

    # non-overtaking with tags: receive in the opposite order of sending
    if rank == 0:
        reqs = [comm.Isend(np.array([t], "i4"), dest=1, tag=t) for t in (21, 22, 23)]
        MPI.Request.Waitall(reqs)
        say("tagged Isends done", all(r == MPI.REQUEST_NULL for r in reqs))
    elif rank == 1:
        for t in (23, 21, 22):
            x = np.zeros(1, "i4")
            comm.Recv(x, source=0, tag=t)
            say("tag order", t, int(x[0]))
    # same tag: messages arrive in sending order
    if rank == 0:
        for i in range(5):
            comm.send(i, dest=1, tag=30)
    elif rank == 1:
        say("same-tag order", [comm.recv(source=0, tag=30) for _ in range(5)])
    comm.Barrier()

    # Probe with wildcards, then receive into a buffer sized from the status
    if rank == 0:
        for _ in range(1, size):
            st = MPI.Status()
            comm.Probe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
            n = st.Get_count(MPI.DOUBLE)
            buf = np.zeros(n)
            comm.Recv(buf, source=st.Get_source(), tag=st.Get_tag())
            say("probed", st.Get_source(), st.Get_tag(), n, buf.tolist())
    else:
        comm.Send(np.arange(rank, dtype="f8") + rank, dest=0, tag=40 + rank)
    comm.Barrier()

    # Iprobe until the message is there; probe object messages by tag
    if rank == 0:
        st = MPI.Status()
        while not comm.Iprobe(source=1, tag=141, status=st):
            pass
        say("Iprobe", st.Get_source(), st.Get_tag())
        say("probe then recv", comm.recv(source=1, tag=141).tolist())
        comm.Probe(source=1, tag=142)
        say("probe obj", comm.recv(source=1, tag=142))
    elif rank == 1:
        comm.send(np.array([1.0, 2.0]), dest=0, tag=141)
        comm.send("after probe", dest=0, tag=142)
    comm.Barrier()

    # ANY_SOURCE / ANY_TAG receives (arrival order varies; sorted output hides it)
    if rank == 0:
        for _ in range(size - 1):
            st = MPI.Status()
            x = np.zeros(2, "i4")
            comm.Recv(x, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
            say("any-source", x.tolist(), st.Get_source(), st.Get_tag())
    else:
        comm.Send(np.array([rank, rank * rank], "i4"), dest=0, tag=50 + rank)
    comm.Barrier()
    if rank == 0:
        for _ in range(size - 1):
            st = MPI.Status()
            obj = comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
            say("any-source obj", obj, st.Get_source(), st.Get_tag())
    else:
        comm.send({"r": rank}, dest=0, tag=60 + rank)
    comm.Barrier()

# --- nonblocking: Isend/Irecv around the ring
sends, recvs, bufs = [], [], []
for k in range(3):
    b = np.zeros(3, "i4")
    bufs.append(b)
    recvs.append(comm.Irecv(b, source=left, tag=70 + k))
for k in range(3):
    sends.append(comm.Isend(np.array([rank, k, 7], "i4"), dest=right, tag=70 + k))
statuses = [MPI.Status() for _ in recvs]
MPI.Request.Waitall(recvs, statuses)
MPI.Request.Waitall(sends)
say("Waitall", [b.tolist() for b in bufs], [(s.Get_source(), s.Get_tag()) for s in statuses])

# Testall loop
b = np.zeros(2, "f8")
reqs = [comm.Irecv(b, source=left, tag=80), comm.Isend(np.array([rank, 0.5]), dest=right, tag=80)]
while not MPI.Request.Testall(reqs):
    pass
say("Testall", b.tolist())

# Waitany: every index comes out exactly once
bufs = [np.zeros(1, "i4") for _ in range(3)]
reqs = [comm.Irecv(bufs[k], source=left, tag=90 + k) for k in range(3)]
sreqs = [comm.Isend(np.array([100 * rank + k], "i4"), dest=right, tag=90 + k) for k in range(3)]
seen = []
for _ in range(3):
    st = MPI.Status()
    idx = MPI.Request.Waitany(reqs, st)
    seen.append(idx)
say("Waitany", sorted(seen), [int(b[0]) for b in bufs])
say("Waitany all null", MPI.Request.Waitany(reqs) == MPI.UNDEFINED)
MPI.Request.Waitall(sreqs)

# Testany
b = np.zeros(1, "i4")
reqs = [comm.Irecv(b, source=left, tag=95)]
s = comm.Isend(np.array([rank], "i4"), dest=right, tag=95)
while True:
    idx, flag = MPI.Request.Testany(reqs)
    if flag:
        break
s.Wait()
say("Testany", idx, int(b[0]))

# Waitsome until all done
bufs = [np.zeros(1, "i4") for _ in range(4)]
reqs = [comm.Irecv(bufs[k], source=left, tag=100 + k) for k in range(4)]
sreqs = [comm.Isend(np.array([k * 3 + rank], "i4"), dest=right, tag=100 + k) for k in range(4)]
done = []
while len(done) < 4:
    idxs = MPI.Request.Waitsome(reqs)
    done.extend(idxs)
say("Waitsome", sorted(done), [int(b[0]) for b in bufs])
MPI.Request.Waitall(sreqs)

# Request.Test / Get_status on a single request
b = np.zeros(2, "i4")
r = comm.Irecv(b, source=left, tag=110)
s = comm.Isend(np.array([rank, -rank], "i4"), dest=right, tag=110)
st = MPI.Status()
while not r.Test(st):
    pass
s.Wait()
say("Test", b.tolist(), st.Get_source(), st.Get_tag(), st.Get_count(MPI.INT))

# lower-case isend/irecv with wait/test
r = comm.irecv(source=left, tag=120)
s = comm.isend({"k": rank, "v": [rank] * 2}, dest=right, tag=120)
say("irecv wait", r.wait())
say("isend wait", s.wait())
r = comm.irecv(source=left, tag=121)
s = comm.isend(("t", rank), dest=right, tag=121)
while True:
    flag, obj = r.test()
    if flag:
        break
say("irecv test", obj)
s.wait()
reqs = [comm.irecv(source=left, tag=130 + k) for k in range(3)]
sreqs = [comm.isend(k * 10 + rank, dest=right, tag=130 + k) for k in range(3)]
say("waitall objs", MPI.Request.waitall(reqs))
MPI.Request.waitall(sreqs)
say("done")
