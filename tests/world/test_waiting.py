"""How ranks wait (gloocy/waiting.py, _engine.pxi, the node waits of
_node.pxi): a rank that waits long uses next to no CPU, every collective is
right in worlds with more ranks than CPUs whichever way waits are forced to
go (spin, yield, sleep at once on the node futex), and a rank asleep on
the futex still stops for Ctrl-C, its deadline and a dead peer.

CPU use is read from the kernel (time.process_time, time.thread_time for
ranks that are threads); bounds are generous (30% of a core) so that a
loaded machine cannot fail them, while a busy spin does (the forced-spin
cases check that this measure sees one).
"""

import os
import signal
import threading
import time

import numpy as np
import pytest

import gloocy
from gloocy.errors import CollectiveTimeout
from gloocy.waiting import YIELD_US, wait_tuning
from gloocy.testing.processes import ProcessWorld as World

from test_shm import connect_threads, in_threads, kill_the_last_rank

TRANSPORTS = ("shm", "tcp")
# Waits forced each way: sleep at once (the node futex, poll on the pairs),
# yield between looks (where ranks outnumber CPUs), spin (where they do not).
SLEEP_AT_ONCE = {"GLOOCY_SPIN_US": "0", "GLOOCY_YIELD_US": "0"}
YIELDING = {"GLOOCY_SPIN_US": "0", "GLOOCY_YIELD_US": "200"}
SPINNING = {"GLOOCY_SPIN_US": "50", "GLOOCY_YIELD_US": "0"}
IDLE_BOUND = 0.30           # of a core, over a wait of WAIT seconds
WAIT = 1.0


# -- rank-side functions ------------------------------------------------------------

def r_wait_for_late_peer(comm, wait, how):
    """The last rank comes `wait` s late to a Barrier (how="barrier") or to
    a Send to rank 0 (how="recv"); the others' (CPU seconds, wall seconds)
    meanwhile, and this rank's (spin_ns, yield_ns)."""
    knobs = (comm._ctx.spin_ns, comm._ctx.links.yield_ns)
    comm.Barrier()
    late = comm.size - 1
    buf = np.zeros(4)
    if comm.rank == late:
        time.sleep(wait)
        if how == "recv":
            comm.Send(buf, dest=0)
        else:
            comm.Barrier()
        return knobs, None
    if how == "recv" and comm.rank != 0:
        return knobs, None
    cpu, wall = time.process_time(), time.monotonic()
    if how == "recv":
        comm.Recv(buf, source=late)
    else:
        comm.Barrier()
    return knobs, (time.process_time() - cpu, time.monotonic() - wall)


def r_every_collective(comm, n):
    """Every collective over `n` float64 per rank (values from the rank);
    their results, for the NumPy oracle."""
    r, size = comm.rank, comm.size
    mine = np.arange(n, dtype=np.float64) + 100 * r
    out = {}
    comm.Barrier()
    x = mine.copy() if r == 1 % size else np.zeros(n)
    comm.Bcast(x, root=1 % size)
    out["bcast"] = x
    x = mine.copy()
    comm.Allreduce(gloocy.IN_PLACE, x)
    out["allreduce"] = x
    x = np.zeros(n)
    comm.Reduce(mine, x if r == 0 else None, root=0)
    out["reduce"] = x if r == 0 else None
    x = np.zeros(n * size)
    comm.Allgather(mine, x)
    out["allgather"] = x
    x = np.zeros(n * size) if r == size - 1 else None
    comm.Gather(mine, x, root=size - 1)
    out["gather"] = x
    x = np.zeros(n)
    comm.Scatter(np.arange(n * size, dtype=np.float64) if r == 0 else None, x, root=0)
    out["scatter"] = x
    send = np.repeat(mine[None, :], size, 0) + np.arange(size)[:, None] * 1000
    x = np.zeros((size, n))
    comm.Alltoall(send, x)
    out["alltoall"] = x
    x = np.zeros(n)
    comm.Reduce_scatter_block(send.ravel(), x)
    out["reduce_scatter"] = x
    x = np.zeros(n)
    comm.Scan(mine, x)
    out["scan"] = x
    comm.Barrier()
    return out


