"""Lazy connections (issue 19): a pair is connected on first use, once,
over the transport that applies; start-up reads and writes O(1) store keys
per rank; GLOOCY_CONNECT=eager keeps the full mesh."""

import math
import threading
import time

import numpy as np
import pytest

import gloocy
from conftest import long_runs
from gloocy.errors import PeerLostError
from gloocy.rendezvous.hash_store import HashStore
from gloocy.testing import World


def connected(comm):
    return comm._ctx.links.connected


def barrier_peers(rank, size):
    """Whom the barrier of `size` touches from `rank` (recursive doubling):
    with p the largest power of two <= size and rem = size - p, ranks
    below 2*rem pair up (2i with 2i+1) and the odd one of each pair stands
    for both as rank i of p; ranks from 2*rem stand as rank - rem; each
    stand-in meets those whose number differs from its own in one bit."""
    p = 1 << (size.bit_length() - 1)
    rem = size - p
    if rank < 2 * rem and rank % 2 == 0:
        return {rank + 1}
    me = rank // 2 if rank < 2 * rem else rank - rem
    peers = {rank - 1} if rank < 2 * rem else set()
    for bit in range(p.bit_length() - 1):
        other = me ^ (1 << bit)
        peers.add(2 * other + 1 if other < rem else other + rem)
    return peers


def dissemination_peers(rank, size):
    """Whom a dissemination barrier of `size` touches from `rank`."""
    return {(rank + s * k) % size for k in (1 << b for b in range(size.bit_length()))
            if k < size for s in (1, -1)}


def test_nothing_is_connected_at_start_up():
    with World(6) as w:
        assert w.run(connected) == [[]] * 6


def test_only_the_peers_used_are_connected():
    def exchange(comm):
        r = comm.Get_rank()
        x = np.array([r], dtype=np.int64)
        if r in (1, 4):
            other = 5 - r
            got = np.empty(1, dtype=np.int64)
            comm.Sendrecv(x, other, recvbuf=got, source=other)
            assert got[0] == other
        return connected(comm)

    with World(6) as w:
        assert w.run(exchange) == [[], [4], [], [], [1], []]


@pytest.mark.parametrize("kind", ["tcp", "shm"])
def test_barrier_connects_its_own_peers_only(kind):
    size = 12
    with World(size, transport=kind) as w:
        got = w.run(lambda comm: (comm.Barrier(), connected(comm))[1])
        if kind == "shm":      # all on one host: the node segment does it
            assert got == [[]] * size
        else:
            assert got == [sorted(barrier_peers(r, size)) for r in range(size)]


