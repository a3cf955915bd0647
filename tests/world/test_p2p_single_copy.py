"""Single-copy point-to-point between local processes (issue 16): a message
of at least GLOOCY_CMA_P2P_MIN_BYTES goes through the shared-memory ring as
a small frame saying where it is in the sender's memory, and the receiver
reads it with process_vm_readv (transport/_shm.pyx). Real rank processes
over shared memory; every payload is checked against the NumPy array the
sender made (`payload`), every status against what was sent, and the
pairs' counters say which path each message took (`copies`), so that a
test of the single-copy path fails if the messages went through the ring.
"""

import os
import threading
import time

import numpy as np
import pytest

import gloocy
from gloocy import ANY_SOURCE, ANY_TAG, Status
from gloocy.errors import ERR_TRUNCATE
from gloocy.testing.processes import ProcessWorld as World

from test_node_derived import _refuse_cross_memory_attach

MIN = 64 << 10                      # the threshold the tests set
SHM = {"GLOOCY_TRANSPORT": "shm", "GLOOCY_CMA_P2P_MIN_BYTES": MIN}
AROUND = [MIN - 1, MIN, MIN + 1, 16 << 20]
BIG = 1 << 40                       # a threshold nothing reaches: the ring


def payload(src, dst, tag, n):
    """The n bytes rank `src` sends rank `dst` with `tag`."""
    return ((np.arange(n, dtype=np.int64) * (7 + src) + 31 * dst + tag)
            % 251).astype(np.uint8)


def copies(comm, peer):
    """(our sends `peer` read once, its messages we read once, whether we
    still send so, the errno that stopped our reads)."""
    return comm._ctx.links.pairs[peer].single_copies


def r_expected_and_unexpected(comm, sizes):
    """Rank 0 sends rank 1 each size twice: once to a posted Irecv
    (expected), once before rank 1 posts anything (unexpected: rank 1 is
    in a Recv of a later small message, so it reads the large one into the
    stash at once and the send completes). [(right, count, tag)] and the
    counters."""
    out = []
    for n in sizes:
        if comm.rank == 0:
            comm.Recv(bytearray(1), 1, 90)              # rank 1's Irecv is up
            comm.Send(payload(0, 1, 1, n), 1, 1)
            comm.Send(payload(0, 1, 2, n), 1, 2)        # unexpected
            comm.Send(b"x", 1, 3)
        else:
            buf = np.zeros(n, np.uint8)
            st = Status()
            req = comm.Irecv(buf, 0, 1)
            comm.Send(b"!", 0, 90)
            req.Wait(st)
            out.append((np.array_equal(buf, payload(0, 1, 1, n)),
                        st.Get_count(), st.Get_tag()))
            comm.Recv(bytearray(1), 0, 3)               # 2 comes meanwhile
            buf2 = np.zeros(n, np.uint8)
            comm.Recv(buf2, 0, 2, st)
            out.append((np.array_equal(buf2, payload(0, 1, 2, n)),
                        st.Get_count(), st.Get_tag()))
    return out, copies(comm, 1 - comm.rank)


@pytest.mark.parametrize("threshold", [MIN, BIG])
def test_sizes_around_the_threshold_expected_and_unexpected(threshold):
    with World(2, env={**SHM, "GLOOCY_CMA_P2P_MIN_BYTES": threshold}) as w:
        got = w.run(r_expected_and_unexpected, AROUND, timeout=90)
    results, counts = got[1]
    assert results == [(True, n, tag) for n in AROUND for tag in (1, 2)]
    once = 2 * sum(n >= threshold for n in AROUND)
    assert got[0][1] == (once, 0, True, 0)          # rank 0's sends read once
    assert counts == (0, once, True, 0)             # ... by rank 1


def r_both_send_first(comm, sizes, exchange):
    """Both ranks Send (or Isend, Irecv, Waitall) before they receive."""
    peer = 1 - comm.rank
    out = []
    for k, n in enumerate(sizes):
        mine, buf = payload(comm.rank, peer, k, n), np.zeros(n, np.uint8)
        if exchange:
            gloocy.MPI.Request.Waitall([comm.Isend(mine, peer, k),
                                        comm.Irecv(buf, peer, k)])
        else:
            comm.Send(mine, peer, k)
            comm.Recv(buf, peer, k)
        out.append(bool(np.array_equal(buf, payload(peer, comm.rank, k, n))))
    return out, copies(comm, peer)


