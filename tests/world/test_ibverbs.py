"""The ibverbs transport on the libibverbs stand-in (tests/ibmock): which
pairs use it, what set-up says when RDMA is missing, and how it fails (a
named peer or a ProtocolError, never a hang or a bad copy): a peer killed
mid-rendezvous, a bad rkey, a queue pair forced into the error state, a
port that goes down while ranks only wait (an asynchronous event), the
registration limits (how many, how many bytes) and the registration cache
under buffer churn (freed and allocated again at the same address: the
stand-in fails an access through a registration whose pages changed). Nothing here ran on real RDMA hardware."""

import gc
import os
import signal
import threading
import time

import numpy as np
import pytest

import gloocy
from gloocy.testing import RankFailure
from gloocy.testing.processes import ProcessWorld as World
import ibmock
from test_shm import everyone_to_everyone, pair_kinds, total

MISSING = ibmock.missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"the ibverbs stand-in "
                                f"cannot be built here: {MISSING}")


@pytest.fixture(scope="module")
def ib_env():
    # Pairs are connected on first use: the stand-in's fds for them come
    # during calls, and count as the connections' (ibmock.held_fds).
    return {**ibmock.session_env(), "GLOOCY_TRANSPORT": "ibverbs",
            "GLOOCY_TEST_HELD_FDS": "ibmock:held_fds"}


@pytest.mark.parametrize("extra, expect", [
    ({}, lambda r, p: "IbvPair"),
    # auto, two pretend hosts: shared memory within one, RDMA across
    ({"GLOOCY_TRANSPORT": "auto", "GLOOCY_TEST_HOSTS": "2"},
     lambda r, p: "ShmPair" if r % 2 == p % 2 else "IbvPair"),
])
def test_each_pair_uses_the_transport_its_hosts_allow(ib_env, extra, expect):
    with World(4, env={**ib_env, **extra}) as w:
        # every pair, connected on first use
        assert w.run(everyone_to_everyone) == [list(range(4))] * 4
        kinds = w.run(pair_kinds)
        assert w.run(total, 200_000) == [True] * 4
    for r in range(4):
        assert kinds[r] == [None if p == r else expect(r, p) for p in range(4)]


def test_a_roce_port_is_addressed_by_the_chosen_gid(ib_env):
    # the stand-in's RoCE port has no LIDs: RTR needs a global route
    env = {**ib_env, "GLOOCY_IBMOCK_LINK_LAYER": "ethernet", "GLOOCY_IB_GID_INDEX": "3"}
    with World(2, env=env) as w:
        assert w.run(total, 50_000) == [True] * 2


def start_error(env, size=2):
    with pytest.raises(RankFailure) as info:
        World(size, env=env, timeout=30).close()
    errors = info.value.errors
    assert errors, info.value
    return [e.message for e in errors.values()]


@pytest.mark.parametrize("extra, why", [
    ({"GLOOCY_IB_LIBRARY": "/nonexistent/libibverbs.so.1"}, "cannot load"),
    ({"GLOOCY_IB_HCA": "^mock"}, "selects none of the devices ['mock0']"),
    ({"GLOOCY_IBMOCK_PORT_DOWN": "1"}, "port 1 of mock0 is not active"),
    ({"GLOOCY_IBMOCK_LINK_LAYER": "ethernet", "GLOOCY_IB_GID_INDEX": "9"},
     "has no GID index 9"),
])
def test_ibverbs_without_a_usable_device_is_a_clear_error(ib_env, extra, why):
    for message in start_error({**ib_env, **extra}):
        assert "GLOOCY_TRANSPORT=ibverbs" in message and why in message, message


@pytest.mark.skipif(not os.path.exists("/usr/include/infiniband/verbs.h"),
                    reason="rdma-core's libibverbs (libibverbs-dev) is not installed")
def test_the_real_libibverbs_without_rdma_says_there_is_no_device():
    # This machine's kernel has no RDMA: the real library finds no device.
    env = {"GLOOCY_TRANSPORT": "ibverbs"}
    for message in start_error(env):
        assert "GLOOCY_TRANSPORT=ibverbs" in message, message
        assert "no RDMA device" in message or "cannot load" in message, message


