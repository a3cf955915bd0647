"""The shared-memory transport: which pairs use it, what it leaves behind
(nothing), how it fails (a named peer, never a hang), and what a peer
scribbling over the shared rings gets (an error, never a bad copy)."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import gloocy
from gloocy.errors import PeerLostError, ProtocolError
from gloocy.rendezvous import HashStore
from gloocy.testing.processes import ProcessWorld as World
from conftest import repeats


def pair_kinds(comm):
    return [type(p).__name__ if p is not None else None
            for p in comm._ctx.links.pairs]


def everyone_to_everyone(comm):
    """A message each way between every two ranks (point to point: node
    collectives would use no pair)."""
    r, n = comm.rank, comm.size
    got = [r] * n
    for k in range(1, n):
        got[(r - k) % n] = comm.sendrecv(r, dest=(r + k) % n, source=(r - k) % n)
    return got


def total(comm, n):
    x = np.full(n, comm.rank + 1.0)
    comm.Allreduce(gloocy.IN_PLACE, x)
    return bool(np.all(x == comm.size * (comm.size + 1) / 2))


@pytest.mark.parametrize("env, expect", [
    ({}, lambda r, p: "ShmPair"),
    ({"GLOOCY_TRANSPORT": "tcp"}, lambda r, p: "TcpPair"),
    ({"GLOOCY_TEST_HOSTS": "2"},
     lambda r, p: "ShmPair" if r % 2 == p % 2 else "TcpPair"),
])
@pytest.mark.parametrize("connect", ["eager", "lazy"])
def test_each_pair_uses_the_transport_its_hosts_allow(env, expect, connect):
    with World(5, env={**env, "GLOOCY_CONNECT": connect}) as w:
        if connect == "lazy":             # every pair, connected on first use
            assert w.run(everyone_to_everyone) == [list(range(5))] * 5
        kinds = w.run(pair_kinds)
        assert w.run(total, 100_000) == [True] * 5
    for r in range(5):
        assert kinds[r] == [None if p == r else expect(r, p) for p in range(5)]


@pytest.fixture(autouse=True)
def eager_unless_asked(request, monkeypatch):
    """These tests check the shared-memory pairs made at set-up and what is
    left behind: the full mesh (GLOOCY_CONNECT=eager), unless a test says
    otherwise (lazy pairs: tests/world/test_lazy_connect.py)."""
    if "connect" not in request.fixturenames:
        monkeypatch.setenv("GLOOCY_CONNECT", "eager")


def connect_threads(size):
    """`size` communicators in threads of this process, over one HashStore
    (so every pair is local)."""
    store, comms, errors = HashStore(), [None] * size, []

    def one(rank):
        try:
            comms[rank] = gloocy.connect(rank, size, store, secret=b"k" * 32,
                                         job="threads", timeout=20)
        except BaseException as e:
            errors.append(e)
    threads = [threading.Thread(target=one, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return comms


def in_threads(comms, fn):
    out, errors = [None] * len(comms), []

    def one(rank):
        try:
            out[rank] = fn(comms[rank])
        except BaseException as e:
            errors.append((rank, e))
    threads = [threading.Thread(target=one, args=(r,)) for r in range(len(comms))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out, dict(errors)


def shm_files():
    return sorted(os.listdir("/dev/shm"))


def test_nothing_is_left_behind_in_dev_shm_fds_or_threads():
    before = (shm_files(), len(os.listdir("/proc/self/fd")),
              threading.active_count())
    for _ in range(3):
        comms = connect_threads(3)
        assert all(k in (None, "ShmPair") for c in comms for k in pair_kinds(c))
        out, errors = in_threads(comms, lambda c: total(c, 1 << 20))
        assert not errors and out == [True] * 3
        for c in comms:
            c.Free()
    after = (shm_files(), len(os.listdir("/proc/self/fd")),
             threading.active_count())
    assert after == before


def _ring_mappings():
    with open("/proc/self/maps") as f:
        return [line for line in f if "memfd:gloocy-ring" in line]


def _shared_segment(before):
    """(address, ring bytes) of the gloocy shared segment mapped here since
    `before` (_ring_mappings(): the test process may hold other worlds'
    rings) by both ranks: two mappings of one memfd."""
    old = {line.split()[4] for line in before}
    found = [line for line in _ring_mappings() if line.split()[4] not in old]
    assert len({line.split()[4] for line in found}) == 1, found   # one inode
    lo, hi = (int(a, 16) for a in found[0].split()[0].split("-"))
    return lo, 1 << ((hi - lo - 2 * RING_CTL) // 2).bit_length() - 1


def _memory(address, data=None, n=8):
    """Write `data` at `address` of this process, or read n bytes there."""
    with open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(address)
        return mem.write(data) if data is not None else mem.read(n)


RING_CTL = 192      # bytes of one ring's positions and flags (see _shm.pyx)


def _jump_head(base, ring):
    """The first ring's write position jumps past anything it can hold."""
    head = int.from_bytes(_memory(base), "little")
    _memory(base, (head + 2 * ring).to_bytes(8, "little"))