@pytest.mark.parametrize("exchange", [False, True])
def test_both_ranks_send_before_they_receive(exchange):
    with World(2, env=SHM) as w:
        got = w.run(r_both_send_first, AROUND, exchange, timeout=90)
    for ok, (sent, read, still, err) in got:
        assert ok == [True] * len(AROUND)
        assert (sent, read, still, err) == (3, 3, True, 0)


def r_any_source(comm, n):
    """Ranks 1..N-1 each send rank 0 two messages of n bytes (tags 10+r,
    20+r); rank 0 takes them with ANY_SOURCE/ANY_TAG: [(source, tag,
    count, right)]."""
    if comm.rank:
        comm.Send(payload(comm.rank, 0, 10 + comm.rank, n), 0, 10 + comm.rank)
        comm.Send(payload(comm.rank, 0, 20 + comm.rank, n), 0, 20 + comm.rank)
        return copies(comm, 0)
    out = []
    for _ in range(2 * (comm.size - 1)):
        buf, st = np.zeros(n, np.uint8), Status()
        comm.Recv(buf, ANY_SOURCE, ANY_TAG, st)
        s, t = st.Get_source(), st.Get_tag()
        out.append((s, t, st.Get_count(),
                    bool(np.array_equal(buf, payload(s, 0, t, n)))))
    return sorted(out)


def test_any_source_gets_every_message_with_its_source_and_tag():
    n = MIN + 4096
    with World(3, env=SHM) as w:
        got = w.run(r_any_source, n, timeout=90)
    assert got[0] == sorted((s, base + s, n, True)
                            for s in (1, 2) for base in (10, 20))
    for sent, read, still, err in got[1:]:
        assert (sent, still, err) == (2, True, 0)


def r_probe(comm, n):
    """Rank 1 sends n bytes with tag 5 and n + 1 with tag 6; rank 0 probes
    each (Probe, Iprobe, Mprobe) before receiving it."""
    if comm.rank == 1:
        comm.Send(payload(1, 0, 5, n), 0, 5)
        comm.Send(payload(1, 0, 6, n + 1), 0, 6)
        comm.Send(payload(1, 0, 7, n + 2), 0, 7)
        return copies(comm, 0)
    out = []
    st = Status()
    comm.Probe(1, 5, st)
    out.append((st.Get_source(), st.Get_tag(), st.Get_count()))
    buf = np.zeros(st.Get_count(), np.uint8)
    comm.Recv(buf, 1, 5)
    out.append(bool(np.array_equal(buf, payload(1, 0, 5, n))))
    while not comm.Iprobe(1, ANY_TAG, st):
        time.sleep(0.001)
    out.append((st.Get_source(), st.Get_tag(), st.Get_count()))
    buf = np.zeros(st.Get_count(), np.uint8)
    comm.Recv(buf, 1, 6)
    out.append(bool(np.array_equal(buf, payload(1, 0, 6, n + 1))))
    msg = comm.Mprobe(1, 7, st)
    out.append((st.Get_source(), st.Get_tag(), st.Get_count()))
    buf = np.zeros(st.Get_count(), np.uint8)
    msg.Recv(buf)
    out.append(bool(np.array_equal(buf, payload(1, 0, 7, n + 2))))
    return out


def test_probes_report_the_size_source_and_tag():
    n = MIN * 3
    with World(2, env=SHM) as w:
        got = w.run(r_probe, n, timeout=90)
    assert got[0] == [(1, 5, n), True, (1, 6, n + 1), True, (1, 7, n + 2), True]
    assert got[1][0] == 3


def r_many_in_flight(comm, sizes):
    """Every rank Isends each size to every other and Irecvs them in
    reverse order of tags; Waitall; [right]."""
    reqs, bufs = [], {}
    for p in range(comm.size):
        if p == comm.rank:
            continue
        for t, n in reversed(list(enumerate(sizes))):
            bufs[p, t] = np.zeros(n, np.uint8)
            reqs.append(comm.Irecv(bufs[p, t], p, t))
    sends = [payload(comm.rank, p, t, n) for p in range(comm.size)
             for t, n in enumerate(sizes)]
    k = 0
    for p in range(comm.size):
        for t, n in enumerate(sizes):
            if p != comm.rank:
                reqs.append(comm.Isend(sends[k], p, t))
            k += 1
    gloocy.MPI.Request.Waitall(reqs)
    return [bool(np.array_equal(b, payload(p, comm.rank, t, b.size)))
            for (p, t), b in sorted(bufs.items())]