def r_send_then_die(comm, n):
    """Rank 0 offers n doubles to rank 1 (a rendezvous) and is killed while
    rank 1 reads them (the stand-in delays rank 0's read responses)."""
    if comm.rank == 0:
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGKILL)).start()
        comm.Send(np.ones(n), 1, tag=3)
        return "sent"
    buf = np.empty(n)
    t = time.monotonic()
    try:
        comm.Recv(buf, 0, tag=3)
    except gloocy.PeerLostError as e:
        return str(e), e.rank, time.monotonic() - t
    return "received"


def test_a_peer_killed_mid_rendezvous_is_named(ib_env):
    env = {**ib_env, "GLOOCY_IBMOCK_READ_DELAY_US": "5000000",
           "GLOOCY_IBMOCK_RETRY_MS": "300"}
    with World(2, env=env, timeout=30) as w:
        died, (message, rank, took) = w.run(r_send_then_die, 1 << 20, check=False)
    assert died.type_name == "ProcessDied"
    assert rank == 0 and "rank 1: lost peer rank 0" in message, message
    # the read in flight failed as a real HCA's would, after its retries
    assert "IBV_WC_RETRY_EXC_ERR" in message, message
    assert took < 10, took


def r_die_on_the_second(comm, n):
    """Rank 0 sends n doubles twice and is killed while rank 1 reads the
    second into the buffer of the first: its registration, found in the
    cache, is in use when the peer goes. Dropping the buffer then
    invalidates it."""
    from gloocy.transport.ibverbs import reg_cache_stats
    if comm.rank == 0:
        comm.Send(np.ones(n), 1, tag=1)
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGKILL)).start()
        comm.Send(np.ones(n), 1, tag=2)
        return "sent"
    buf = np.empty(n)
    comm.Recv(buf, 0, tag=1)
    first_ok = bool(np.all(buf == 1))
    try:
        comm.Recv(buf, 0, tag=2)
    except gloocy.PeerLostError as e:
        during = reg_cache_stats()
        buf = None
        gc.collect()
        return first_ok, str(e), during, reg_cache_stats()
    return "received"


def test_a_peer_killed_while_a_cached_registration_is_read_into(ib_env):
    env = {**ib_env, "GLOOCY_IBMOCK_READ_DELAY_US": "3000000",
           "GLOOCY_IBMOCK_RETRY_MS": "300"}
    with World(2, env=env, timeout=30) as w:
        died, (first_ok, message, during, after) = w.run(r_die_on_the_second,
                                                         1 << 17, check=False)
    assert died.type_name == "ProcessDied"
    assert first_ok and "rank 1: lost peer rank 0" in message, message
    assert during["hits"] == 1 and during["misses"] == 1, during
    assert after["invalidations"] == during["invalidations"] + 1, after


def r_large_exchange(comm, n):
    x = np.arange(n, dtype=np.float64) + comm.rank
    comm.Allreduce(gloocy.IN_PLACE, x)
    want = comm.size * np.arange(n, dtype=np.float64) + comm.size * (comm.size - 1) / 2
    return bool(np.array_equal(x, want))


def test_a_bad_rkey_is_a_protocol_error_naming_the_peer(ib_env):
    with World(2, env={**ib_env, "GLOOCY_IBMOCK_BAD_RKEY": "1"}, timeout=30) as w:
        out = w.run(r_large_exchange, 100_000, check=False)
    for r, e in enumerate(out):
        assert e.is_a("ProtocolError") or e.is_a("PeerLostError"), e
    messages = " ".join(e.message for e in out)
    assert "IBV_WC_REM_ACCESS_ERR" in messages, messages
    assert any(f"an RDMA transfer with rank {1 - r}" in e.message
               for r, e in enumerate(out)), messages


def r_many_small(comm, rounds):
    for _ in range(rounds):
        if not r_large_exchange(comm, 100):
            return False
    return True


def test_a_queue_pair_forced_into_error_names_the_peer(ib_env):
    with World(2, env={**ib_env, "GLOOCY_IBMOCK_QP_ERROR_AFTER": "30"}, timeout=30) as w:
        out = w.run(r_many_small, 40, check=False)
    assert any(not isinstance(e, bool) and e.is_a("PeerLostError")
               and "error state" in e.message and "IBV_EVENT_QP_FATAL" in e.message
               for e in out), out


