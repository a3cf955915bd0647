"""Point-to-point and nonblocking operations on real processes (world sizes
1-5), over shared memory, TCP and a mix of both (TRANSPORTS).

Every message's contents follow from (source, dest, tag), so the test process
checks what each rank received -- data, Status source/tag/count -- in closed
form; nonblocking collectives are checked against NumPy. Each rank function
consumes every message it causes to be sent, so the cached worlds stay clean
for the next test (a stray message would change what an ANY_SOURCE receive or
an Iprobe sees later). Calls that spoil a communicator (a receive that fails,
a probe that times out) run in worlds of their own, closed at the end.
"""

import pickle
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gloocy
from gloocy import ANY_SOURCE, ANY_TAG, IN_PLACE, PROC_NULL, Status

from gloocy.testing.processes import ProcessWorld
from conftest import TRANSPORT_ENV

TRANSPORTS = ("shm", "tcp", "mix")      # every test runs over each
BACKEND = "threads"     # ranks as threads (the mixed world stays processes)
SIZES = [1, 2, 3, 4, 5]
MULTI = [2, 3, 4, 5]            # tests that need a peer
I8 = np.dtype(np.int64)


def message(src, dst, tag):
    """The int64 message rank `src` sends rank `dst` with `tag`."""
    count = 1 + (src + 2 * dst + tag) % 7
    return np.arange(count, dtype=np.int64) + 1000 * src + 100 * dst + tag


def got(status, buf):
    """(source, tag, count in bytes, the received int64 values)."""
    n = status.Get_count()
    data = memoryview(buf).cast("B")[:n].tobytes()
    return (status.Get_source(), status.Get_tag(), n,
            np.frombuffer(data, np.int64).tolist())


# -- rank-side functions ------------------------------------------------------------

def r_tags_out_of_order(comm, tags):
    """Send every rank (ourselves too) one message per tag, then receive from
    every rank in reverse tag order: matching is by tag, not arrival."""
    for dst in range(comm.size):
        for tag in tags:
            comm.Send(message(comm.rank, dst, tag), dst, tag)
    out = {}
    for src in range(comm.size):
        for tag in reversed(tags):
            buf = np.full(64, -1, np.int64)        # larger than any message
            st = Status()
            comm.Recv(buf, src, tag, st)
            out[src, tag] = got(st, buf) + (st.Get_count(I8),
                                            int(buf[st.Get_count(I8)]))
    return out


def r_any_source_any_tag(comm):
    """Phase 1: a ring, received with ANY_SOURCE/ANY_TAG. Phase 2 (after a
    barrier, so phase-1 receives can't see phase-2 messages): everybody
    sends rank 0 a message, which receives them all with ANY_SOURCE."""
    n, r = comm.size, comm.rank
    comm.Send(message(r, (r + 1) % n, 20 + r), (r + 1) % n, 20 + r)
    buf = np.zeros(64, np.int64)
    st = Status()
    comm.Recv(buf, ANY_SOURCE, ANY_TAG, st)
    ring = got(st, buf)
    comm.Barrier()
    gathered = []
    if r != 0:
        comm.Send(message(r, 0, 30 + r), 0, 30 + r)
    else:
        for _ in range(n - 1):
            buf = np.zeros(64, np.int64)
            comm.Recv(buf, status=st)             # the defaults: any, any
            gathered.append(got(st, buf))
        # ANY_SOURCE with a definite tag, ANY_TAG with a definite source
    comm.Barrier()
    if r != 0:
        comm.Send(message(r, 0, 40), 0, 40)
        comm.Send(message(r, 0, 41), 0, 41)
    else:
        for _ in range(n - 1):
            buf = np.zeros(64, np.int64)
            comm.Recv(buf, ANY_SOURCE, 41, st)
            gathered.append(got(st, buf))
        for src in range(1, n):
            buf = np.zeros(64, np.int64)
            comm.Recv(buf, src, ANY_TAG, st)
            gathered.append(got(st, buf))
    return ring, gathered


def r_self_messages(comm):
    """Messages to ourselves: blocking, nonblocking (receive posted before
    the send), objects, ANY_SOURCE; then the size-1 Iprobe."""
    r = comm.rank
    log = []
    st = Status()
    comm.Send(message(r, r, 7), r, 7)
    comm.Send(message(r, r, 8), r, 8)
    log.append(comm.Iprobe(r, 8, st) and (st.Get_source(), st.Get_tag(),
                                          st.Get_count()))
    for tag in (8, 7):
        buf = np.zeros(16, np.int64)
        comm.Recv(buf, r, tag, st)
        log.append(got(st, buf))
    buf = np.zeros(16, np.int64)
    rreq = comm.Irecv(buf, r, 9)
    sreq = comm.Isend(message(r, r, 9), r, 9)
    sts = [Status(), Status()]
    gloocy.Waitall([rreq, sreq], sts)
    log.append(got(sts[0], buf))
    comm.send({"me": r}, r, 3)
    log.append(comm.recv(source=ANY_SOURCE, tag=3, status=st))
    log.append((st.Get_source(), st.Get_tag()))
    req = comm.isend(("isend", r), r, 4)
    log.append(comm.irecv(source=r, tag=4).wait())
    req.Wait()
    log.append(comm.Iprobe(r, ANY_TAG))              # all consumed
    return log