def test_many_isends_and_irecvs_in_flight():
    sizes = [MIN, 1, MIN + 1, 3 * MIN, MIN - 1, 1 << 20, 0, 2 * MIN + 7]
    with World(3, env=SHM) as w:
        got = w.run(r_many_in_flight, sizes, timeout=90)
    assert got == [[True] * (2 * len(sizes))] * 3


def r_ssend_waits(comm, n):
    """Rank 0 Issends n bytes; rank 1 reads it (it is in a receive of
    another message) but matches it only later: the Issend is not done
    until then. (done before the match, right)."""
    if comm.rank == 0:
        req = comm.Issend(payload(0, 1, 1, n), 1, 1)
        comm.Send(b"a", 1, 9)
        comm.Recv(bytearray(1), 1, 10)      # rank 1 has read tag 1 by now
        early = req.Test()
        comm.Send(b"b", 1, 11)
        req.Wait()
        return early
    comm.Recv(bytearray(1), 0, 9)
    comm.Send(b"c", 0, 10)
    comm.Recv(bytearray(1), 0, 11)
    buf = np.zeros(n, np.uint8)
    comm.Recv(buf, 0, 1)
    return bool(np.array_equal(buf, payload(0, 1, 1, n))), copies(comm, 0)


def test_ssend_completes_only_once_matched():
    with World(2, env=SHM) as w:
        early, (right, counts) = w.run(r_ssend_waits, 2 * MIN, timeout=90)
    assert early is False and right
    assert counts[1] == 1


def r_truncated(comm, n):
    if comm.rank == 1:
        comm.Send(payload(1, 0, 2, n), 0, 2)
        return "sent"
    try:
        comm.Recv(bytearray(n - 1), 1, 2)
        return "no error"
    except gloocy.MismatchError as e:
        return ("MismatchError", e.error_class == ERR_TRUNCATE,
                f"{n} bytes" in str(e), "rank 1" in str(e))


@pytest.mark.parametrize("threshold", [MIN, BIG])
def test_a_receive_too_small_is_the_same_error_on_both_paths(threshold):
    n = 2 * MIN
    with World(2, env={**SHM, "GLOOCY_CMA_P2P_MIN_BYTES": threshold}) as w:
        got = w.run(r_truncated, n, timeout=60, check=False)
    assert got[0] == ("MismatchError", True, True, True)


def r_refused(comm, how, sizes, ready):
    """Rank 0 cannot read rank 1 (GLOOCY_CMA=0 as its pair is made, or
    the kernel refuses it: seccomp); messages both ways, expected,
    unexpected and both-first: [right], the counters. (Rank 1 waits for
    the file `ready`: its first send makes the pair, lazily.)"""
    if comm.rank == 0:
        if how == "unwilling":
            os.environ["GLOOCY_CMA"] = "0"
        else:
            _refuse_cross_memory_attach()
        open(ready, "w").close()
    deadline = time.monotonic() + 20
    while not os.path.exists(ready) and time.monotonic() < deadline:
        time.sleep(0.005)
    ok = [r_expected_and_unexpected(comm, sizes)[0]]
    ok.append(r_both_send_first(comm, sizes, False)[0])
    ok.append(r_both_send_first(comm, sizes, True)[0])
    return ok, copies(comm, 1 - comm.rank)


@pytest.mark.parametrize("how", ["unwilling", "refused"])
def test_a_refused_read_falls_back_to_the_ring(how, tmp_path):
    """The first message to rank 0 is refused and comes streamed, later
    ones take the ring at once; rank 0's messages to rank 1 still copy
    once where rank 1 may read them (seccomp), not when rank 0 is
    unwilling (GLOOCY_CMA=0 stops its sends too)."""
    sizes = [MIN, 4 << 20]
    with World(2, env={**SHM, "GLOOCY_CONNECT": "lazy"}) as w:
        got = w.run(r_refused, how, sizes, str(tmp_path / "ready"), timeout=90)
    for ok, _ in got:
        assert ok[0] in ([], [(True, n, t) for n in sizes for t in (1, 2)])
        assert ok[1] == ok[2] == [True] * len(sizes)
    (sent0, read0, still0, err0), (sent1, read1, still1, err1) = got[0][1], got[1][1]
    assert read0 == 0 and sent1 == 0 and not still1     # 1 -> 0: ring
    assert err0 == (0 if how == "unwilling" else 1)     # EPERM
    if how == "unwilling":
        assert sent0 == read1 == 0 and not still0
    else:
        assert sent0 == read1 == 4 * len(sizes) and still0