def _garbage_frame(base, ring):
    """48 bytes of garbage arrive in the first ring as a frame header."""
    head = int.from_bytes(_memory(base), "little")
    _memory(base + 2 * RING_CTL + head % ring, os.urandom(48))
    _memory(base, (head + 48).to_bytes(8, "little"))


@pytest.mark.parametrize("damage, error", [(_jump_head, PeerLostError),
                                           (_garbage_frame, ProtocolError)])
def test_a_peer_scribbling_on_the_rings_gets_an_error_not_a_copy(damage, error):
    before = _ring_mappings()
    comms = connect_threads(2)
    try:
        damage(*_shared_segment(before))
        buf = np.zeros(4)
        with pytest.raises(error) as info:
            comms[1].Recv(buf, source=0, timeout=5)
        assert "rank 0" in str(info.value)
        assert not buf.any()
    finally:
        for c in comms:
            c.Free()


def wait_on_last_rank(comm, n):
    """Block in an allreduce (n == 1), in a large send to the last rank
    (n > 1) or in a receive from it (n == 0), which never comes; (lost
    rank, when it was noticed)."""
    x = np.ones(n)
    try:
        if n == 0:
            comm.Recv(np.ones(1), source=comm.size - 1)
        elif n > 1:
            comm.Send(x, dest=comm.size - 1)
        else:
            comm.Allreduce(gloocy.IN_PLACE, x)
    except PeerLostError as e:
        return e.rank, time.monotonic()
    return None, time.monotonic()


def kill_the_last_rank(env, n, size=3, fn=wait_on_last_rank):
    """In a world of `size` with `env`, the others wait on the last rank
    (`fn(comm, n)`: wait_on_last_rank), which is killed after 0.5 s: per
    survivor, (the rank it names as lost, seconds from the kill to its
    error)."""
    with World(size, env=env) as w:
        killed_at = []

        def kill():
            killed_at.append(time.monotonic())
            w.kill(size - 1)
        timer = threading.Timer(0.5, kill)
        timer.start()
        try:
            got = w.run(fn, n, ranks=list(range(size - 1)), timeout=30)
        finally:
            timer.cancel()
    return [(lost, noticed - killed_at[0]) for lost, noticed in got]


@pytest.mark.parametrize("n", [1, 8 << 20], ids=["in-an-allreduce",
                                                 "in-a-large-send"])
def test_a_killed_local_peer_is_named_within_a_second(n):
    for lost, after in kill_the_last_rank({"GLOOCY_TRANSPORT": "shm"}, n):
        assert lost == 2
        assert 0 <= after < 1.0


SLEEPER = """
import os, time, numpy as np, gloocy
comm = gloocy.init()
x = np.ones(1 << 16)
comm.Allreduce(gloocy.IN_PLACE, x)
print("ready", x[0], os.getpid(), flush=True)
time.sleep(60)
"""


