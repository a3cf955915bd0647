"""capped(until): every store operation of a thread ends by `until`, however
long its store's timeout, even when the store stops answering (its process
stopped: the kernel still accepts the bytes, nothing replies, as across a
cut link) or another thread holds the client. A rank's failure path relies
on it (lazy.py: Connector.failing)."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from gloocy.errors import RendezvousTimeout
from gloocy.rendezvous import HashStore, PrefixStore, TCPStore
from gloocy.rendezvous.store import capped
from peers import REDIS_SERVER, RedisServer

SECRET = b"cap-secret-0123456789abcdef01234"
CAP = 0.3
# The client's own timeout: an operation the cap did not reach waits this long.
LONG = 60.0
# Far above the cap (a loaded 2-core machine), far below LONG.
SLACK = 5.0

SERVE = """
import sys, time
from gloocy.rendezvous import TCPStoreServer
srv = TCPStoreServer(secret=sys.argv[1].encode()).start()
print(srv.port, flush=True)
time.sleep(600)
"""


class StoreProcess:
    """A store served by a process of its own, which can be stopped."""

    def __init__(self, kind, tmp_path):
        self.kind = kind
        if kind == "tcp":
            self.proc = subprocess.Popen([sys.executable, "-c", SERVE, SECRET.decode()],
                                         stdout=subprocess.PIPE, text=True)
            self.port = int(self.proc.stdout.readline())
        else:
            if REDIS_SERVER is None:
                pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
            self.redis = RedisServer(tmp_path)
            self.proc, self.port = self.redis.proc, self.redis.port

    def client(self):
        if self.kind == "tcp":
            return TCPStore("127.0.0.1", self.port, secret=SECRET, timeout=LONG)
        from gloocy.rendezvous import RedisStore
        return RedisStore(port=self.port, prefix="cap/", timeout=LONG)

    def stop(self):
        """Stop the process, and wait until it is stopped (a signal is
        delivered when its threads next run)."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + SLACK
        while open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
            assert time.monotonic() < deadline, "the store's process did not stop"
            time.sleep(0.01)

    def close(self):
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture(params=["tcp", "redis"])
def served(request, tmp_path):
    s = StoreProcess(request.param, tmp_path)
    yield s
    s.close()


def timed_under_cap(op):
    """(seconds op took under a CAP cap, the exception it raised)."""
    start = time.monotonic()
    with capped(start + CAP):
        try:
            op()
        except RendezvousTimeout as e:
            return time.monotonic() - start, e
    return time.monotonic() - start, None


def test_a_cap_ends_every_operation_on_a_store_that_stopped_answering(served):
    store = served.client()
    view = PrefixStore(store, "job")       # the cap reaches through a view
    store.set("there", b"1")
    served.stop()
    try:
        for name, op in [("set", lambda: store.set("k", b"v")),
                         ("add", lambda: store.add("n", 1)),
                         ("check", lambda: store.check(["there"])),
                         ("get", lambda: store.get("there", timeout=LONG)),
                         ("view check", lambda: view.check(["there"])),
                         ("view set", lambda: view.set("k", b"v"))]:
            took, error = timed_under_cap(op)
            assert error is not None, name
            assert CAP <= took < SLACK, (name, took)
        os.kill(served.proc.pid, signal.SIGCONT)
        # Outside the cap the client works again, with its own timeout.
        assert store.timeout == LONG
        store.set("k", b"after")
        assert store.get("k") == b"after" and view.check([]) is True
    finally:
        store.close()


def test_a_cap_bounds_the_wait_for_a_client_busy_in_another_thread(served):
    store = served.client()
    try:
        store.set("there", b"1")
        blocked = threading.Thread(target=lambda: pytest.raises(
            RendezvousTimeout, store.get, "never", timeout=2.0), daemon=True)
        blocked.start()
        time.sleep(0.2)                     # (its request is in flight till 2 s)
        took, error = timed_under_cap(lambda: store.check(["there"]))
        assert error is not None and "busy" in str(error), error
        assert CAP <= took < SLACK, took
        blocked.join()
        assert store.check(["there"]) is True    # the client is free again
    finally:
        store.close()


def test_caps_nest_and_belong_to_their_thread():
    store = HashStore(timeout=LONG)
    seen = []
    start = time.monotonic()
    with capped(start + 10 * SLACK):
        with capped(start + CAP):           # the earlier end wins
            with pytest.raises(RendezvousTimeout):
                store.get("never")
            assert CAP <= time.monotonic() - start < SLACK
            other = threading.Thread(target=lambda: seen.append(store.timeout))
            other.start()
            other.join()
        assert SLACK < store.timeout <= 10 * SLACK     # the outer cap again
    assert seen == [LONG]                   # another thread is not capped
    assert store.timeout == LONG