def r_send_to_the_dying(comm, n, started):
    """Rank 0 sends rank 1 a large message that rank 1 never reads (it
    sleeps outside gloocy) until it is killed: (rank named, error)."""
    if comm.rank == 1:
        open(started, "w").close()
        time.sleep(60)
        return None
    try:
        comm.Send(payload(0, 1, 1, n), 1, 1)
        return "sent"
    except gloocy.errors.PeerLostError as e:
        return e.rank, type(e).__name__


def run_killing_rank_1(tmp_path, fn, n, after):
    """fn(comm, n, started) in a world of 2; rank 1 is killed `after` s
    once the file `started` appears: what each rank returned."""
    started = str(tmp_path / "started")
    with World(2, env=SHM) as w:
        def kill():
            deadline = time.monotonic() + 25
            while not os.path.exists(started) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(after)
            w.kill(1)
        killer = threading.Thread(target=kill)
        killer.start()
        try:
            return w.run(fn, n, started, timeout=40, check=False)
        finally:
            killer.join()


def test_a_receiver_killed_while_a_send_waits_is_named(tmp_path):
    got = run_killing_rank_1(tmp_path, r_send_to_the_dying, 16 << 20, 0.3)
    assert got[0] == (1, "PeerLostError")


def r_recv_forever(comm, n, started):
    """Rank 1 sends rank 0 large messages until killed; rank 0 receives
    them: (rank named, messages right before)."""
    if comm.rank == 1:
        k = 0
        while True:
            comm.Send(payload(1, 0, k % 7, n), 0, k % 7)
            if k == 3:
                open(started, "w").close()
            k += 1
    right = 0
    buf = np.zeros(n, np.uint8)
    st = Status()
    try:
        while True:
            comm.Recv(buf, 1, ANY_TAG, st)
            right += bool(np.array_equal(buf, payload(1, 0, st.Get_tag(), n)))
    except gloocy.errors.PeerLostError as e:
        return e.rank, right, copies(comm, 1)[1]


def test_a_sender_killed_mid_stream_is_named(tmp_path):
    got = run_killing_rank_1(tmp_path, r_recv_forever, 4 << 20, 0.2)
    lost, right, reads = got[0]
    assert lost == 1 and right >= 4 and reads >= right


def r_buffer_gone(comm, n, ready):
    """Rank 1 Isends from a mapping it then unmaps (as if its frame named
    memory it does not have) before rank 0 receives: rank 0's read fails,
    naming rank 1 (rank 1's process then ends)."""
    import ctypes
    import mmap
    if comm.rank == 1:
        m = mmap.mmap(-1, n)
        arr = np.frombuffer(m, np.uint8)
        arr[:] = payload(1, 0, 1, n)
        req = comm.Isend(arr, 0, 1)
        libc = ctypes.CDLL(None, use_errno=True)
        addr = arr.__array_interface__["data"][0]
        assert libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(n)) == 0
        open(ready, "w").close()
        try:
            req.Wait()              # (rank 0 stops on its error: ours then)
        finally:
            os._exit(0)             # the mapping's object must not unmap again
    deadline = time.monotonic() + 20
    while not os.path.exists(ready) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        comm.Recv(np.zeros(n, np.uint8), 1, 1)
        return "received"
    except gloocy.errors.ProtocolError as e:
        return "ProtocolError", "rank 1" in str(e), "could not be read" in str(e)


def test_a_message_whose_memory_is_gone_is_a_protocol_error_naming_the_sender(tmp_path):
    with World(2, env=SHM) as w:
        got = w.run(r_buffer_gone, 1 << 20, str(tmp_path / "ready"), timeout=40,
                    check=False)
    assert got[0] == ("ProtocolError", True, True)


SPLIT = 256 << 10                   # GLOOCY_CMA_P2P_SPLIT_MIN_BYTES in the tests