def expected(size, n):
    """What r_every_collective must give at each rank, from NumPy alone."""
    mine = [np.arange(n, dtype=np.float64) + 100 * r for r in range(size)]
    sends = [np.repeat(m[None, :], size, 0) + np.arange(size)[:, None] * 1000 for m in mine]
    total = np.sum(mine, axis=0)
    gathered = np.concatenate(mine)
    return [dict(bcast=mine[1 % size], allreduce=total, reduce=total if r == 0 else None,
                 allgather=gathered, gather=gathered if r == size - 1 else None,
                 scatter=np.arange(n * size, dtype=np.float64)[r * n:(r + 1) * n],
                 alltoall=np.stack([sends[s][r] for s in range(size)]),
                 reduce_scatter=np.sum([s[r] for s in sends], axis=0),
                 scan=np.sum(mine[:r + 1], axis=0))
            for r in range(size)]


# -- tests ----------------------------------------------------------------------------

@pytest.mark.parametrize("size", [2, 4])
@pytest.mark.parametrize("how", ["barrier", "recv"])
def test_a_rank_waiting_for_a_late_peer_uses_next_to_no_cpu(world, size, how):
    # Whatever the host made of the knobs: at 4 ranks on 2 CPUs the waits
    # yield then sleep, at 2 they spin then sleep.
    got = world(size).run(r_wait_for_late_peer, WAIT, how)
    want = wait_tuning(size)
    for knobs, measured in got:
        assert knobs == (want["spin_us"] * 1000, want["yield_us"] * 1000)
        if measured is not None:
            cpu, wall = measured
            assert wall >= 0.8 * WAIT
            assert cpu < IDLE_BOUND * wall, (size, how, cpu, wall)


def test_more_ranks_than_cpus_yield_by_default():
    assert wait_tuning(os.cpu_count() * 2 + 1, cpus=os.cpu_count(), env={}) == \
        {"spin_us": 0, "yield_us": YIELD_US}


@pytest.mark.transports("shm")
@pytest.mark.parametrize("env, busy", [(SPINNING, False), (YIELDING, False),
                                       ({**YIELDING, "GLOOCY_YIELD_US": "10000000"}, True),
                                       ({**SPINNING, "GLOOCY_SPIN_US": "10000000"}, True)],
                         ids=["spin", "yield", "forced-yield", "forced-spin"])
def test_forced_knobs_are_obeyed_and_a_busy_wait_shows(world, env, busy):
    # Forced to look for 10 s, a waiting rank burns CPU all along: the
    # measure above can see a busy wait, and the knob reaches the waits.
    got = world(2, **env).run(r_wait_for_late_peer, 0.5, "barrier")
    knobs, (cpu, wall) = got[0]
    assert knobs == (int(env.get("GLOOCY_SPIN_US", 0)) * 1000,
                     int(env.get("GLOOCY_YIELD_US", 0)) * 1000)
    assert (cpu > 0.1 * wall) if busy else (cpu < IDLE_BOUND * wall), (env, cpu, wall)


@pytest.mark.parametrize("size", [4, 5])
@pytest.mark.parametrize("env", [SLEEP_AT_ONCE, YIELDING], ids=["sleep", "yield"])
def test_every_collective_is_right_with_more_ranks_than_cpus(world, size, env):
    for n in (1, 3, 1000, 9000):        # 8 B .. 72 KB a rank
        got = world(size, **env).run(r_every_collective, n)
        for r, (have, want) in enumerate(zip(got, expected(size, n))):
            for name, value in want.items():
                if value is None:
                    assert have[name] is None
                else:
                    np.testing.assert_array_equal(have[name], value, err_msg=f"{name} rank {r}")