def r_wait_for_each_other(comm, flag):
    """Each rank waits to receive from the other; nothing is ever sent.
    Half a second in, rank 0 takes the port down (the stand-in's fault)."""
    comm.Barrier()
    if comm.rank == 0:
        threading.Timer(0.5, open, (flag, "w")).start()
    t = time.monotonic()
    try:
        comm.Recv(np.empty(4), 1 - comm.rank, tag=5)
    except gloocy.PeerLostError as e:
        return str(e), e.rank, time.monotonic() - t
    return "received"


def test_a_port_that_goes_down_ends_an_idle_wait(ib_env, tmp_path):
    # Nothing is in flight, so no work completion fails, and the TCP
    # connections beside the queue pairs stay up: only the device's
    # asynchronous event says that the port went down.
    flag = str(tmp_path / "port-down")
    env = {**ib_env, "GLOOCY_IBMOCK_PORT_ERR_FILE": flag}
    with World(2, env=env, timeout=30) as w:
        out = w.run(r_wait_for_each_other, flag, check=False)
    for r, (message, rank, took) in enumerate(out):
        assert rank == 1 - r and f"rank {r}: lost peer rank {1 - r}" in message, message
        assert "IBV_EVENT_PORT_ERR" in message, message
        assert took < 15, took


def r_churn(comm, rounds, n):
    """Send `rounds` fresh buffers of n doubles (allocated, sent, freed:
    the allocator hands the same address out again), then one buffer
    `rounds` times. Returns whether every receive got what was sent, how
    many addresses were reused, and the registration cache's counters after
    each half."""
    from gloocy.transport.ibverbs import reg_cache_stats
    addresses, ok = [], True
    for i in range(rounds):
        if comm.rank == 0:
            a = np.full(n, float(i))
            addresses.append(a.ctypes.data)
            comm.Send(a, 1, tag=i)
        else:
            b = np.empty(n)
            addresses.append(b.ctypes.data)
            comm.Recv(b, 0, tag=i)
            ok = ok and bool(np.array_equal(b, np.full(n, float(i))))
        a = b = None                     # freed: the next round may get its address
        gc.collect()
    churned = reg_cache_stats()
    kept = np.empty(n)
    for i in range(rounds):
        if comm.rank == 0:
            kept[:] = np.arange(n) * i
            comm.Send(kept, 1, tag=i)
        else:
            comm.Recv(kept, 0, tag=i)
            ok = ok and bool(np.array_equal(kept, np.arange(n) * i))
    return ok, len(addresses) - len(set(addresses)), churned, reg_cache_stats()


def test_buffers_freed_and_reallocated_at_the_same_address(ib_env):
    rounds = 12
    with World(2, env=ib_env, timeout=60) as w:
        out = w.run(r_churn, rounds, 1 << 17)
    for ok, reused, churned, after in out:
        assert ok
        assert reused > 0                # the churn really reused addresses
        # every freed buffer's registration went with it, none was reused
        assert churned["invalidations"] == rounds, churned
        assert churned["hits"] == 0 and churned["misses"] == rounds, churned
        # a buffer that lives is registered once and found again
        assert after["hits"] - churned["hits"] == rounds - 1, after
        assert after["misses"] - churned["misses"] == 1, after
        assert after["entries"] == 1 and after["refused"] == 0, after


def test_without_the_cache_every_transfer_registers_its_buffer(ib_env):
    with World(2, env={**ib_env, "GLOOCY_IB_REG_CACHE_BYTES": "0"}, timeout=60) as w:
        out = w.run(r_churn, 4, 1 << 17)
    for ok, reused, churned, after in out:
        assert ok
        assert after["hits"] == 0 and after["misses"] == 8 and after["entries"] == 0, after