def r_split(comm, sizes, refuse_writes):
    """Rank 1 sends rank 0 a message to prove the reads, then one of each
    size to a posted Irecv (rank 0 copies the first half, rank 1 writes
    the second, unless its writes are refused: seccomp): [right], rank
    0's split counters, rank 1's."""
    if comm.rank == 1 and refuse_writes:
        _refuse_cross_memory_attach()       # rank 1 neither reads nor writes
    out = []
    for k, n in enumerate([MIN] + sizes):
        if comm.rank == 0:
            buf = np.zeros(n, np.uint8)
            req = comm.Irecv(buf, 1, k)
            comm.Send(b"!", 1, 90)
            req.Wait()
            out.append(bool(np.array_equal(buf, payload(1, 0, k, n))))
        else:
            comm.Recv(bytearray(1), 0, 90)
            comm.Send(payload(1, 0, k, n), 0, k)
    return out, comm._ctx.links.pairs[1 - comm.rank].split_copies


@pytest.mark.parametrize("refuse_writes", [False, True])
def test_large_posted_receives_are_copied_half_by_each_process(refuse_writes):
    # (16 MiB ten times: a sender the machine's load keeps from its CPU
    # loses its half, taken back; at least one must be written)
    sizes = [SPLIT - 1, SPLIT, SPLIT + 12345] + [(16 << 20) + 3] * 10
    env = {**SHM, "GLOOCY_CMA_P2P_SPLIT_MIN_BYTES": SPLIT}
    with World(2, env=env) as w:
        got = w.run(r_split, sizes, refuse_writes, timeout=90)
    assert got[0][0] == [True] * (1 + len(sizes))
    halves, taken, _ = got[0][1]
    if refuse_writes:           # its writes fail (then it tries none): 0 halves
        assert halves == 0 and taken <= len(sizes) - 1
        assert got[1][1][:2] == (0, 0)
    else:                       # every receive from SPLIT split, one way or other
        assert halves + taken == len(sizes) - 1 and halves >= 1
        assert got[1][1] == (0, 0, True)


def r_split_by_default(comm, n):
    """Rank 1 sends rank 0 two messages of n bytes to posted receives (the
    first proves the reads): rank 0's split counters (halves, taken)."""
    for k in range(2):
        if comm.rank == 0:
            buf = np.zeros(n, np.uint8)
            req = comm.Irecv(buf, 1, k)
            comm.Send(b"!", 1, 90)
            req.Wait()
            assert np.array_equal(buf, payload(1, 0, k, n))
        elif comm.rank == 1:
            comm.Recv(bytearray(1), 0, 90)
            comm.Send(payload(1, 0, k, n), 0, k)
    return comm._ctx.links.pairs[1].split_copies[:2] if comm.rank == 0 else None


@pytest.mark.parametrize("size", [2, 3])
def test_receives_split_by_default_only_where_every_local_rank_has_a_cpu(size):
    from gloocy.waiting import usable_cpus
    if usable_cpus() < 2:
        pytest.skip("one usable CPU: no split at any size")
    env = {k: v for k, v in SHM.items() if k != "GLOOCY_CMA_P2P_MIN_BYTES"}
    with World(size, env=env) as w:
        halves, taken = w.run(r_split_by_default, 1 << 20, timeout=60)[0]
    assert halves + taken == (1 if size <= usable_cpus() else 0)


def r_unexpected_in_turn(comm, sizes):
    """Rank 1 sends rank 0 each message before rank 0 posts its receive
    (rank 0 waits in a Recv of a small one sent after it), one at a time:
    each stash reuses the spare buffer the one before left (larger than
    some messages). Rank 0 probes each, then takes it (Recv, or a matched
    Mprobe's Recv): [(probed count, right)]."""
    out = []
    for k, n in enumerate(sizes):
        if comm.rank == 1:
            comm.Send(payload(1, 0, k, n), 0, k)
            comm.Send(b"x", 0, 100 + k)
            continue
        comm.Recv(bytearray(1), 1, 100 + k)
        st = Status()
        if k % 2:
            msg = comm.Mprobe(1, k, st)
            buf = np.zeros(st.Get_count(), np.uint8)
            msg.Recv(buf)
        else:
            comm.Probe(1, k, st)
            buf = np.zeros(st.Get_count(), np.uint8)
            comm.Recv(buf, 1, k)
        out.append((st.Get_count(), bool(np.array_equal(buf, payload(1, 0, k, n)))))
    return out


def test_unexpected_messages_one_after_another_keep_their_sizes():
    sizes = [3 << 20, (1 << 20) + 5, (2 << 20) + 7, 5 << 20, MIN + 1]
    with World(2, env=SHM) as w:
        got = w.run(r_unexpected_in_turn, sizes, timeout=90)
    assert got[0] == [(n, True) for n in sizes]