def test_thread_ranks_waiting_for_a_late_one_use_next_to_no_cpu():
    # Four ranks as threads of this process (one host: node waits, shm pairs).
    comms = connect_threads(4)
    try:
        def one(comm):
            comm.Barrier()
            if comm.rank == 3:
                time.sleep(WAIT)
                comm.Barrier()
                return None
            cpu, wall = time.thread_time(), time.monotonic()
            comm.Barrier()
            return time.thread_time() - cpu, time.monotonic() - wall
        out, errors = in_threads(comms, one)
        assert not errors, errors
        for cpu, wall in out[:3]:
            assert wall >= 0.8 * WAIT
            assert cpu < IDLE_BOUND * wall, (cpu, wall)
    finally:
        for c in comms:
            c.Free()


# -- a rank asleep on a shared-memory pair's futex --------------------------------------

def r_woken_by_a_send(comm, delay):
    """Rank 1 sends to rank 0 `delay` s into a Recv of rank 0's (asleep on
    its pairs' futex words by then). Rank 0: (what it got, CPU s, wall s);
    rank 1: (wake-ups its pair to rank 0 gave on the futex, by the socket)
    during the send. (Pairs are connected on first use: a first message
    from 1 to 0 connects theirs, so that rank 1 can count on it and rank 0
    sleeps on it; rank 0's other pairs, at 3 ranks, are not connected.)"""
    if comm.rank == 0:
        comm.Recv(np.zeros(1), source=1)
    elif comm.rank == 1:
        comm.Send(np.ones(1), dest=0)
    comm.Barrier()
    if comm.rank == 1:
        pair = comm._ctx.links.pairs[0]
        time.sleep(delay)
        before = pair.woke_on_word, pair.woke_by_socket
        comm.Send(np.arange(5.0) * 7, dest=0)
        got = pair.woke_on_word - before[0], pair.woke_by_socket - before[1]
    elif comm.rank == 0:
        buf = np.zeros(5)
        cpu, wall = time.process_time(), time.monotonic()
        comm.Recv(buf, source=1)
        got = buf.tolist(), time.process_time() - cpu, time.monotonic() - wall
    else:
        got = None
    comm.Barrier()
    return got


@pytest.mark.parametrize("size", [2, 3])   # one futex word, several (futex_waitv)
def test_a_pair_waiter_asleep_on_its_futex_is_woken_by_a_send(size):
    with World(size, env={"GLOOCY_TRANSPORT": "shm", **SLEEP_AT_ONCE}) as w:
        got = w.run(r_woken_by_a_send, WAIT, timeout=60)
    data, cpu, wall = got[0]
    assert data == (np.arange(5.0) * 7).tolist()
    assert wall >= 0.8 * WAIT
    assert cpu < 0.20 * wall, (cpu, wall)
    assert got[1] == (1, 0), got[1]        # one futex wake-up, no socket poke


def test_thread_ranks_wake_each_other_on_pair_futexes():
    comms = connect_threads(2)
    try:
        def one(comm):
            return r_woken_by_a_send(comm, 0.3)
        out, errors = in_threads(comms, one)
        assert not errors, errors
        assert out[0][0] == (np.arange(5.0) * 7).tolist()
        assert out[1] == (1, 0), out[1]
    finally:
        for c in comms:
            c.Free()


def test_a_peer_dying_while_a_pair_waiter_sleeps_is_named_within_a_second():
    # The survivors sleep on their pairs' futex words in a Recv from it.
    for lost, after in kill_the_last_rank({"GLOOCY_TRANSPORT": "shm", **SLEEP_AT_ONCE}, 0):
        assert lost == 2
        assert 0 <= after < 1.0


def r_bcast_loop(comm, n, rounds, algorithm):
    """`rounds` Bcasts of n bytes from root k % size in round k (through
    the node segment, algorithm="shm": the readers never wait for each
    other); every round's bytes."""
    out = []
    for k in range(rounds):
        root = k % comm.size
        x = (np.full(n, (k * 7 + 1) % 251, np.uint8) if comm.rank == root
             else np.zeros(n, np.uint8))
        comm.Bcast(x, root=root, algorithm=algorithm)
        out.append(x.copy())
    comm.Barrier()
    return out