def r_proc_null(comm):
    """PROC_NULL: sends vanish, receives finish at once with an empty
    status and leave the buffer alone; then a non-periodic shift."""
    n, r = comm.size, comm.rank
    log = []
    buf = np.full(4, -7, np.int64)
    st = Status()
    st.source, st.tag, st.count = 123, 456, 789
    comm.Send(np.arange(4), PROC_NULL, 5)
    comm.Recv(buf, PROC_NULL, 5, st)
    log.append(("Recv", st.Get_source(), st.Get_tag(), st.Get_count(),
                buf.tolist()))
    reqs = [comm.Isend(np.arange(4), PROC_NULL), comm.Irecv(buf, PROC_NULL)]
    log.append(("Testall", gloocy.Testall(reqs), buf.tolist()))
    comm.send("gone", PROC_NULL)
    log.append(("recv", comm.recv(source=PROC_NULL)))
    log.append(("isend", comm.isend("gone", PROC_NULL).Test(),
                "irecv", comm.irecv(source=PROC_NULL).wait()))
    # Shift right: the last rank sends nowhere, rank 0 receives from nowhere.
    dest = r + 1 if r + 1 < n else PROC_NULL
    source = r - 1 if r > 0 else PROC_NULL
    buf = np.full(3, -1, np.int64)
    st = Status()
    comm.Sendrecv(np.full(3, r, np.int64), dest, 6, buf, source, 6, st)
    log.append(("shift", st.Get_source(), st.Get_count(), buf.tolist()))
    log.append(("sendrecv", comm.sendrecv(("obj", r), dest, 6, None, source, 6)))
    return log


def r_probe(comm):
    """Iprobe is False before anything is sent (the senders wait on the
    barrier); Probe and Iprobe then describe messages without taking them."""
    n, r = comm.size, comm.rank
    log = []
    if r == 0:
        log.append(("before", comm.Iprobe(), comm.Iprobe(ANY_SOURCE, 42)))
    if n == 1:
        return log
    comm.Barrier()
    if r != 0:
        comm.Send(np.arange(r + 1, dtype=np.int64), 0, 40 + r)
        comm.Barrier()
        return log
    st = Status()
    comm.Probe(1, 41, st)
    log.append(("probe", st.Get_source(), st.Get_tag(), st.Get_count()))
    st2 = Status()
    comm.Probe(1, ANY_TAG, st2)                       # still there
    log.append(("again", st2.Get_source(), st2.Get_tag(), st2.Get_count()))
    log.append(("other tag", comm.Iprobe(1, 99), comm.Iprobe(ANY_SOURCE, 99)))
    seen = {}
    for _ in range(n - 1):
        st = Status()
        deadline = time.monotonic() + 10
        while not comm.Iprobe(ANY_SOURCE, ANY_TAG, st):
            assert time.monotonic() < deadline, "Iprobe never saw a message"
        buf = np.zeros(st.Get_count(I8), np.int64)    # exactly the right size
        st2 = Status()
        comm.Recv(buf, st.Get_source(), st.Get_tag(), st2)
        seen[st.Get_source()] = (st.Get_tag(), st.Get_count(), buf.tolist(),
                                 (st2.Get_source(), st2.Get_tag(),
                                  st2.Get_count()))
    log.append(("seen", seen))
    log.append(("after", comm.Iprobe()))
    comm.Barrier()
    return log


def r_sendrecv_ring(comm, nbytes):
    """Both directions of a ring with large messages: every rank sends at
    once, and nobody's receive is posted before its send returns."""
    n, r = comm.size, comm.rank
    right, left = (r + 1) % n, (r - 1) % n
    send = (np.arange(nbytes, dtype=np.uint64) * (r + 1)).astype(np.uint8)
    out = []
    for dest, source, tag in ((right, left, 1), (left, right, 2)):
        recv = np.zeros(nbytes + 100, np.uint8)
        st = Status()
        comm.Sendrecv(send, dest, tag, recv, source, tag, st)
        want = (np.arange(nbytes, dtype=np.uint64) * (source + 1)).astype(np.uint8)
        out.append((st.Get_source(), st.Get_tag(), st.Get_count(),
                    bool((recv[:nbytes] == want).all()),
                    bool((recv[nbytes:] == 0).all())))
    return out


