"""The rank threads of one process at start-up (rendezvous/shared_wait.py):
one store wait for all of them, then one at a time; store operations one
at a time. Real TCP store, real threads."""

import threading
import time

import pytest

from gloocy.errors import RendezvousTimeout
from gloocy.rendezvous import TCPStore, TCPStoreServer, shared_wait
from store_queue import queued
from gloocy.rendezvous.hash_store import HashStore

SECRET = b"s" * 32
N = 12


@pytest.fixture
def server():
    with TCPStoreServer(secret=SECRET) as s:
        yield s


def client(server):
    return TCPStore(server.host, server.port, secret=SECRET, timeout=20.0)


def run_ranks(server, key, fetch_of, deadline_s=20.0):
    """N threads, each with its own client, get_once(key); returns what
    each got (or raised), the fetches made, the most ranks between their
    turn and pass_on at once."""
    got, fetches, active, most = [None] * N, [], [0], [0]
    lock = threading.Lock()

    def rank(i):
        store = client(server)
        try:
            def fetch():
                with lock:
                    fetches.append(i)
                return fetch_of(store, len(fetches))
            try:
                value, pass_on = shared_wait.get_once(
                    store, key, fetch, time.monotonic() + deadline_s)
            except Exception as e:          # noqa: BLE001 -- reported
                got[i] = e
                return
            with lock:
                active[0] += 1
                most[0] = max(most[0], active[0])
            time.sleep(0.005)               # the work that follows
            with lock:
                active[0] -= 1
            pass_on()
            got[i] = value
        finally:
            store.close()

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    return threads, got, fetches, most


def test_one_rank_asks_the_others_go_in_turn(server):
    threads, got, fetches, most = run_ranks(
        server, "job/go", lambda store, n: store.get("job/go"))
    queued(server.url, "job/go", N - 1)
    setter = client(server)
    setter.set("job/go", b"1 0 0")
    for t in threads:
        t.join(30)
    setter.close()
    assert got == [b"1 0 0"] * N
    assert len(fetches) == 1            # the store was asked once
    assert most[0] == 1                 # and they went on one at a time


def test_when_the_asking_rank_fails_the_others_ask_for_themselves(server):
    def fetch(store, n):
        if n == 1:                      # once the others are queued
            queued(server.url, "job/go", N - 1)
            raise RendezvousTimeout("the first fetch fails")
        return store.get("job/go")

    threads, got, fetches, _ = run_ranks(server, "job/go", fetch)
    until = time.monotonic() + 20
    while len(fetches) < 2 and time.monotonic() < until:
        time.sleep(0.01)
    setter = client(server)
    setter.set("job/go", b"v")
    for t in threads:
        t.join(30)
    setter.close()
    failed = [g for g in got if isinstance(g, RendezvousTimeout)]
    assert len(failed) == 1 and "first fetch" in str(failed[0])
    assert got.count(b"v") == N - 1
    assert len(fetches) == N            # each of the others asked the store


def test_a_waiting_rank_meets_its_deadline(server):
    """The key never comes: every rank raises the store's timeout within
    its deadline (not the asking rank's)."""
    t0 = time.monotonic()
    threads, got, fetches, _ = run_ranks(
        server, "job/never", lambda store, n: store.get("job/never", timeout=1.0),
        deadline_s=1.0)
    for t in threads:
        t.join(30)
    assert all(isinstance(g, RendezvousTimeout) for g in got), got
    assert time.monotonic() - t0 < 15.0


def test_later_comers_ask_the_store_themselves(server):
    """Once the value is known nobody is queued behind the old wait."""
    store = client(server)
    store.set("job/k", b"x")
    calls = []

    def fetch():
        calls.append(1)
        return store.get("job/k")
    for _ in range(3):
        value, pass_on = shared_wait.get_once(store, "job/k", fetch,
                                              time.monotonic() + 5)
        pass_on()
        pass_on()                       # (once, however often called)
        assert value == b"x"
    store.close()
    assert len(calls) == 3
    assert shared_wait._pending == {}


def test_store_operations_one_at_a_time(server):
    inside, most, lock = [0], [0], threading.Lock()

    def rank(i):
        store = client(server)
        with shared_wait.one_at_a_time(store):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            store.set(f"job/tcp/{i}", b"a")
            time.sleep(0.002)
            with lock:
                inside[0] -= 1
        store.close()

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert most[0] == 1
    checker = client(server)
    assert checker.check([f"job/tcp/{i}" for i in range(N)])
    checker.close()


def test_stores_without_a_url_are_not_queued():
    store = HashStore(timeout=5.0)
    entered = threading.Barrier(2, timeout=5.0)

    def rank():
        with shared_wait.one_at_a_time(store):
            entered.wait()          # both inside at once, or it times out
    threads = [threading.Thread(target=rank) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not entered.broken