@pytest.mark.parametrize("size", [3, 4])
@pytest.mark.parametrize("algorithm", ["shm", None])     # node segment, auto (pairs)
def test_bcasts_back_to_back_are_right_with_readers_running_ahead(size, algorithm):
    n, rounds = 64, 200
    with World(size, env={"GLOOCY_TRANSPORT": "shm", **YIELDING}) as w:
        got = w.run(r_bcast_loop, n, rounds, algorithm, timeout=60)
    for r in range(size):
        for k in range(rounds):
            np.testing.assert_array_equal(got[r][k], np.full(n, (k * 7 + 1) % 251, np.uint8))


def r_bcast_against_allreduce(comm):
    """Ranks 0 and 1 Bcast from 0 while rank 2 Allreduces, then a Barrier:
    every rank's first error (reader 1 waits for the root alone, so it
    hears of rank 2 in its next call)."""
    x = np.ones(4)
    for call in (lambda: comm.Bcast(x, root=0, algorithm="shm") if comm.rank < 2
                 else comm.Allreduce(gloocy.IN_PLACE, x),
                 lambda: comm.Barrier(timeout=10)):
        try:
            call()
        except gloocy.GloocyError as e:
            return type(e).__name__, str(e)
    return "ok", ""


def test_a_bcast_reader_that_ran_ahead_hears_of_a_mismatch_next():
    with World(3, env={"GLOOCY_TRANSPORT": "shm"}) as w:
        got = w.run(r_bcast_against_allreduce, timeout=60)
    for rank, (kind, msg) in enumerate(got):
        assert kind == "MismatchError", (rank, msg)
        assert "called bcast" in msg and "called allreduce" in msg, (rank, msg)


# -- a rank asleep on the node futex: Ctrl-C, deadline, peer death ----------------------

def r_interrupted_in_a_barrier(comm, how="barrier"):
    """Rank 0 gets SIGINT 0.5 s into a Barrier the last rank joins 3 s late
    (how="recv": a Recv from the last rank, asleep on its pairs' futex
    words): (what stopped it, seconds from the signal)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    comm.Barrier()
    if comm.rank == comm.size - 1:
        time.sleep(3.0)
    sent = []
    if comm.rank == 0:
        def interrupt():
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)
        threading.Timer(0.5, interrupt).start()
    try:
        if how == "barrier":
            comm.Barrier(timeout=30)
        elif comm.rank == 0:
            comm.Recv(np.zeros(1), source=comm.size - 1, timeout=30)
        elif comm.rank == comm.size - 1:
            comm.Send(np.zeros(1), dest=0)
    except KeyboardInterrupt:
        return "KeyboardInterrupt", time.monotonic() - sent[0]
    except gloocy.errors.GloocyError as e:
        return type(e).__name__, None
    return "no error", None


@pytest.mark.parametrize("how", ["barrier", "recv"])
def test_ctrl_c_stops_a_sleeping_wait_within_a_second(how):
    env = SLEEP_AT_ONCE
    with World(3, env={"GLOOCY_TRANSPORT": "shm", **env}) as w:
        got = w.run(r_interrupted_in_a_barrier, how, check=False, timeout=60)
    name, after = got[0]
    assert name == "KeyboardInterrupt", got
    assert after < 1.0, got


def r_times_out(comm):
    comm.Barrier()
    if comm.rank == comm.size - 1:
        time.sleep(2.0)
        return None
    t0 = time.monotonic()
    try:
        comm.Barrier(timeout=0.5)
    except CollectiveTimeout:
        return time.monotonic() - t0
    return "no timeout"


def test_a_sleeping_wait_keeps_its_deadline():
    env = SLEEP_AT_ONCE
    with World(3, env={"GLOOCY_TRANSPORT": "shm", **env}) as w:
        got = w.run(r_times_out, timeout=30)
    for elapsed in got[:2]:
        assert isinstance(elapsed, float), got
        assert 0.45 <= elapsed < 1.5, got


def test_a_peer_dying_during_a_sleeping_wait_is_named_within_a_second():
    # The survivors sleep on the node futex in an allreduce at once.
    for lost, after in kill_the_last_rank({"GLOOCY_TRANSPORT": "shm", **SLEEP_AT_ONCE}, 1):
        assert lost == 2
        assert 0 <= after < 1.0