def r_send_across_collectives(comm, nbytes):
    """Rank 0 sends before a few collectives, the last rank receives after
    them: the sends complete on their own and the receiver's collectives
    step over the waiting messages."""
    n, r = comm.size, comm.rank
    last = n - 1
    big = np.arange(nbytes // 8, dtype=np.int64)
    if r == 0:
        comm.Send(message(0, last, 5), last, 5)
        comm.Send(big, last, 6)
        comm.send({"obj": True}, last, 7)
    x = np.full(1 << 17, r + 1.0)
    comm.Allreduce(IN_PLACE, x)
    b = np.arange(1 << 18, dtype=np.int32) if r == 0 else np.zeros(1 << 18, np.int32)
    comm.Bcast(b, root=0)
    comm.Barrier()
    out = [float(x[0]), bool((b == np.arange(1 << 18)).all())]
    if r == last:
        st = Status()
        recv = np.zeros(nbytes // 8, np.int64)
        comm.Recv(recv, 0, 6, st)                    # out of order: 6 first
        out.append((st.Get_count(), bool((recv == big).all())))
        small = np.zeros(16, np.int64)
        comm.Recv(small, 0, 5, st)
        out.append(got(st, small))
        out.append(comm.recv(source=0, tag=7))
    return out


def r_objects(comm):
    n, r = comm.size, comm.rank
    right, left = (r + 1) % n, (r - 1) % n
    log = {}
    comm.send({"from": r, "blob": b"x" * (r * 1000)}, right, 11)
    st = Status()
    log["recv"] = comm.recv(source=left, tag=11, status=st)
    log["recv status"] = (st.Get_source(), st.Get_tag())
    log["sendrecv"] = comm.sendrecv(["sr", r], dest=left, sendtag=12,
                                    source=right, recvtag=12)
    # probe/iprobe on an object message; the count is its pickle's length.
    obj = ("probe me", r, list(range(r)))
    comm.send(obj, right, 13)
    st = Status()
    comm.probe(left, 13, st)
    log["probe"] = (st.Get_source(), st.Get_tag(), st.Get_count())
    log["iprobe"] = comm.iprobe(left, 13)
    log["probed"] = comm.recv(source=left, tag=13)
    # isend/irecv, both orders; wait() of irecv returns the object.
    req_r = comm.irecv(source=left, tag=14)
    req_s = comm.isend({"i": r}, right, 14)
    log["irecv wait"] = req_r.wait()
    req_s.wait()
    req_s = comm.isend(("late", r), right, 15)
    comm.Barrier()
    req_r = comm.irecv(source=ANY_SOURCE, tag=15)
    deadline = time.monotonic() + 10
    done, value = req_r.test()
    while not done and time.monotonic() < deadline:
        done, value = req_r.test()
    log["irecv test"] = (done, value)
    req_s.Wait()
    comm.Barrier()
    return log


def r_isend_irecv_ring(comm, n_items, recv_first):
    """Isend/Irecv to both neighbours at once, large buffers, Waitall."""
    n, r = comm.size, comm.rank
    right, left = (r + 1) % n, (r - 1) % n
    sends = [np.full(n_items, r * 10 + k, np.int32) for k in (1, 2)]
    recvs = [np.zeros(n_items + 3, np.int32) for _ in (1, 2)]
    reqs = []

    def post_recvs():
        reqs.append(comm.Irecv(recvs[0], left, 1))
        reqs.append(comm.Irecv(recvs[1], right, 2))

    if recv_first:
        post_recvs()
    reqs.append(comm.Isend(sends[0], right, 1))
    reqs.append(comm.Isend(sends[1], left, 2))
    if not recv_first:
        post_recvs()
    sts = [Status() for _ in reqs]
    assert gloocy.Waitall(reqs, sts) is True
    recv_st = sts[:2] if recv_first else sts[2:]
    return ([(s.Get_source(), s.Get_tag(), s.Get_count()) for s in recv_st],
            [int(recvs[0][0]), int(recvs[0][n_items - 1]), int(recvs[0][n_items]),
             int(recvs[1][0]), int(recvs[1][n_items - 1]), int(recvs[1][n_items])],
            bool((recvs[0][:n_items] == recvs[0][0]).all()),
            bool((recvs[1][:n_items] == recvs[1][0]).all()))


def r_irecv_any_source(comm):
    """Rank 0 posts size-1 Irecvs from ANY_SOURCE; the others send after a
    barrier. Each buffer holds the message its status names."""
    n, r = comm.size, comm.rank
    if r == 0:
        bufs = [np.zeros(32, np.int64) for _ in range(n - 1)]
        reqs = [comm.Irecv(b, ANY_SOURCE, 50) for b in bufs]
        comm.Barrier()
        sts = [Status() for _ in reqs]
        gloocy.Waitall(reqs, sts)
        return [got(s, b) for s, b in zip(sts, bufs)]
    comm.Barrier()
    comm.Send(message(r, 0, 50), 0, 50)
    return None


def r_wait_test_any_some(comm):
    """Testall/Testany before anything is sent, then Waitany and Waitsome
    until every receive is done, then the all-None cases."""
    n, r = comm.size, comm.rank
    if r != 0:
        comm.Barrier()
        comm.Send(message(r, 0, 60 + r), 0, 60 + r)
        comm.Barrier()
        return None
    bufs = [np.zeros(16, np.int64) for _ in range(1, n)]
    originals = [comm.Irecv(b, src, 60 + src) for b, src in zip(bufs, range(1, n))]
    reqs = list(originals)
    log = [("before", gloocy.Testall(reqs), gloocy.Testany(reqs),
            [q.Test() for q in reqs])]
    comm.Barrier()
    st = Status()
    i = gloocy.Waitany(reqs, st)
    log.append(("waitany", i, st.Get_source(), st.Get_tag(), got(st, bufs[i])))
    reqs[i] = None
    while any(q is not None for q in reqs):
        sts = [Status() for _ in reqs]
        done = gloocy.Waitsome(reqs, sts)
        assert done, "Waitsome returned nothing"
        for k, j in enumerate(done):
            log.append(("waitsome", j, sts[k].Get_source(), got(sts[k], bufs[j])))
            reqs[j] = None
    log.append(("empty", gloocy.Waitany(reqs), gloocy.Waitsome(reqs),
                gloocy.Testany(reqs)))
    log.append(("testall", gloocy.Testall(originals), gloocy.Request.waitall(originals)))
    comm.Barrier()
    return log


def r_cancel(comm):
    """Irecvs nothing was sent to are cancelled; the messages sent later
    (with the same source and tag) go to the next receives."""
    n, r = comm.size, comm.rank
    log = []
    if r == 0:
        stale = [np.full(8, -5, np.int64) for _ in range(2)]
        reqs = [comm.Irecv(stale[0], n - 1, 77), comm.Irecv(stale[1], ANY_SOURCE, 78)]
        for q in reqs:
            q.Cancel()
        t0 = time.monotonic()
        log.append(("cancelled", [q.Test() for q in reqs],
                    gloocy.Waitall(reqs), [q.wait() for q in reqs]))
        # Nothing can arrive before the barrier below, so a Waitall that
        # waited would wait for the deadline (60 s): 10 s is generous.
        log.append(("quick", time.monotonic() - t0 < 10.0))
    comm.Barrier()
    if r == n - 1:
        comm.Send(message(r, 0, 77), 0, 77)
        comm.Send(message(r, 0, 78), 0, 78)
        comm.send("obj79", 0, 79)
    if r == 0:
        st = Status()
        for tag in (77, 78):
            buf = np.zeros(16, np.int64)
            comm.Recv(buf, n - 1, tag, st)
            log.append(got(st, buf))
        log.append(comm.recv(source=n - 1, tag=79))
        log.append(("stale untouched", [s.tolist() for s in stale]))
        # Cancel of a send changes nothing; a finished receive is
        # REQUEST_NULL, which cannot be cancelled.
        s = comm.Isend(message(0, 0, 80), 0, 80)
        buf = np.zeros(16, np.int64)
        q = comm.Irecv(buf, 0, 80)
        q.Wait(st)
        try:
            q.Cancel()
        except gloocy.GloocyError as e:
            log.append(("cancel done", e.Get_error_class()))
        s.Cancel()
        s.Wait()
        log.append(("after done", q.Test(), got(st, buf)))
    comm.Barrier()
    return log


def nb_input(rank, k):
    return np.arange(k, dtype=np.int64) * (rank + 1) + 100 * rank


def nb_start(comm, k, root):
    """Start every nonblocking collective at once; (name, request, buffer)
    each."""
    return list(nb_calls(comm, k, root))


def nb_expect(name, n, r, k, root):
    ins = [nb_input(j, k) for j in range(n)]
    if name == "barrier":
        return None
    if name == "bcast":
        return ins[root]
    if name == "allreduce":
        return np.sum(ins, axis=0)
    if name == "allreduce max in place":
        return np.max(ins, axis=0)
    if name == "reduce":
        return np.sum(ins, axis=0) if r == root else None
    if name == "allgather":
        return np.concatenate(ins)
    if name == "gather":
        return np.concatenate(ins) if r == root else None
    if name == "scatter":
        return ins[r] + 7
    if name == "alltoall":
        return np.concatenate([ins[j] + 1000 * r for j in range(n)])
    if name == "reduce_scatter_block":
        return np.sum(ins, axis=0) * (r + 1)
    if name == "scan":
        return np.sum(ins[:r + 1], axis=0)
    raise KeyError(name)


def r_nonblocking_collectives(comm, k, root):
    """Each nonblocking collective alone (Wait right away), then all of them
    in flight at once, driven by Test alone (in any order: MPI does not
    order their completion), then Waitall."""
    one_by_one = {}
    for name, req, buf in nb_calls(comm, k, root):   # one at a time
        req.Wait()
        one_by_one[name] = None if buf is None else buf.tolist()
    calls = nb_start(comm, k, root)
    reqs = [req for _, req, _ in calls]
    snapshots = []
    deadline = time.monotonic() + 20
    while not (snapshots and all(snapshots[-1])) and time.monotonic() < deadline:
        snap = [q.Test() for q in reversed(reqs)][::-1]
        if not snapshots or snap != snapshots[-1]:
            snapshots.append(snap)
    gloocy.Waitall(reqs)
    snapshots.append([q.Test() for q in reqs])
    together = {name: None if buf is None else buf.tolist() for name, _, buf in calls}
    return one_by_one, together, snapshots


def nb_calls(comm, k, root):
    """Start the nonblocking collectives one by one, as the consumer asks."""
    n, r = comm.size, comm.rank
    mine = nb_input(r, k)
    yield "barrier", comm.Ibarrier(), None
    b = mine.copy() if r == root else np.zeros(k, np.int64)
    yield "bcast", comm.Ibcast(b, root), b
    out = np.empty(k, np.int64)
    yield "allreduce", comm.Iallreduce(mine, out, gloocy.SUM), out
    x = mine.copy()
    yield "allreduce max in place", comm.Iallreduce(IN_PLACE, x, gloocy.MAX), x
    out = np.zeros(k, np.int64) if r == root else None
    yield "reduce", comm.Ireduce(mine, out, gloocy.SUM, root), out
    out = np.empty(n * k, np.int64)
    yield "allgather", comm.Iallgather(mine, out), out
    out = np.zeros(n * k, np.int64) if r == root else None
    yield "gather", comm.Igather(mine, out, root), out
    src = np.concatenate([nb_input(j, k) + 7 for j in range(n)]) if r == root else None
    out = np.zeros(k, np.int64)
    yield "scatter", comm.Iscatter(src, out, root), out
    src = np.concatenate([mine + 1000 * j for j in range(n)])
    out = np.zeros(n * k, np.int64)
    yield "alltoall", comm.Ialltoall(src, out), out
    src = np.concatenate([mine * (j + 1) for j in range(n)])
    out = np.zeros(k, np.int64)
    yield ("reduce_scatter_block",
           comm.Ireduce_scatter_block(src, out, gloocy.SUM), out)
    out = np.zeros(k, np.int64)
    yield "scan", comm.Iscan(mine, out, gloocy.SUM), out


def r_progress(comm, nbytes, limit):
    """Start a large Iallreduce, then compute in pure Python, calling only
    Test on another request (a receive nothing is sent to) now and then,
    until the sum shows in the buffer (or `limit` s pass): any progress
    call moves every outstanding collective (MPI's weak progress). (seconds
    of a blocking Allreduce, whether the sum showed before Wait, whether it
    is right after Wait)."""
    comm.Ibarrier().Wait()              # the nonblocking machinery is built
    want = comm.size * (comm.size + 1) / 2
    x = np.full(nbytes // 4, comm.rank + 1, np.float32)
    t0 = time.monotonic()
    comm.Allreduce(IN_PLACE, x)
    blocking = time.monotonic() - t0
    x = np.full(nbytes // 4, comm.rank + 1, np.float32)
    comm.Barrier()
    req = comm.Iallreduce(IN_PLACE, x)
    other = comm.Irecv(bytearray(8), (comm.rank + 1) % comm.size, 77)
    end = time.monotonic() + limit
    shown = False
    while not shown and time.monotonic() < end:
        for _ in range(1_000):              # Python's own work
            pass
        other.Test()
        shown = bool(x[-1] == want) and bool((x == want).all())
    req.Wait()
    other.Cancel()
    other.Wait()
    return blocking, shown, bool((x == want).all())


def r_dup_independent(comm, rounds):
    """A Dup and its parent: same tags don't cross, collectives on each in
    sequence, then both at once from two threads."""
    n, r = comm.size, comm.rank
    d = comm.Dup()
    log = {"identity": (d.rank, d.size, d is not comm)}
    if n > 1:
        if r == 0:
            d.send("on the dup", 1, 5)
            comm.send("on the parent", 1, 5)
        elif r == 1:
            log["parent first"] = comm.recv(source=0, tag=5)
            log["then dup"] = d.recv(source=0, tag=5)
    x, y = np.full(5, r + 1.0), np.full(5, 10.0 * (r + 1))
    d.Allreduce(IN_PLACE, x)
    comm.Allreduce(IN_PLACE, y)
    log["sequence"] = (x.tolist(), y.tolist(), d.allgather(r), comm.bcast(r, root=n - 1))
    results = {}

    def on(c, key, scale):
        total = []
        for k in range(rounds):
            if (r + k) % 3 == 0:
                time.sleep(0.002)               # the two threads drift apart
            z = np.full(1000, scale * (r + k))
            c.Allreduce(IN_PLACE, z)
            total.append(float(z[0]))
        results[key] = total

    t = threading.Thread(target=on, args=(d, "dup", 1.0))
    t.start()
    on(comm, "parent", -2.0)
    t.join()
    log["threads"] = results
    d.Free()
    log["freed"] = (d.closed, comm.closed)
    comm.Barrier()
    return log


def r_dup_loop(comm, k):
    t0 = time.monotonic()
    sums = []
    for _ in range(k):
        d = comm.Dup()
        x = np.ones(3)
        d.Allreduce(IN_PLACE, x)
        sums.append(float(x[0]))
        d.Free()
    return time.monotonic() - t0, sums


def r_cancel_object_irecv(comm):
    if comm.rank == 1:
        comm.Barrier()
        comm.send("obj79", 0, 79)
        return None
    req = comm.irecv(source=1, tag=79)
    req.Cancel()
    done = req.Test()
    comm.Barrier()
    return done, comm.recv(source=1, tag=79)


def r_closed_flags(comm):
    out = [comm.closed]
    d = comm.Dup()
    out.append(d.closed)
    d.Free()
    out.append(d.closed)
    try:
        d.Barrier()
        out.append("usable after Free")
    except gloocy.GloocyError:
        out.append("refused")
    return out


def r_truncated(comm):
    """Messages larger than the receive buffer: MismatchError on the
    receiver (the communicator is then spoiled: a world of its own)."""
    r = comm.rank
    out = []
    if r == 0:
        comm.Send(np.arange(100, dtype=np.uint8), 0, 1)       # to ourselves
        try:
            comm.Recv(bytearray(10), 0, 1)
            out.append("self: no error")
        except gloocy.MismatchError as e:
            out.append(("self", "MismatchError", "100 bytes" in str(e)))
    comm.Barrier()
    if r == 1:
        comm.Send(np.arange(100, dtype=np.uint8), 0, 2)
        out.append("sent")
    if r == 0:
        try:
            comm.Recv(bytearray(10), 1, 2)
            out.append("peer: no error")
        except gloocy.MismatchError as e:
            out.append(("peer", "MismatchError", "100 bytes" in str(e)))
    return out


def r_truncated_irecv(comm):
    if comm.rank == 1:
        comm.Send(np.arange(50, dtype=np.uint8), 0, 3)
        return "sent"
    req = comm.Irecv(bytearray(49), 1, 3)
    try:
        req.Wait()
        return "no error"
    except gloocy.MismatchError:
        return "MismatchError"


def r_probe_proc_null(comm):
    st = Status()
    flag = comm.Iprobe(PROC_NULL, ANY_TAG, st)
    out = [("Iprobe", flag, st.Get_source())]
    st = Status()
    try:
        comm.Probe(PROC_NULL, ANY_TAG, st, timeout=0.5)
        out.append(("Probe", "returned", st.Get_source()))
    except gloocy.CollectiveTimeout:
        out.append(("Probe", "timed out"))
    return out


def r_posting_order(comm):
    """Two posted receives both match the first message: the one posted
    first gets it (MPI's non-overtaking rule), ANY_SOURCE or not."""
    if comm.rank == 1:
        comm.Barrier()
        comm.Send(b"first", 0, 1)
        comm.Send(b"second", 0, 1)
        comm.Barrier()
        return None
    a, b = bytearray(10), bytearray(10)
    req = comm.Irecv(a, ANY_SOURCE, 1)
    comm.Barrier()
    st = Status()
    comm.Recv(b, 1, 1, st)
    req.Wait()
    comm.Barrier()
    return bytes(a).rstrip(b"\0"), bytes(b).rstrip(b"\0")


# -- the tests ------------------------------------------------------------------------

@pytest.mark.parametrize("size", SIZES)
def test_tags_matched_out_of_order(world, size):
    tags = (10, 11, 12)
    results = world(size).run(r_tags_out_of_order, tags)
    for dst, out in enumerate(results):
        for src in range(size):
            for tag in tags:
                want = message(src, dst, tag)
                s, t, nbytes, data, count, after = out[src, tag]
                assert (s, t, nbytes, count) == (src, tag, want.nbytes, want.size)
                assert data == want.tolist(), (src, dst, tag)
                assert after == -1, "bytes past the message were written"


@pytest.mark.parametrize("size", SIZES)
def test_any_source_any_tag_and_status(world, size):
    results = world(size).run(r_any_source_any_tag)
    for r, (ring, gathered) in enumerate(results):
        left = (r - 1) % size
        want = message(left, r, 20 + left)
        assert ring == (left, 20 + left, want.nbytes, want.tolist())
        if r:
            assert gathered == []
            continue
        first = sorted(gathered[:size - 1])
        assert first == [(s, 30 + s, message(s, 0, 30 + s).nbytes,
                          message(s, 0, 30 + s).tolist()) for s in range(1, size)]
        by_tag = sorted(gathered[size - 1:2 * (size - 1)])
        assert by_tag == [(s, 41, message(s, 0, 41).nbytes,
                           message(s, 0, 41).tolist()) for s in range(1, size)]
        # ANY_TAG from a definite source: the tag-40 message, the older one
        assert gathered[2 * (size - 1):] == [
            (s, 40, message(s, 0, 40).nbytes, message(s, 0, 40).tolist())
            for s in range(1, size)]


@pytest.mark.parametrize("size", [1, 3])
def test_messages_to_self(world, size):
    for r, log in enumerate(world(size).run(r_self_messages)):
        m7, m8, m9 = (message(r, r, t) for t in (7, 8, 9))
        assert log[0] == (r, 8, m8.nbytes)
        assert log[1] == (r, 8, m8.nbytes, m8.tolist())
        assert log[2] == (r, 7, m7.nbytes, m7.tolist())
        assert log[3] == (r, 9, m9.nbytes, m9.tolist())
        assert log[4] == {"me": r} and log[5] == (r, 3)
        assert log[6] == ("isend", r)
        assert log[7] is False


@pytest.mark.parametrize("size", SIZES)
def test_proc_null(world, size):
    for r, log in enumerate(world(size).run(r_proc_null)):
        assert log[0] == ("Recv", PROC_NULL, ANY_TAG, 0, [-7] * 4)
        assert log[1] == ("Testall", True, [-7] * 4)
        assert log[2] == ("recv", None)
        assert log[3] == ("isend", True, "irecv", None)
        if r == 0:
            assert log[4] == ("shift", PROC_NULL, 0, [-1] * 3)
            assert log[5] == ("sendrecv", None)
        else:
            assert log[4] == ("shift", r - 1, 24, [r - 1] * 3)
            assert log[5] == ("sendrecv", ("obj", r - 1))


def test_probe_proc_null_returns_at_once(transport):
    with ProcessWorld(2, env=TRANSPORT_ENV[transport], timeout=20) as w:
        for log in w.run(r_probe_proc_null):
            assert log == [("Iprobe", True, PROC_NULL),
                           ("Probe", "returned", PROC_NULL)]


@pytest.mark.parametrize("size", [1] + MULTI)
def test_probe_and_iprobe(world, size):
    if size == 1:      # r_self_messages probes messages to ourselves
        assert world(1).run(r_probe) == [[("before", False, False)]]
        return
    log = world(size).run(r_probe)[0]
    assert log[0] == ("before", False, False)
    assert log[1] == ("probe", 1, 41, 16)
    assert log[2] == ("again", 1, 41, 16)
    assert log[3] == ("other tag", False, False)
    _, seen = log[4]
    assert seen == {s: (40 + s, 8 * (s + 1), list(range(s + 1)),
                        (s, 40 + s, 8 * (s + 1))) for s in range(1, size)}
    assert log[5] == ("after", False)


@pytest.mark.parametrize("size", SIZES)
def test_sendrecv_ring_large_both_ways(world, size):
    nbytes = 6 * 2**20 + 5
    for r, out in enumerate(world(size).run(r_sendrecv_ring, nbytes)):
        right, left = (r + 1) % size, (r - 1) % size
        assert out == [(left, 1, nbytes, True, True), (right, 2, nbytes, True, True)]


@pytest.mark.parametrize("size", MULTI)
def test_send_before_collectives_recv_after(world, size):
    nbytes = 4 * 2**20
    results = world(size).run(r_send_across_collectives, nbytes)
    total = size * (size + 1) / 2
    for r, out in enumerate(results):
        assert out[:2] == [total, True]
    m = message(0, size - 1, 5)
    assert results[-1][2:] == [(nbytes, True), (0, 5, m.nbytes, m.tolist()),
                               {"obj": True}]


@pytest.mark.parametrize("size", SIZES)
def test_object_point_to_point(world, size):
    for r, log in enumerate(world(size).run(r_objects)):
        left, right = (r - 1) % size, (r + 1) % size
        assert log["recv"] == {"from": left, "blob": b"x" * (left * 1000)}
        assert log["recv status"] == (left, 11)
        assert log["sendrecv"] == ["sr", right]
        obj = ("probe me", left, list(range(left)))
        assert log["probe"] == (left, 13, len(pickle.dumps(
            obj, protocol=pickle.HIGHEST_PROTOCOL)))
        assert log["iprobe"] is True
        assert log["probed"] == obj
        assert log["irecv wait"] == {"i": left}
        assert log["irecv test"] == (True, ("late", left))


@pytest.mark.parametrize("recv_first", [True, False])
@pytest.mark.parametrize("size", SIZES)
def test_isend_irecv_ring_waitall(world, size, recv_first):
    n_items = 300_001                        # 1.2 MB each way
    for r, out in enumerate(world(size).run(r_isend_irecv_ring, n_items, recv_first)):
        right, left = (r + 1) % size, (r - 1) % size
        statuses, values, full1, full2 = out
        assert statuses == [(left, 1, 4 * n_items), (right, 2, 4 * n_items)]
        assert values == [left * 10 + 1] * 2 + [0] + [right * 10 + 2] * 2 + [0]
        assert full1 and full2


@pytest.mark.parametrize("size", MULTI)
def test_irecv_any_source(world, size):
    out = world(size).run(r_irecv_any_source)[0]
    assert sorted(out) == [(s, 50, message(s, 0, 50).nbytes,
                            message(s, 0, 50).tolist()) for s in range(1, size)]


@pytest.mark.parametrize("size", MULTI)
def test_testall_waitany_testany_waitsome(world, size):
    log = world(size).run(r_wait_test_any_some)[0]
    assert log[0] == ("before", False, (gloocy.requests.UNDEFINED, False),
                      [False] * (size - 1))
    seen = set()
    for entry in log[1:-2]:
        kind, i, source = entry[:3]
        assert source == i + 1, entry
        m = message(source, 0, 60 + source)
        assert entry[-1] == (source, 60 + source, m.nbytes, m.tolist())
        if kind == "waitany":
            assert entry[3] == 60 + source
        seen.add(i)
    assert seen == set(range(size - 1)) and len(log) == 3 + size - 1
    assert log[-2] == ("empty", gloocy.requests.UNDEFINED, None,
                       (gloocy.requests.UNDEFINED, True))    # none active
    assert log[-1] == ("testall", True, [None] * (size - 1))


@pytest.mark.parametrize("size", [2, 3])
def test_cancel_irecv_nothing_was_sent_to(world, size):
    log = world(size).run(r_cancel)[0]
    assert log[0] == ("cancelled", [True, True], True, [None, None])
    assert log[1] == ("quick", True)
    src = size - 1
    assert log[2] == (src, 77, message(src, 0, 77).nbytes, message(src, 0, 77).tolist())
    assert log[3] == (src, 78, message(src, 0, 78).nbytes, message(src, 0, 78).tolist())
    assert log[4] == "obj79"
    assert log[5] == ("stale untouched", [[-5] * 8] * 2)
    m = message(0, 0, 80)
    assert log[6] == ("cancel done", gloocy.errors.ERR_REQUEST)
    assert log[7] == ("after done", True, (0, 80, m.nbytes, m.tolist()))


def test_cancel_object_irecv(world):
    assert world(2).run(r_cancel_object_irecv)[0] == (True, "obj79")


def test_truncated_message_is_a_mismatch(transport):
    env = TRANSPORT_ENV[transport]
    with ProcessWorld(2, env=env, timeout=20) as w:
        out = w.run(r_truncated)
        assert out == [[("self", "MismatchError", True),
                        ("peer", "MismatchError", True)], ["sent"]]
    with ProcessWorld(2, env=env, timeout=20) as w:
        assert w.run(r_truncated_irecv) == ["MismatchError", "sent"]


def test_receives_match_in_posting_order(world):
    assert world(2).run(r_posting_order)[0] == (b"first", b"second")


def check_nonblocking(results, size, k, root):
    for r, (one_by_one, together, snapshots) in enumerate(results):
        for name in together:
            want = nb_expect(name, size, r, k, root)
            want = None if want is None else want.tolist()
            assert one_by_one[name] == want, (name, r, "alone")
            assert together[name] == want, (name, r, "in flight together")
        # Test alone finished them all (weak progress), before Waitall.
        assert all(snapshots[-2] if len(snapshots) > 1 else snapshots[-1]), snapshots


@pytest.mark.parametrize("size", SIZES)
def test_nonblocking_collectives(world, size):
    k = 1001
    for root in sorted({0, size - 1}):
        results = world(size).run(r_nonblocking_collectives, k, root)
        check_nonblocking(results, size, k, root)


@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_nonblocking_collectives_hypothesis(world, data):
    size = data.draw(st.sampled_from(SIZES), "size")
    k = data.draw(st.integers(0, 40_000), "k")
    root = data.draw(st.integers(0, size - 1), "root")
    check_nonblocking(world(size).run(r_nonblocking_collectives, k, root),
                      size, k, root)


@pytest.mark.parametrize("size", [2, 3])
def test_iallreduce_progresses_while_python_computes(world, size):
    # 32 MiB takes ~0.1-0.2 s blocking here. Without progress from other
    # requests' Tests the sum could only show after its own Wait: it must
    # show while the ranks compute (within 30 s, however loaded the machine).
    results = world(size).run(r_progress, 32 * 2**20, 30.0, timeout=90)
    for r, (blocking, shown, ok) in enumerate(results):
        assert ok, f"rank {r}: wrong sum"
        assert shown, (f"rank {r}: the sum did not show in 30 s of computing "
                       f"and testing another request (a blocking Allreduce "
                       f"took {blocking:.2f} s): no progress from other calls")


@pytest.mark.parametrize("size", SIZES)
def test_dup_works_independently(world, size):
    rounds = 20
    for r, log in enumerate(world(size).run(r_dup_independent, rounds)):
        assert log["identity"] == (r, size, True)
        if size > 1 and r == 1:
            assert log["parent first"] == "on the parent"
            assert log["then dup"] == "on the dup"
        tri = size * (size + 1) / 2
        assert log["sequence"] == ([tri] * 5, [10 * tri] * 5, list(range(size)),
                                   size - 1)
        base = size * (size - 1) / 2
        assert log["threads"] == {
            "dup": [base + size * k for k in range(rounds)],
            "parent": [-2.0 * (base + size * k) for k in range(rounds)]}
        assert log["freed"] == (True, False)


@pytest.mark.parametrize("size", [1, 2])
def test_closed_flag_and_use_after_free(world, size):
    assert world(size).run(r_closed_flags) == [
        [False, False, True, "refused"]] * size


def test_dup_free_loop_stays_fast(world):
    for seconds, sums in world(3).run(r_dup_loop, 20):
        assert sums == [3.0] * 20
        # ~10 ms here; a Free that lingered for its 1 s, or a Dup that made
        # new connections, would take 20 s or more.
        assert seconds < 10.0, f"20 Dup+Free took {seconds:.1f} s"