@pytest.mark.parametrize("size", [5, 6, 8, 12])
def test_barrier_and_allreduce_share_their_peers(size):
    """The barrier connects to no peer the allreduce (recursive doubling,
    128 B) would not: after both, each rank has the barrier's connections."""
    def both(comm):
        comm.Barrier()
        after_barrier = list(connected(comm))
        x = np.full(16, comm.Get_rank(), dtype=np.int64)
        comm.Allreduce(gloocy.IN_PLACE, x)
        assert (x == size * (size - 1) // 2).all()
        return after_barrier, list(connected(comm))

    with World(size, transport="tcp") as w:
        got = w.run(both)
    assert [b for b, _ in got] == [a for _, a in got]
    assert [b for b, _ in got] == [sorted(barrier_peers(r, size)) for r in range(size)]


@pytest.mark.parametrize("algorithm", ["recursive_doubling", "dissemination"])
@pytest.mark.parametrize("size", [2, 3, 5, 6, 7, 8, 9, 13, 16])
def test_barrier_over_tcp_waits_for_everyone(size, algorithm):
    """Nobody leaves the barrier before the last rank entered it, in
    rounds where a different rank is late each time (over the pairs:
    GLOOCY_ALGORITHM_BARRIER picks the algorithm)."""
    rounds, delay = 3, 0.05

    def timed(comm):
        times = []
        for k in range(rounds):
            if comm.Get_rank() == (3 * k + 1) % size:
                time.sleep(delay)
            entered = time.monotonic()
            comm.Barrier()
            times.append((entered, time.monotonic()))
        return times, connected(comm)

    with World(size, transport="tcp",
               env={"GLOOCY_ALGORITHM_BARRIER": algorithm}) as w:
        got, conns = zip(*w.run(timed))
    peers = barrier_peers if algorithm == "recursive_doubling" else dissemination_peers
    assert list(conns) == [sorted(peers(r, size)) for r in range(size)]
    for k in range(rounds):
        entries = [got[r][k][0] for r in range(size)]
        late = (3 * k + 1) % size
        assert entries[late] - min(entries) >= delay / 2   # (the check has teeth)
        assert min(got[r][k][1] for r in range(size)) >= max(entries), k


@pytest.mark.parametrize("size", [6, 8])
def test_barrier_against_another_collective_is_a_mismatch(size):
    """One rank calls an allreduce where the others call the barrier: no
    rank gets through, none hangs, and a MismatchError names both calls."""
    odd = size - 2

    def call(comm):
        try:
            if comm.Get_rank() == odd:
                comm.Allreduce(gloocy.IN_PLACE, np.ones(4), timeout=10)
            else:
                comm.Barrier(timeout=10)
        except gloocy.GloocyError as e:
            return type(e).__name__, str(e)
        return "through", ""

    with World(size, transport="tcp") as w:
        got = w.run(call, check=False)
    assert all(name != "through" for name, _ in got), got
    mismatches = [m for name, m in got if name == "MismatchError"]
    assert mismatches, got
    assert all("barrier" in m and "allreduce" in m for m in mismatches), mismatches


def test_both_sides_dial_at_once_connect_once():
    """Every rank sends to every other at the same moment: both ends of
    each pair dial; each pair ends up with one connection, data intact."""
    size = 10

    def all_to_all(comm):
        r = comm.Get_rank()
        send = np.arange(size, dtype=np.int64) + 100 * r
        recv = np.empty(size, dtype=np.int64)
        comm.Alltoall(send, recv)
        assert list(recv) == [100 * p + r for p in range(size)]
        c = comm._ctx.links.connector
        return connected(comm), c.dialed, c.accepted

    with World(size, transport="tcp") as w:     # (shm: the node segment does it)
        out = w.run(all_to_all)
    assert [o[0] for o in out] == [[p for p in range(size) if p != r]
                                    for r in range(size)]
    pairs = size * (size - 1) // 2
    assert sum(o[1] for o in out) == pairs      # one dial won per pair
    assert sum(o[2] for o in out) == pairs      # ... and one accept


def test_any_source_receive_from_an_unconnected_peer():
    def gather_any(comm):
        r, n = comm.Get_rank(), comm.Get_size()
        if r == 0:
            got = sorted(comm.recv(source=gloocy.ANY_SOURCE) for _ in range(n - 1))
            return got, connected(comm)
        comm.send(r * r, dest=0)
        return None, connected(comm)

    with World(5) as w:
        out = w.run(gather_any)
    assert out[0] == ([1, 4, 9, 16], [1, 2, 3, 4])
    assert [o[1] for o in out[1:]] == [[0]] * 4


def test_peer_gone_before_it_was_ever_connected_is_named():
    def send_to_3(comm):
        if comm.Get_rank() == 0:
            with pytest.raises(PeerLostError, match="rank 3") as e:
                comm.send(1, dest=3)
            return e.value.rank
        return None

    with World(4, comm_timeout=20.0) as w:
        w.kill(3)
        got = w.run(send_to_3, ranks=[0], check=False)
    assert got == [3]


@pytest.mark.parametrize("size", [6, 8])
def test_barrier_names_a_peer_gone_before_it_was_connected(size):
    """A rank dead before the barrier: every other rank's barrier raises
    within the deadline, naming it (first-hand or told by a partner)."""
    def barrier(comm):
        try:
            comm.Barrier(timeout=20)
        except gloocy.GloocyError as e:
            return type(e).__name__, getattr(e, "rank", None), str(e)
        return "through", None, ""

    with World(size, comm_timeout=20.0, transport="tcp") as w:
        w.kill(3)
        others = [r for r in range(size) if r != 3]
        got = w.run(barrier, ranks=others, check=False)
    assert all(name != "through" and "rank 3" in msg for name, _, msg in got), got
    assert any(name == "PeerLostError" and rank == 3 for name, rank, _ in got), got


def test_a_tree_bcast_names_its_root_gone_before_it_ever_spoke():
    """Past NODE_BCAST_TREE_MAX_RANKS (32) a node bcast runs as a tree: a
    member waits for its parent, itself waiting. The root's children ask
    after the root, not after the first rank behind (a live member
    waiting too), so every rank names it well before the deadline (each
    timed out naming it as `culprit`, 20 s, before)."""
    size, root = 40, 37

    def bcast(comm):
        t0 = time.monotonic()
        try:
            comm.Bcast(np.zeros(4), root=root, timeout=20)
        except gloocy.GloocyError as e:
            return type(e).__name__, getattr(e, "rank", None), time.monotonic() - t0
        return "through", None, 0.0

    with World(size, comm_timeout=30.0) as w:
        w.kill(root)
        got = w.run(bcast, ranks=[r for r in range(size) if r != root], check=False)
    assert all(name == "PeerLostError" and rank == root for name, rank, _ in got), got
    assert max(t for *_, t in got) < 10, got


def test_eager_knob_makes_the_full_mesh():
    with World(5, env={"GLOOCY_CONNECT": "eager"}) as w:
        assert w.run(connected) == [[p for p in range(5) if p != r] for r in range(5)]


class CountingStore:
    """A store client that counts its operations (by name)."""

    def __init__(self, inner):
        self.inner, self.ops = inner, {}
        self.lock = threading.Lock()

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name not in ("set", "get", "add", "wait", "check", "delete",
                        "clear", "compare_set", "batch"):
            return attr

        def counted(*args, **kwargs):
            with self.lock:
                if name == "batch":       # each operation of it, by name
                    for op in args[0]:
                        self.ops[op[0]] = self.ops.get(op[0], 0) + 1
                else:
                    self.ops[name] = self.ops.get(name, 0) + 1
            return attr(*args, **kwargs)
        return counted

    @property
    def total(self):
        return sum(self.ops.values())


@pytest.mark.parametrize("size", [16, 32])
@pytest.mark.parametrize("kind", ["tcp", "auto"])
def test_start_up_store_operations_are_o1_per_rank(size, kind, monkeypatch):
    monkeypatch.setenv("GLOOCY_TRANSPORT", kind)
    server = HashStore(timeout=30.0)
    stores = [CountingStore(server.client()) for _ in range(size)]
    comms = [None] * size
    errors = []

    def rank_main(r):
        try:
            comms[r] = gloocy.connect(r, size, stores[r], job="count",
                                      secret=b"k" * 32, timeout=30.0)
            comms[r].Barrier()
            at_start = stores[r].total
            x = np.ones(4)
            comms[r].Allreduce(gloocy.IN_PLACE, x)
            assert x[0] == size
            comms[r].results = (at_start, stores[r].total, connected(comms[r]))
        except BaseException as e:    # noqa: B036 -- shown below
            errors.append(e)
    in_threads(rank_main, size)
    try:
        assert not errors, errors
        for r, comm in enumerate(comms):
            at_start, after, peers = comm.results
            # claim, size, address, pid, host count, host, joined, go
            # (rank 0: all, host count again, go; the last to join: all)
            assert at_start - len(peers) <= 11, (r, stores[r].ops)
            # connecting reads one address per peer dialed, nothing else
            assert after - at_start <= len(peers)
            assert len(peers) <= 2 * math.ceil(math.log2(size)) + 2
    finally:
        free_all(comms, stores, server)
    # the last rank to leave cleared the job's keys
    assert server_keys_left(server, "count/") == 0


def in_threads(rank_main, size):
    """rank_main(r) for every rank r, each in a thread of its own."""
    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def free_all(comms, stores, server):
    """A test's end: every rank's communicator freed (those made), every
    store client and the store closed."""
    for comm in comms:
        if comm is not None:
            comm.Free()
    for s in stores:
        s.close()
    server.close()


def server_keys_left(server, prefix):
    client = server.client()
    try:
        return client.clear(prefix)
    finally:
        client.close()


@pytest.mark.parametrize("knob", ["GLOOCY_CMA_MIN_BYTES", "GLOOCY_SHM_CHUNK_BYTES",
                                  "GLOOCY_CMA_P2P_MIN_BYTES",
                                  "GLOOCY_CMA_P2P_SPLIT_MIN_BYTES"])
def test_a_bad_node_knob_is_named_by_every_rank_at_start_up(knob, monkeypatch):
    """(Rank 0 reads them to make the node segment: a bad one once left the
    job without a segment, silently.)"""
    monkeypatch.setenv(knob, "abc")
    size = 3
    server = HashStore(timeout=30.0)
    stores = [server.client() for _ in range(size)]
    errors = [None] * size

    def rank_main(r):
        try:
            gloocy.connect(r, size, stores[r], job="knob", secret=b"k" * 32,
                           timeout=10.0).Free()
        except ValueError as e:
            errors[r] = str(e)
    in_threads(rank_main, size)
    free_all([], stores, server)
    assert all(e is not None and knob in e for e in errors), errors


def test_scale_thread_world():
    """The suite's version of bench/scale.py: 96 ranks (1024 under
    --long), barrier, allreduce both ways, bcast: results right,
    connections within the bound."""
    size = 1024 if long_runs() else 96
    bound = 2 * math.ceil(math.log2(size)) + 2

    def run(comm):
        r = comm.Get_rank()
        comm.Barrier()
        for algorithm in ("ring", "recursive_doubling"):
            x = np.full(8, r, dtype=np.int64)
            comm.Allreduce(gloocy.IN_PLACE, x, algorithm=algorithm)
            assert (x == size * (size - 1) // 2).all()
        y = np.arange(16, dtype=np.int64) if r == 0 else np.zeros(16, dtype=np.int64)
        comm.Bcast(y, root=0)
        assert (y == np.arange(16)).all()
        return len(connected(comm))

    with World(size, timeout=600.0 if long_runs() else 120.0) as w:
        counts = w.run(run)
    assert max(counts) <= bound, counts


def test_dials_are_answered_without_a_thread_each(monkeypatch):
    """A process's listener answers every dial in its one thread: over TCP
    no thread is started for a connection (a barrier of 12 makes dozens)."""
    started = []
    real_start = threading.Thread.start

    def start(thread):
        started.append(getattr(thread, "_target", None))
        return real_start(thread)

    with World(12, transport="tcp") as w:
        monkeypatch.setattr(threading.Thread, "start", start)
        got = w.run(lambda comm: (comm.Barrier(), connected(comm))[1])
        monkeypatch.undo()
    assert sum(map(len, got)) == sum(len(barrier_peers(r, 12)) for r in range(12))
    lazy = [t for t in started
            if getattr(t, "__module__", "") == "gloocy.transport.lazy"]
    assert lazy == []


def test_ranks_of_a_process_never_look_each_other_up(monkeypatch):
    """Ranks living in one process know each other's address (their
    process's listener): connecting them reads no address from the store."""
    monkeypatch.setenv("GLOOCY_TRANSPORT", "tcp")
    size = 8
    server = HashStore(timeout=30.0)
    read = []

    class Recording:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            attr = getattr(self.inner, name)
            if name != "get":
                return attr

            def get(key, *args, **kwargs):
                read.append(key)
                return attr(key, *args, **kwargs)
            return get

    stores = [Recording(server.client()) for _ in range(size)]
    comms, errors = [None] * size, []

    def rank_main(r):
        try:
            comms[r] = gloocy.connect(r, size, stores[r], job="near",
                                      secret=b"k" * 32, timeout=30.0)
            comms[r].Barrier()
        except BaseException as e:    # noqa: B036 -- shown below
            errors.append(e)
    in_threads(rank_main, size)
    try:
        assert not errors, errors
        assert all(connected(c) for c in comms)
        assert [k for k in read if "/tcp/" in k] == []
    finally:
        free_all(comms, stores, server)


def test_unconnected_slots_share_one_stand_in_and_every_post_connects_them():
    # A nonblocking allreduce (a schedule's posts) and a synchronous send
    # (its acknowledgement's receive) go first to unconnected peers.
    from gloocy._core import UNCONNECTED

    def run(comm):
        r, n = comm.Get_rank(), comm.Get_size()
        links = comm._ctx.links
        before = [p for p in range(n) if p != r and links.pairs[p] is not UNCONNECTED]
        x = np.arange(4, dtype=np.int64) + r
        comm.Iallreduce(gloocy.IN_PLACE, x).Wait()
        got = np.empty(1, dtype=np.int64)
        if r == 0:
            comm.Ssend(np.array([7], dtype=np.int64), n - 1)
        elif r == n - 1:
            comm.Recv(got, 0)
        real = [links.pairs[p].peer for p in connected(comm)]
        stand_ins = {id(links.pairs[p]) for p in range(n)
                     if p != r and p not in connected(comm)}
        return before, x.tolist(), got[0] if r == n - 1 else None, real, \
            connected(comm), stand_ins <= {id(UNCONNECTED)}

    n = 5
    with World(n, transport="tcp") as w:
        results = w.run(run)
    want = (np.arange(4) * n + sum(range(n))).tolist()
    for r, (before, x, got, real, conn, shared) in enumerate(results):
        assert before == [] and x == want and shared, r
        assert real == conn                 # each real pair is to its own peer
        assert conn, r
    assert results[n - 1][2] == 7
    assert n - 1 in results[0][4] and 0 in results[n - 1][4]


def test_a_strangers_hello_delays_no_connection_for_long(monkeypatch):
    """A rank waits for a peer's dial its listener is answering rather than
    dial too; a stranger who sends a HELLO in that peer's name (knowing the
    job's name, not its secret) and then stays silent holds nothing up
    beyond that short wait: the rank dials, and its listener never takes
    the stranger's connection. (Rank 0 stays away from rank 1 until rank
    1's send is through: only rank 1's own dial can connect them, long
    before the listener would drop the silent stranger.)"""
    import hashlib
    import os
    import socket
    import struct

    monkeypatch.setenv("GLOOCY_TRANSPORT", "tcp")
    size, job, secret = 2, "hinted", b"h" * 32
    server = HashStore(timeout=30.0)
    stores = [server.client() for _ in range(size)]
    comms, errors, got = [None] * size, [], []
    joined, sent = threading.Barrier(size + 1), threading.Event()
    stranger = None

    def rank_main(r):
        try:
            comms[r] = gloocy.connect(r, size, stores[r], job=job, secret=secret,
                                      timeout=30.0)
            joined.wait(30)           # the stranger knocks meanwhile
            joined.wait(30)
            if r == 1:
                comms[1].Send(np.arange(4.0), dest=0)
                sent.set()
            else:
                assert sent.wait(20), "rank 1's send did not get through"
                x = np.empty(4)
                comms[0].Recv(x, source=1)
                got.append(x)
        except BaseException as e:    # noqa: B036 -- shown below
            errors.append(e)
            joined.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    try:
        joined.wait(30)
        host, _, port = stores[0].get(f"{job}/tcp/1", timeout=10).decode().rpartition(":")
        stranger = socket.create_connection((host, int(port)), timeout=10)
        tag = hashlib.sha256(job.encode()).digest()[:16]
        stranger.sendall(struct.pack("<8sIiiI16s32s", b"GLCYHELO", 1, 0, 1, size, tag,
                                     os.urandom(32)))
        challenge = b""
        while len(challenge) < 64:    # answered: the listener took it as rank 0's
            challenge += stranger.recv(64 - len(challenge))
        joined.wait(30)
        for t in threads:
            t.join(60)
        assert not errors, errors
        np.testing.assert_array_equal(got[0], np.arange(4.0))
        c1 = comms[1]._ctx.links.connector
        assert (c1.dialed, c1.accepted) == (1, 0)
        # The stranger hangs up mid-handshake: dropped; the listener goes on.
        stranger.close()
        stranger = None
        time.sleep(0.5)
        assert c1.listener.thread.is_alive()
    finally:
        if stranger is not None:
            stranger.close()
        free_all(comms, stores, server)

