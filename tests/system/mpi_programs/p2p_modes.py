"""Send modes and threads: Ssend completes only once its receive is posted
(ordered through a barrier on another communicator), matched probes, a
threaded Sendrecv, a send to ourselves from another thread, buffered sends
and a partitioned transfer."""
import threading
import time
import numpy as np

from _world import MPI, comm, rank, say, size

right, left = (rank + 1) % size, (rank - 1) % size
other = comm.Dup()


# --- Issend: not done before the receiver posts its receive
if size > 1:
    if rank == 0:
        req = comm.Issend(np.arange(2000, dtype="i4"), 1, 5)
        early = False
        for _ in range(20):
            early |= req.Test()
            time.sleep(0.01)
        say("Issend done before the receive:", early)
        other.Barrier()
        req.Wait()
        say("Issend done after")
    else:
        other.Barrier()
        if rank == 1:
            buf = np.zeros(2000, "i4")
            comm.Recv(buf, 0, 5)
            say("received", int(buf.sum()))

# --- Ssend around a ring, receives posted first
buf = np.zeros(3, "i4")
req = comm.Irecv(buf, left, 6)
comm.Ssend(np.arange(3, dtype="i4") + 10 * rank, right, 6)
req.Wait()
say("Ssend ring", buf.tolist())

# --- matched probe
sent = np.arange(rank + 1, dtype="f8")
req = comm.Isend(sent, right, 7)
st = MPI.Status()
msg = comm.Mprobe(left, 7, st)
buf = np.zeros(st.Get_count(MPI.DOUBLE), "f8")
msg.Recv(buf)
req.Wait()
say("Mprobe", st.Get_source(), st.Get_tag(), buf.tolist(), bool(msg))
req = comm.isend({"from": rank}, right, 8)
m = None
while m is None:
    m = comm.improbe(left, 8)
say("improbe", m.recv())
req.wait()

# --- threads: Sendrecv in several threads at once, each with its own tag
results = {}


def ring(j):
    out = np.zeros(4, "i8")
    comm.Sendrecv(np.arange(4, dtype="i8") + 100 * rank + j, right, 20 + j,
                  out, left, 20 + j)
    results[j] = out.tolist()


threads = [threading.Thread(target=ring, args=(j,)) for j in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
say("threaded Sendrecv", [results[j] for j in range(3)])

# --- a send to ourselves from another thread
got = np.zeros(5, "i4")
t = threading.Thread(target=lambda: comm.Send(np.arange(5, dtype="i4") * rank, rank, 9))
recv_thread = threading.Thread(target=lambda: comm.Recv(got, rank, 9))
recv_thread.start()
t.start()
t.join()
recv_thread.join()
say("self from thread", got.tolist())

# --- buffered sends
mem = bytearray(2 * (5 * 8 + MPI.BSEND_OVERHEAD))
MPI.Attach_buffer(mem)
comm.Bsend(np.arange(5, dtype="i8") + rank, right, 10)
comm.Ibsend(np.arange(5, dtype="i8") - rank, right, 11).Wait()
a, b = np.zeros(5, "i8"), np.zeros(5, "i8")
comm.Recv(a, left, 10)
comm.Recv(b, left, 11)
say("Bsend", a.tolist(), b.tolist())
back = MPI.Detach_buffer()      # waits until they have gone (received)
say("detached the same buffer", back is mem or bytes(back) == bytes(mem))

# --- partitioned
parts = 4
sbuf = np.zeros(parts * 3, "i4")
rbuf = np.full(parts * 3, -1, "i4")
sreq = comm.Psend_init(sbuf, parts, right, 12)
rreq = comm.Precv_init(rbuf, parts, left, 12)
rreq.Start()
sreq.Start()
for p in (2, 0, 3, 1):
    sbuf[3 * p:3 * p + 3] = 1000 * rank + p
    sreq.Pready(p)
MPI.Request.Waitall([sreq, rreq])
say("partitioned", rbuf.tolist())
sreq.Free()
rreq.Free()

other.Free()
comm.Barrier()
say("done")
