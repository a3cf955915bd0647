"""Send modes, matched probes, threads, partitioned and buffered sends, on
real rank processes over shared memory, TCP and a mix (world sizes 1-3).

Every message's contents follow from (source, dest, tag) in closed form
(`payload`); orderings that MPI requires (a synchronous send is not done
before its receive is posted) are arranged through a barrier on another
communicator, so the test can fail only if gloocy breaks them.
"""

import threading
import time

import numpy as np
import pytest

import gloocy
from gloocy import ANY_SOURCE, ANY_TAG, PROC_NULL, Status
from gloocy.errors import (ERR_BUFFER, ERR_REQUEST, ArgumentError,
                           ContextPoisoned, GloocyError)
from gloocy.message import BUFFER_AUTOMATIC, BSEND_OVERHEAD, MESSAGE_NO_PROC
from gloocy.requests import Request

TRANSPORTS = ("shm", "tcp", "mix")


def payload(src, dst, tag, n=None):
    """The int64 message `src` sends `dst` with `tag` (n items)."""
    n = 1 + (src + 3 * dst + tag) % 9 if n is None else n
    return np.arange(n, dtype=np.int64) * 7 + 1000 * src + 100 * dst + tag


# -- synchronous sends ----------------------------------------------------------------

def r_issend_waits_for_receive(comm):
    other = comm.Dup()
    try:
        n, r = comm.size, comm.rank
        log = {}
        if r == 0:
            reqs = [comm.Issend(payload(0, d, 5, 1000), d, 5) for d in range(1, n)]
            seen = []
            for _ in range(40):
                seen.append(any(q.Get_status() for q in reqs))
                time.sleep(0.005)
            log["before"] = any(seen)
            other.Barrier()                      # the receivers post now
            Request.Waitall(reqs)
            log["after"] = True
            # a blocking Ssend to a receive posted later completes too
            other.Barrier()
            for d in range(1, n):
                comm.Ssend(payload(0, d, 6), d, 6)
            comm.ssend({"obj": 0}, 1, 7)
        else:
            other.Barrier()
            buf = np.zeros(1000, np.int64)
            comm.Recv(buf, 0, 5)
            log["got"] = buf.tolist()
            other.Barrier()
            time.sleep(0.05)
            buf = np.zeros(16, np.int64)
            st = Status()
            comm.Recv(buf, 0, 6, st)
            log["got6"] = buf[:st.Get_count() // 8].tolist()
            if r == 1:
                log["obj"] = comm.recv(None, 0, 7)
        return log
    finally:
        other.Free()


@pytest.mark.parametrize("size", [2, 3])
def test_issend_is_not_done_before_the_receive(world, size):
    out = world(size).run(r_issend_waits_for_receive)
    assert out[0] == {"before": False, "after": True}
    for r in range(1, size):
        assert out[r]["got"] == payload(0, r, 5, 1000).tolist()
        assert out[r]["got6"] == payload(0, r, 6).tolist()
    assert out[1]["obj"] == {"obj": 0}


def r_issend_both_ways(comm):
    """Each rank posts a receive, then Ssends to the next: the receives are
    matched while the senders wait, so nobody waits for the other."""
    n, r = comm.size, comm.rank
    buf = np.zeros(16, np.int64)
    req = comm.Irecv(buf, (r - 1) % n, 3)
    comm.Ssend(payload(r, (r + 1) % n, 3), (r + 1) % n, 3)
    st = Status()
    req.Wait(st)
    return buf[:st.Get_count() // 8].tolist()


@pytest.mark.parametrize("size", [1, 2, 3])
def test_ssend_ring_with_receives_posted_first(world, size):
    out = world(size).run(r_issend_both_ways)
    for r in range(size):
        assert out[r] == payload((r - 1) % size, r, 3).tolist()


# -- matched probes ---------------------------------------------------------------

def r_mprobe_threads(comm, per_thread):
    """Rank 1 sends 2*per_thread messages of varying length to rank 0, where
    two threads each Mprobe + Message.Recv per_thread of them."""
    if comm.rank == 1:
        for i in range(2 * per_thread):
            comm.Send(payload(1, 0, 4, 1 + i % 13) + i * 10**6, 0, 4)
        return None
    if comm.rank != 0:
        return None
    got = [[], []]

    def work(k):
        for _ in range(per_thread):
            st = Status()
            m = comm.Mprobe(1, 4, st)
            n = st.Get_count()
            buf = np.zeros(n // 8, np.int64)
            st2 = Status()
            m.Recv(buf, st2)
            assert not m
            got[k].append((n, st2.Get_count(), buf.tolist()))

    ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return got


@pytest.mark.parametrize("size", [2, 3])
def test_mprobe_in_two_threads_takes_each_message_once(world, size):
    per = 30
    got = world(size).run(r_mprobe_threads, per)[0]
    assert len(got[0]) == len(got[1]) == per
    seen = []
    for n, n2, values in got[0] + got[1]:
        assert n == n2 == 8 * len(values)
        i = values[0] // 10**6
        assert values == (payload(1, 0, 4, 1 + i % 13) + i * 10**6).tolist()
        seen.append(i)
    assert sorted(seen) == list(range(2 * per))


def r_matched_kinds(comm):
    """Improbe before and after a send, objects through mprobe/irecv, the
    PROC_NULL message, and a matched synchronous send."""
    n, r = comm.size, comm.rank
    src, dst = (r - 1) % n, (r + 1) % n
    log = [comm.Improbe(src, 11) is None]
    comm.Barrier()
    comm.send(("obj", r), dst, 11)
    m = None
    while m is None:
        m = comm.improbe(src, 11)
    log.append(m.recv())
    sreq = comm.Issend(payload(r, dst, 12), dst, 12)
    st = Status()
    m = comm.Mprobe(ANY_SOURCE, 12, st)
    buf = np.zeros(16, np.int64)
    m.Irecv(buf).Wait()
    sreq.Wait()
    log.append((st.Get_source(), buf[:st.Get_count() // 8].tolist()))
    log.append(comm.Mprobe(PROC_NULL) == MESSAGE_NO_PROC)   # a new one, as mpi4py
    comm.Barrier()
    return log


@pytest.mark.parametrize("size", [1, 2, 3])
def test_matched_probe_kinds(world, size):
    for r, log in enumerate(world(size).run(r_matched_kinds)):
        src = (r - 1) % size
        assert log == [True, ("obj", src),
                       (src, payload(src, r, 12).tolist()), True]


def r_bad_arguments(comm):
    out = []
    for call in (lambda: comm.Issend(np.zeros(2), comm.size + 5, 0),
                 lambda: comm.Mprobe(comm.size + 5, 0),
                 lambda: comm.Improbe(0, -5),
                 lambda: comm.Psend_init(np.zeros(10), 3, 0),
                 lambda: comm.Precv_init(np.zeros(10), 0, 0)):
        try:
            call()
            out.append(None)
        except ArgumentError as e:
            out.append(str(e).split(":")[0])
    comm.Barrier()                            # still usable
    return out


def test_bad_arguments_are_named(world):
    for out in world(2).run(r_bad_arguments):
        assert out == ["dest", "source", "tag", "partitions", "partitions"]


# -- threads ------------------------------------------------------------------------

def r_threaded_sendrecv(comm, nthreads, rounds):
    n, r = comm.size, comm.rank
    out = {}

    def work(j):
        res = []
        for k in range(rounds):
            tag = 100 * j + k
            buf = np.zeros(16, np.int64)
            st = Status()
            comm.Sendrecv(payload(r, (r + 1) % n, tag), (r + 1) % n, tag,
                          buf, (r - 1) % n, tag, st)
            res.append((st.Get_source(), st.Get_tag(),
                        buf[:st.Get_count() // 8].tolist()))
        out[j] = res

    ts = [threading.Thread(target=work, args=(j,)) for j in range(nthreads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


@pytest.mark.parametrize("size", [1, 2, 3])
def test_threaded_sendrecv(world, size):
    nthreads, rounds = 4, 10
    for r, out in enumerate(world(size).run(r_threaded_sendrecv, nthreads, rounds)):
        src = (r - 1) % size
        for j in range(nthreads):
            assert out[j] == [(src, 100 * j + k, payload(src, r, 100 * j + k).tolist())
                              for k in range(rounds)]


def r_self_from_thread(comm):
    r = comm.rank
    log = []
    buf = np.zeros(16, np.int64)
    t = threading.Thread(target=lambda: (time.sleep(0.1),
                                         comm.Send(payload(r, r, 2), r, 2)))
    t.start()
    st = Status()
    comm.Recv(buf, r, 2, st)                # waits for the other thread
    t.join()
    log.append(buf[:st.Get_count() // 8].tolist())
    req = comm.Irecv(buf, ANY_SOURCE if comm.size == 1 else r, 3)
    t = threading.Thread(target=lambda: (time.sleep(0.1),
                                         comm.Ssend(payload(r, r, 3), r, 3)))
    t.start()
    req.Wait(st)
    t.join()
    log.append(buf[:st.Get_count() // 8].tolist())
    t = threading.Thread(target=lambda: (time.sleep(0.1), comm.send("x", r, 4)))
    t.start()
    log.append(comm.recv(None, r, 4))
    t.join()
    try:                                    # one thread: a deadlock, named
        comm.Recv(buf, r, 9)
        log.append(None)
    except ContextPoisoned as e:
        log.append("wait forever" in str(e))
    comm.Barrier()                          # still usable
    return log


@pytest.mark.parametrize("size", [1, 2])
def test_send_to_self_from_another_thread(world, size):
    for r, log in enumerate(world(size).run(r_self_from_thread)):
        assert log == [payload(r, r, 2).tolist(), payload(r, r, 3).tolist(),
                       "x", True]


# -- partitioned ------------------------------------------------------------------

def r_partitioned(comm, parts, per, seed):
    n, r = comm.size, comm.rank
    dst, src = (r + 1) % n, (r - 1) % n
    sbuf = np.zeros(parts * per, np.int64)
    rbuf = np.full(parts * per, -1, np.int64)
    sreq = comm.Psend_init(sbuf, parts, dst, 21)
    rreq = comm.Precv_init(rbuf, parts, src, 21)
    rng = np.random.default_rng(seed + r)
    out = []
    for run in range(2):
        rreq.Start()
        sreq.Start()
        order = rng.permutation(parts)
        for p in order[:parts // 2]:
            sbuf[p * per:(p + 1) * per] = payload(r, dst, run, per) + p
            sreq.Pready(int(p))
        rest = [int(p) for p in order[parts // 2:]]
        for p in rest:
            sbuf[p * per:(p + 1) * per] = payload(r, dst, run, per) + p
        if rest:
            sreq.Pready_list(rest)
        while not all(rreq.Parrived(p) for p in range(parts)):
            time.sleep(0.001)
        Request.Waitall([sreq, rreq])
        out.append(rbuf.copy().tolist())
    # errors
    errs = []
    sreq.Start()
    try:
        sreq.Pready(parts)
    except ArgumentError as e:
        errs.append(str(e).split(":")[1].strip())
    try:
        sreq.Wait()
    except GloocyError as e:
        errs.append(e.error_class == ERR_REQUEST)
    sreq.Pready_range(0, parts - 1)
    rreq.Start()
    rreq.Wait()
    sreq.Wait()
    sreq.Free()
    rreq.Free()
    return out, errs


@pytest.mark.parametrize("size", [1, 2, 3])
def test_partitioned_any_order(world, size):
    parts, per = 6, 5
    for r, (out, errs) in enumerate(world(size).run(r_partitioned, parts, per, 7)):
        src = (r - 1) % size
        for run in range(2):
            want = np.concatenate([payload(src, r, run, per) + p for p in range(parts)])
            assert out[run] == want.tolist()
        assert errs == ["partition", True]


# -- buffered sends -----------------------------------------------------------------

def r_bsend(comm):
    n, r = comm.size, comm.rank
    dst, src = (r + 1) % n, (r - 1) % n
    log = []
    msg = payload(r, dst, 31, 50)
    try:
        comm.Bsend(msg, dst, 31)
        log.append("sent without a buffer")
    except GloocyError as e:
        log.append(e.error_class == ERR_BUFFER)
    small = bytearray(msg.nbytes + BSEND_OVERHEAD - 1)
    comm.Attach_buffer(small)
    try:
        comm.Bsend(msg, dst, 31)
        log.append("sent into a small buffer")
    except GloocyError as e:
        log.append(e.error_class == ERR_BUFFER)
    log.append(comm.Detach_buffer() is small)
    mem = bytearray(2 * (msg.nbytes + BSEND_OVERHEAD))
    comm.Attach_buffer(mem)
    comm.Bsend(msg, dst, 31)
    comm.Ibsend(msg + 1, dst, 32).Wait()         # complete locally
    log.append(comm.Detach_buffer() is mem)
    comm.Attach_buffer(BUFFER_AUTOMATIC)
    for k in range(5):
        comm.bsend(("b", r, k), dst, 33)
    comm.Flush_buffer()
    comm.Detach_buffer()
    buf = np.zeros(50, np.int64)
    comm.Recv(buf, src, 31)
    log.append(buf.tolist() == payload(src, r, 31, 50).tolist())
    comm.Recv(buf, src, 32)
    log.append(buf.tolist() == (payload(src, r, 31, 50) + 1).tolist())
    log.append([comm.recv(None, src, 33) for _ in range(5)])
    comm.Barrier()
    return log


@pytest.mark.parametrize("size", [1, 2, 3])
def test_bsend_needs_a_buffer_that_fits(world, size):
    for r, log in enumerate(world(size).run(r_bsend)):
        src = (r - 1) % size
        assert log == [True, True, True, True, True, True,
                       [("b", src, k) for k in range(5)]]


# -- Isendrecv, Get_status_* ------------------------------------------------------

def r_isendrecv_and_get_status(comm):
    n, r = comm.size, comm.rank
    dst, src = (r + 1) % n, (r - 1) % n
    log = []
    buf = np.zeros(16, np.int64)
    st = Status()
    comm.Isendrecv(payload(r, dst, 41), dst, 41, buf, src, 41).Wait(st)
    log.append((st.Get_source(), buf[:st.Get_count() // 8].tolist()))
    rep = payload(r, dst, 42, 16)
    comm.Isendrecv_replace(rep, dst, 42, src, 42).Wait()
    log.append(rep.tolist())
    # Get_status_*: the requests stay active until Wait
    bufs = [np.zeros(16, np.int64) for _ in range(2)]
    reqs = [comm.Irecv(bufs[k], src, 43 + k) for k in range(2)]
    log.append(Request.Get_status_all(reqs))
    log.append(Request.Get_status_any(reqs))
    log.append(Request.Get_status_some(reqs))
    comm.Barrier()
    comm.Send(payload(r, dst, 43), dst, 43)
    comm.Send(payload(r, dst, 44), dst, 44)
    while not Request.Get_status_all(reqs):
        time.sleep(0.001)
    sts = [Status(), Status()]
    log.append(Request.get_status_all(reqs, sts))
    log.append([s.Get_tag() for s in sts])
    log.append(Request.Get_status_some(reqs))
    log.append(all(bool(q) for q in reqs))       # still active
    Request.Waitall(reqs)
    log.append([b[:len(payload(src, r, 43 + k))].tolist() for k, b in enumerate(bufs)])
    return log


@pytest.mark.parametrize("size", [1, 2, 3])
def test_isendrecv_and_get_status(world, size):
    from gloocy.constants import UNDEFINED
    for r, log in enumerate(world(size).run(r_isendrecv_and_get_status)):
        src = (r - 1) % size
        assert log[0] == (src, payload(src, r, 41).tolist())
        assert log[1] == payload(src, r, 42, 16).tolist()
        assert log[2:5] == [False, (UNDEFINED, False), []]
        assert log[5:9] == [True, [43, 44], [0, 1], True]
        assert log[9] == [payload(src, r, 43).tolist(), payload(src, r, 44).tolist()]


def r_issend_to_self(comm):
    """An Issend to ourselves stays pending while the message is only
    probed, and is done once a receive takes it; waiting for it with no
    receive and no other thread is a deadlock, named."""
    r = comm.rank
    log = []
    req = comm.Issend(payload(r, r, 123), r, 123)
    st = Status()
    comm.Probe(ANY_SOURCE, ANY_TAG, st)
    log.append((st.Get_source(), st.Get_tag(), bool(req), req.Test()))
    buf = np.zeros(16, np.int64)
    comm.Recv(buf, r, 123, st)
    log.append((req.Test(), buf[:st.Get_count() // 8].tolist()))
    req = comm.Issend(payload(r, r, 124), r, 124)
    try:
        req.Wait()
        log.append("no error")
    except ContextPoisoned as e:
        log.append("wait forever" in str(e))
    comm.Recv(buf, r, 124)
    log.append(req.Test())
    comm.Barrier()
    return log


@pytest.mark.parametrize("size", [1, 2])
def test_issend_to_self_waits_for_the_receive(world, size):
    for r, log in enumerate(world(size).run(r_issend_to_self)):
        assert log == [(r, 123, True, False),
                       (True, payload(r, r, 123).tolist()), True, True]