@pytest.mark.parametrize("size", [3])
def test_the_registration_limit_falls_back_to_copies(ib_env, size):
    # 3 registrations per pair (slots both ways, the stage): once every pair
    # is connected (everyone_to_everyone), none is left for the rendezvous, whose
    # payloads then go through the eager slots. (A pair connected after
    # user buffers took the last registrations cannot register its slots:
    # README, Not yet.)
    env = {**ib_env, "GLOOCY_IBMOCK_MAX_MR": str(3 * (size - 1))}
    with World(size, env=env, timeout=60) as w:
        w.run(everyone_to_everyone)
        assert w.run(r_large_exchange, 300_000) == [True] * size


def r_two_buffers(comm, rounds, n):
    """Rank 0 sends two live buffers in turn, rank 1 receives into two;
    whether all arrived, and the cache's counters."""
    from gloocy.transport.ibverbs import reg_cache_stats
    bufs, ok = [np.empty(n), np.empty(n)], True
    for i in range(rounds):
        b = bufs[i % 2]
        if comm.rank == 0:
            b[:] = np.arange(n) + i
            comm.Send(b, 1, tag=i)
        else:
            comm.Recv(b, 0, tag=i)
            ok = ok and bool(np.array_equal(b, np.arange(n) + i))
    return ok, reg_cache_stats()


# The slots, the stage and one 1.5 MiB buffer fit under 3.9 MB of registered
# memory (about 1.2 + 1.6 MB), two such buffers do not.
N_LIMIT = 3 << 16


def test_at_the_locked_memory_limit_the_cache_evicts_and_registers_again(ib_env):
    env = {**ib_env, "GLOOCY_IBMOCK_MAX_MR_BYTES": "3900000"}
    with World(2, env=env, timeout=60) as w:
        out = w.run(r_two_buffers, 6, N_LIMIT)
    for ok, stats in out:
        assert ok
        # each buffer in turn pushed the other one out
        assert stats["evictions"] == 5 and stats["misses"] == 6, stats
        assert stats["refused"] == 0 and stats["entries"] == 1, stats


def test_beyond_the_locked_memory_limit_transfers_go_by_copies(ib_env):
    env = {**ib_env, "GLOOCY_IBMOCK_MAX_MR_BYTES": "2000000"}
    with World(2, env=env, timeout=60) as w:
        out = w.run(r_two_buffers, 4, N_LIMIT)
    (ok0, sender), (ok1, receiver) = out
    assert ok0 and ok1
    # one refusal per message; what the sender copied needs no registration
    assert sender["refused"] == 4 and sender["entries"] == 0, sender
    assert receiver["misses"] == 0, receiver


def test_a_registration_limit_below_the_slots_is_a_clear_error(ib_env):
    """The slots of a pair are registered as it is connected: at start-up
    (GLOOCY_CONNECT=eager), or in the first call that uses it."""
    env = {**ib_env, "GLOOCY_IBMOCK_MAX_MR": "1"}
    for message in start_error({**env, "GLOOCY_CONNECT": "eager"}):
        assert "ibv_reg_mr" in message and "limit" in message, message
    with World(2, env=env, timeout=30) as w:
        with pytest.raises(RankFailure) as info:
            w.run(total, 1000)
    errors = info.value.errors
    assert sorted(errors) == [0, 1], info.value
    for e in errors.values():
        assert "ibv_reg_mr" in e.message and "limit" in e.message, e.message


def r_probe_then_receive(comm, n):
    """Rank 1 lets a large message's header arrive, makes the stream move
    (a probe for another tag: the frame goes to a stash and its payload
    starts arriving there by RDMA read), then receives it while that read
    is in flight: the receive takes the stream over."""
    if comm.rank == 0:
        comm.Send(np.arange(n, dtype=np.float64), 1, tag=4)
        return True
    time.sleep(0.5)
    assert not comm.Iprobe(0, 99)
    got = np.empty(n)
    comm.Recv(got, 0, 4)
    return bool(np.array_equal(got, np.arange(n, dtype=np.float64)))


def test_a_receive_posted_while_its_payload_is_read_into_a_stash(ib_env):
    env = {**ib_env, "GLOOCY_IBMOCK_READ_DELAY_US": "300000"}
    with World(2, env=env, timeout=30) as w:
        assert w.run(r_probe_then_receive, 1 << 18) == [True, True]