def test_jobs_killed_whole_again_and_again_leave_nothing_and_restart(tmp_path):
    """Three times (twenty under --long)."""
    prog = tmp_path / "sleeper.py"
    prog.write_text(SLEEPER)
    before = shm_files()
    for _ in range(repeats(20)):
        job = subprocess.Popen([sys.executable, "-m", "gloocy.run", "-n", "3",
                                sys.executable, str(prog)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
        pids = []
        try:
            for _ in range(3):
                line = job.stdout.readline().decode()
                assert "ready 3.0" in line, job.stderr.read().decode()[-3000:]
                pids.append(int(line.split()[-1]))
        finally:
            os.kill(job.pid, signal.SIGKILL)     # the launcher; its ranks follow
            job.communicate()
        deadline = time.monotonic() + 10
        while any(os.path.exists(f"/proc/{p}") and _state(p) != "Z" for p in pids):
            assert time.monotonic() < deadline, "ranks outlived their launcher"
            time.sleep(0.02)
    assert shm_files() == before
    done = subprocess.run([sys.executable, "-m", "gloocy.run", "-n", "3",
                           sys.executable, "-c", SLEEPER.replace("time.sleep(60)", "")],
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.decode().count("ready 3.0") == 3


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_forced_shm_names_the_peer_on_another_host():
    env = {"GLOOCY_TRANSPORT": "shm", "GLOOCY_TEST_HOSTS": "2"}
    with pytest.raises(AssertionError) as info:     # the world fails to start
        World(2, env=env, timeout=20).close()
    assert "RendezvousError" in str(info.value)
    assert "GLOOCY_TRANSPORT=shm, but rank 1" in str(info.value)
    assert "is on another host" in str(info.value)


def r_node_mismatch(comm, t):
    """Ranks disagree on the count of a node allreduce."""
    x = np.ones(4 + comm.rank)
    try:
        comm.Allreduce(gloocy.IN_PLACE, x, timeout=t)
    except gloocy.GloocyError as e:
        return type(e).__name__, str(e), comm._ctx.last_algorithm
    return "ok", "", comm._ctx.last_algorithm


def r_node_late(comm, t):
    """The last rank stays away from a node allreduce and a barrier."""
    if comm.rank == comm.size - 1:
        time.sleep(2 * t + 0.5)
        return None
    out = []
    for call in (lambda: comm.Allreduce(gloocy.IN_PLACE, np.ones(1 << 20), timeout=t),
                 lambda: comm.Barrier(timeout=t)):
        t0 = time.monotonic()
        try:
            call()
            out.append(("ok", "", 0.0))
        except gloocy.GloocyError as e:
            out.append((type(e).__name__, str(e), time.monotonic() - t0))
    return out


def test_node_collectives_name_a_mismatch_and_a_missing_rank():
    with World(2, env={"GLOOCY_TRANSPORT": "shm"}) as w:
        got = w.run(r_node_mismatch, 5.0, check=False)
    for rank, (kind, msg, algorithm) in enumerate(got):
        assert algorithm == "shm"
        assert kind == "MismatchError", msg
        assert f"rank {1 - rank} called allreduce" in msg, msg
    with World(3, env={"GLOOCY_TRANSPORT": "shm"}) as w:
        got = w.run(r_node_late, 1.0, timeout=30)
    for rank in (0, 1):
        (kind, msg, seconds), second = got[rank]
        assert kind == "CollectiveTimeout" and "rank(s) 2" in msg, msg
        assert 1.0 <= seconds < 5.0
        assert second[0] == "ContextPoisoned"      # the timeout poisoned it


# -- rings sized by the number of local ranks (issue 16, item 4) ---------------

def ring_traffic(comm, ring):
    """Messages of sizes around `ring` between every two ranks (so every
    pair is made, lazily or not), each checked against the NumPy array its
    sender made; then the sizes of this rank's rings, from its memfd
    mappings."""
    r, n = comm.rank, comm.size
    ok = []
    for nbytes in (1, ring - 1, ring, ring + 1, 3 * ring + 5, 1 << 20):
        for k in range(1, n):
            src, dst = (r - k) % n, (r + k) % n
            out = (np.arange(nbytes, dtype=np.int64) * 7 + r).astype(np.uint8)
            got = np.zeros(nbytes, np.uint8)
            comm.Sendrecv(out, dest=dst, recvbuf=got, source=src)
            want = (np.arange(nbytes, dtype=np.int64) * 7 + src).astype(np.uint8)
            ok.append(bool(np.array_equal(got, want)))
    with open("/proc/self/maps") as f:
        rings = [int(hi, 16) - int(lo, 16)
                 for lo, hi in (line.split()[0].split("-") for line in f
                                if "memfd:gloocy-ring" in line)]
    return all(ok), len(ok), rings


@pytest.mark.parametrize("connect", ["eager", "lazy"])
def test_rings_shrink_with_the_local_ranks_and_carry_every_size(connect):
    # 18 local ranks, every pair used: a ring is 4 MiB / 17 rounded down to
    # 128 KiB (up to 17 ranks: 256 KiB), but each rank's first 8 pairs keep
    # 256 KiB rings where the peer has one of its 8 left too. Messages below,
    # at and far above 128 KiB arrive whole over both sizes.
    n, full, small, page = 18, 256 << 10, 128 << 10, 4096
    with World(n, env={"GLOOCY_CONNECT": connect}, timeout=300) as w:
        got = w.run(ring_traffic, small)
    for ok, count, rings in got:
        assert ok and count == 6 * (n - 1)
        assert len(rings) == n - 1                      # a pair per peer
        sizes = [full if m >= 2 * full else small for m in rings]
        for m, size in zip(rings, sizes):
            assert 2 * size <= m <= 2 * size + 2 * page, rings
        assert sizes.count(full) <= 8, rings
    # rank 0 offers first to rank 1, which has all of its 8 left
    assert sum(m >= 2 * full for m in got[0][2]) >= 1
