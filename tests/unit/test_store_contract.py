"""One contract, every store: HashStore, FileStore, TCPStore, RedisStore and
PrefixStore pass the same tests (semantics against a dict, argument checks,
blocking, deadlines, several waiters, atomic add/compare_set across clients
and processes, clear, close). RedisStore runs against a real redis-server
started here on a free loopback port.
"""

import os
import subprocess
import sys
import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gloocy.errors import RendezvousError, RendezvousTimeout
from gloocy.rendezvous import (FileStore, HashStore, PrefixStore, Store, TCPStore,
                               TCPStoreServer, connect)
from peers import REDIS_SERVER, RedisServer, free_port, redis_cmd

SECRET = b"contract-secret-0123456789abcdef"
needs_redis = pytest.mark.skipif(
    REDIS_SERVER is None,
    reason="redis-server is not installed (apt-get install -y redis-server)")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    srv = RedisServer(tmp_path_factory.mktemp("redis"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module", autouse=True)
def _redis_before_the_leak_checks(request):
    """The module's redis-server starts before any test, so that the
    per-test leak check (conftest) does not count it as a child process
    left behind by the first test that uses it."""
    if REDIS_SERVER is not None:
        request.getfixturevalue("redis_server")


# -- the stores under test ------------------------------------------------------

class Backend:
    """Makes clients of one store; ``url`` names it (None: not nameable)."""

    def __init__(self, name, make, url=None, on_close=()):
        self.name, self._make, self.url = name, make, url
        self._opened = []
        self._on_close = list(on_close)

    def client(self, **kw):
        kw.setdefault("timeout", 5.0)
        store = self._make(**kw)
        self._opened.append(store)
        return store

    def close(self):
        for store in self._opened:
            store.close()
        for fn in self._on_close:
            fn()


BACKENDS = ["hash", "file", "tcp", "redis", "prefix"]


def make_backend(name, request, tmp_path):
    if name == "hash":
        table = f"contract-{uuid.uuid4().hex}"
        return Backend(name, lambda **kw: HashStore.named(table, **kw), f"hash://{table}")
    if name == "file":
        path = tmp_path / "store"
        return Backend(name, lambda **kw: FileStore(path, **kw), f"file://{path}")
    if name in ("tcp", "prefix"):
        srv = TCPStoreServer(secret=SECRET).start()
        if name == "tcp":
            return Backend(name, lambda **kw: TCPStore(srv.host, srv.port, secret=SECRET, **kw),
                           srv.url, [srv.close])
        inner = []

        def make(**kw):
            inner.append(TCPStore(srv.host, srv.port, secret=SECRET, **kw))
            return PrefixStore(inner[-1], "job", close_store=True)

        return Backend(name, make, None,
                       [lambda: [s.close() for s in inner], srv.close])
    if name == "redis":
        from gloocy.rendezvous import RedisStore

        srv = request.getfixturevalue("redis_server")
        prefix = f"test-{uuid.uuid4().hex[:12]}/"
        return Backend(name, lambda **kw: RedisStore(port=srv.port, prefix=prefix, **kw),
                       f"redis://127.0.0.1:{srv.port}/0?prefix={prefix}")
    raise AssertionError(name)


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    b = make_backend(request.param, request, tmp_path)
    yield b
    b.close()


@pytest.fixture
def store(backend):
    return backend.client()


def in_thread(fn, *args):
    """Start fn(*args) in a thread; return (thread, results, errors)."""
    out, errors = [], []

    def run():
        try:
            out.append(fn(*args))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out, errors


# -- semantics --------------------------------------------------------------------

_keys = st.sampled_from(["a", "A", "b", "é/ü", ".", "..", "a/b", "x" * 300])
_vals = st.binary(max_size=32)
_ops = st.one_of(
    st.tuples(st.just("set"), _keys, _vals),
    st.tuples(st.just("add"), _keys, st.integers(-(10**20), 10**20)),
    st.tuples(st.just("get"), _keys),
    st.tuples(st.just("check"), st.lists(_keys, max_size=3)),
    st.tuples(st.just("get_many"), st.lists(_keys, max_size=3)),
    st.tuples(st.just("delete"), _keys),
    st.tuples(st.just("cas"), _keys, st.none() | _vals, _vals),
    st.tuples(st.just("clear"), st.sampled_from(["", "a", "é", "x", "zz"])),
    # (adds of a batch on keys no other op sets: they always hold numbers)
    st.tuples(st.just("batch"), st.lists(st.one_of(
        st.tuples(st.just("set"), _keys, _vals),
        st.tuples(st.just("add"), st.sampled_from(["n0", "n1"]),
                  st.integers(-(10**20), 10**20))), max_size=4)),
)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_ops, max_size=20))
def test_semantics_match_a_dict(store, ops):
    store.clear()
    oracle = {}
    for op, *args in ops:
        if op == "set":
            store.set(*args)
            oracle[args[0]] = args[1]
        elif op == "add":
            key, amount = args
            try:
                expect = int(oracle.get(key, b"0")) + amount
            except ValueError:
                with pytest.raises(ValueError, match="not a decimal integer"):
                    store.add(key, amount)
                continue
            assert store.add(key, amount) == expect
            oracle[key] = str(expect).encode()
        elif op == "get":
            if args[0] in oracle:
                assert store.get(args[0]) == oracle[args[0]]
            else:
                with pytest.raises(RendezvousTimeout):
                    store.get(args[0], timeout=0.01)
        elif op == "check":
            assert store.check(args[0]) == all(k in oracle for k in args[0])
        elif op == "get_many":
            if all(k in oracle for k in args[0]):
                assert store.get_many(args[0]) == [oracle[k] for k in args[0]]
            else:
                with pytest.raises(RendezvousTimeout):
                    store.get_many(args[0], timeout=0.01)
        elif op == "delete":
            assert store.delete(args[0]) == (oracle.pop(args[0], None) is not None)
        elif op == "cas":
            key, expected, desired = args
            if oracle.get(key) == expected:
                oracle[key] = desired
            assert store.compare_set(key, expected, desired) == oracle.get(key)
        elif op == "batch":
            expect = []
            for name, key, arg in args[0]:
                if name == "set":
                    oracle[key] = arg
                    expect.append(None)
                else:
                    total = int(oracle.get(key, b"0")) + arg
                    oracle[key] = str(total).encode()
                    expect.append(total)
            assert store.batch(args[0]) == expect
        elif op == "clear":
            doomed = [k for k in oracle if k.startswith(args[0])]
            assert store.clear(args[0]) == len(doomed)
            for k in doomed:
                del oracle[k]
    assert store.check(list(oracle))
    for key, value in oracle.items():
        assert store.get(key, timeout=0) == value


def test_argument_checks(store):
    with pytest.raises(TypeError, match="key"):
        store.set(1, b"x")
    with pytest.raises(ValueError, match="key"):
        store.get("")
    with pytest.raises(TypeError, match="value"):
        store.set("k", "text")
    with pytest.raises(TypeError, match="value"):
        store.set("k", 3)
    with pytest.raises(TypeError, match="keys"):
        store.wait("abc")
    with pytest.raises(TypeError, match="each key"):
        store.wait(["a", 2])
    with pytest.raises(TypeError, match="keys"):
        store.get_many("abc")
    with pytest.raises(ValueError, match="key"):
        store.get_many(["a", ""])
    with pytest.raises(TypeError, match="amount"):
        store.add("k", 1.5)
    with pytest.raises(TypeError, match="amount"):
        store.add("k", True)
    with pytest.raises(TypeError, match="value"):
        store.compare_set("k", "old", b"new")
    with pytest.raises(TypeError, match="value"):
        store.compare_set("k", None, None)
    with pytest.raises(TypeError, match="prefix"):
        store.clear(None)
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError, match="timeout"):
            store.get("k", timeout=bad)
    with pytest.raises(TypeError, match="timeout"):
        store.wait(["k"], timeout="1")
    with pytest.raises(TypeError, match="ops"):
        store.batch({"k": b"v"})
    with pytest.raises(ValueError, match="ops"):
        store.batch([("get", "k", b"")])
    with pytest.raises(TypeError, match="value"):
        store.batch([("set", "k", b"v"), ("set", "k", "text")])
    with pytest.raises(TypeError, match="amount"):
        store.batch([("set", "k", b"v"), ("add", "k", 1.5)])
    with pytest.raises(ValueError, match="key"):
        store.batch([("set", "", b"v")])
    # nothing above reached the store
    assert not store.check(["k"])
    # bytes-like values of every kind; empty, binary and large values
    store.set("ba", bytearray(b"ba"))
    store.set("mv", memoryview(b"xmvx")[1:3])
    store.set("empty", b"")
    store.set("binary", b"\r\n\x00$-1\r\n*3\r\n")
    store.set("big", b"x" * (1 << 20))
    assert store.get("ba") == b"ba" and store.get("mv") == b"mv"
    assert store.get("empty") == b"" and store.check(["empty"])
    assert store.get("binary") == b"\r\n\x00$-1\r\n*3\r\n"
    assert store.get("big") == b"x" * (1 << 20)
    assert store.compare_set("empty", b"", b"full") == b"full"


def test_get_and_wait_block_until_another_client_sets(backend):
    reader, writer = backend.client(), backend.client()
    t, got, errors = in_thread(lambda: (reader.get("late"), time.monotonic()))
    time.sleep(0.3)
    set_at = time.monotonic()
    writer.set("late", b"v")
    t.join(5)
    assert not errors and got and got[0][0] == b"v" and got[0][1] >= set_at
    # wait() on several keys returns only once the last one exists; add and
    # compare_set wake waiters as set does
    t, done, errors = in_thread(reader.wait, ["w1", "w2", "w3"])
    writer.set("w1", b"")
    writer.add("w2")
    t.join(0.3)
    assert t.is_alive()
    assert writer.compare_set("w3", None, b"1") == b"1"
    t.join(5)
    assert not t.is_alive() and not errors


def test_get_many_returns_values_in_order_once_all_are_set(backend):
    reader, writer = backend.client(), backend.client()
    assert reader.get_many([]) == []
    writer.set("m1", b"one")
    t, got, errors = in_thread(reader.get_many, ["m2", "m1", "m3", "m2"])
    writer.set("m2", b"two")
    t.join(0.3)
    assert t.is_alive()  # m3 is still missing
    writer.add("m3", 3)
    t.join(5)
    assert not t.is_alive() and not errors
    assert got == [[b"two", b"one", b"3", b"two"]]
    assert reader.get_many(["m3", "m1"], timeout=0) == [b"3", b"one"]


def test_many_waiters_all_wake(backend):
    n = 8
    clients = [backend.client() for _ in range(n)]
    threads = [in_thread(c.get, "go") for c in clients]
    threads += [in_thread(c.wait, ["go", "also"]) for c in clients[:3]]
    time.sleep(0.2)
    writer = backend.client()
    writer.set("also", b"")
    writer.set("go", b"now")
    for t, _, _ in threads:
        t.join(5)
    assert all(not t.is_alive() and not errors for t, _, errors in threads)
    assert [out[0] for _, out, _ in threads[:n]] == [b"now"] * n


def test_deadlines(backend):
    # Bounds are generous for a loaded machine, and far below the client's
    # own 60 s, which a call that ignored its deadline would wait for.
    store = backend.client(timeout=60)
    store.set("there", b"1")
    for call in (lambda: store.get("nope", timeout=0.3),
                 lambda: store.wait(["there", "nope"], timeout=0.3),
                 lambda: store.get_many(["there", "nope"], timeout=0.3)):
        start = time.monotonic()
        with pytest.raises(RendezvousTimeout) as info:
            call()
        assert 0.3 <= time.monotonic() - start < 10
        assert "nope" in str(info.value)
        assert isinstance(info.value, TimeoutError)
    # timeout=0 looks once
    start = time.monotonic()
    assert store.get("there", timeout=0) == b"1"
    store.wait(["there"], timeout=0)
    with pytest.raises(RendezvousTimeout):
        store.get("nope", timeout=0)
    assert time.monotonic() - start < 10
    # the client still works after a timeout
    store.set("nope", b"here")
    assert store.get("nope") == b"here"
    assert store.add("ctr", 2) == 2


def test_default_timeout(backend):
    store = backend.client(timeout=0.2)
    start = time.monotonic()
    with pytest.raises(RendezvousTimeout):
        store.get("never")
    assert 0.2 <= time.monotonic() - start < 10   # not the 300 s default


def test_delete_then_wait_blocks_again(store):
    store.set("k", b"1")
    assert store.delete("k")
    assert not store.delete("k")
    with pytest.raises(RendezvousTimeout):
        store.get("k", timeout=0.2)
    with pytest.raises(RendezvousTimeout):
        store.wait(["k"], timeout=0.2)
    assert not store.check(["k"])
    assert store.add("k", 7) == 7
    assert store.get("k") == b"7"


def test_atomic_add_and_compare_set_across_threads(backend):
    n, reps = 6, 25
    winners = []

    def work(i):
        client = backend.client()
        for _ in range(reps):
            client.add("count")
        winners.append(client.compare_set("leader", None, str(i).encode()))
        # a chain of compare-and-sets: each thread moves "token" one step;
        # the new value names its writer, so getting it back means "I swapped"
        while True:
            value = client.get("token")
            step = int(value.split(b":")[0]) + 1
            desired = f"{step}:{i}".encode()
            if client.compare_set("token", value, desired) == desired:
                return

    backend.client().set("token", b"0:")
    threads = [in_thread(work, i) for i in range(n)]
    for t, _, _ in threads:
        t.join(20)
    assert all(not t.is_alive() and not errors for t, _, errors in threads)
    check = backend.client()
    assert check.get("count") == str(n * reps).encode()
    assert len(set(winners)) == 1 and check.get("leader") == winners[0]
    assert check.get("token").startswith(f"{n}:".encode())


def test_clear_and_prefixes_keep_apart(backend):
    base = backend.client()
    a, b = PrefixStore(base, "a"), PrefixStore(base, "b")
    nested = PrefixStore(a, "n")
    for s in (a, b, nested):
        s.set("k", repr(s).encode())
    assert a.get("k") != b.get("k") != nested.get("k")
    assert base.get("a/k") == a.get("k") and base.get("a/n/k") == nested.get("k")
    assert a.timeout == base.timeout and PrefixStore(base, "c", timeout=1).timeout == 1
    t, got, errors = in_thread(PrefixStore(backend.client(), "b").get, "late")
    base.set("b/late", b"via base")
    t.join(5)
    assert got == [b"via base"]
    assert a.clear() == 2  # a/k and a/n/k
    assert not a.check(["k"]) and not nested.check(["k"])
    assert b.check(["k", "late"])
    base.set("other", b"")
    assert base.clear("b/") == 2
    assert base.check(["other"])
    assert base.clear() == 1
    assert not base.check(["other"])
    with pytest.raises(ValueError, match="prefix"):
        PrefixStore(base, "")
    with pytest.raises(TypeError, match="Store"):
        PrefixStore("not a store", "p")
    a.close()
    with pytest.raises(RendezvousError, match="closed"):
        a.set("k", b"")
    base.set("still", b"open")  # closing a view leaves the store open


def test_close_wakes_a_blocked_waiter_and_is_final(backend):
    store = backend.client(timeout=60)
    t, _, errors = in_thread(store.get, "never")
    time.sleep(0.2)
    start = time.monotonic()
    store.close()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - start < 10  # not its 60 s
    assert errors and isinstance(errors[0], RendezvousError)
    store.close()  # idempotent
    for call in (lambda: store.set("k", b""), lambda: store.get("k"),
                 lambda: store.add("k"), lambda: store.compare_set("k", None, b"")):
        with pytest.raises(RendezvousError, match="closed"):
            call()
    backend.client().set("k", b"others unaffected")


def test_context_manager(backend):
    with backend.client() as store:
        store.set("k", b"v")
    with pytest.raises(RendezvousError):
        store.get("k", timeout=0)
    assert isinstance(store, Store)


# -- across processes: ranks name the store by its url ----------------------------

CHILD = r"""
import sys
from gloocy.rendezvous import connect
url, i = sys.argv[1], int(sys.argv[2])
with connect(url, secret=sys.argv[3].encode(), timeout=20) as s:
    s.add("ready")
    s.wait(["go"])
    for _ in range(25):
        s.add("count")
    won = s.compare_set("leader", None, str(i).encode())
    print(s.get("go").decode(), won.decode())
"""


def test_processes_by_url(backend):
    if backend.url is None:
        pytest.skip(f"a {backend.name} store has no url")
    if backend.url.startswith("hash://"):
        # in-process only: the url still names one store for every client
        other = connect(backend.url, secret=SECRET, timeout=5)
        backend.client().set("shared", b"yes")
        assert other.get("shared") == b"yes"
        assert connect("hash://somewhere-else", secret=SECRET).check(["shared"]) is False
        return
    n = 3
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))]
        + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, backend.url, str(i),
                               SECRET.decode()], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
             for i in range(n)]
    try:
        store = backend.client(timeout=20)
        deadline = time.monotonic() + 20
        while int(store.get("ready")) < n if store.check(["ready"]) else True:
            assert time.monotonic() < deadline, "children did not start"
            time.sleep(0.05)
        store.set("go", b"go")
        outs = [p.communicate(timeout=20) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    lines = [out.split() for out, _ in outs]
    assert all(line[0] == "go" for line in lines)
    assert len({line[1] for line in lines}) == 1  # one leader, seen by all
    assert store.get("count") == str(n * 25).encode()
    assert store.get("leader").decode() == lines[0][1]


def test_hash_store_wakes_the_waiters_of_the_key_written_and_keeps_none():
    # Waiters are filed by the keys they miss: a write wakes those of its
    # key (thousands of thread ranks wait at once), and no filing outlives
    # the waits, whether they were answered, timed out or closed.
    table = HashStore()
    waiters = [in_thread(table.client().get, f"k{i}") for i in range(20)]
    both = in_thread(table.client().wait, ["k0", "other"])
    late = table.client()
    with pytest.raises(RendezvousTimeout):
        late.get("never", timeout=0.05)
    closing = table.client()
    closed = in_thread(closing.get, "never")
    time.sleep(0.2)
    table.set("k0", b"v")
    waiters[0][0].join(5)
    assert not waiters[0][0].is_alive() and waiters[0][1] == [b"v"]
    assert all(t.is_alive() for t, _, _ in waiters[1:]) and both[0].is_alive()
    for i in range(1, 20):
        table.add(f"k{i}", i)
    table.set("other", b"")
    closing.close()
    for t, _, errors in [*waiters, both]:
        t.join(5)
        assert not t.is_alive() and not errors
    assert [out[0] for _, out, _ in waiters[1:]] == [str(i).encode() for i in range(1, 20)]
    closed[0].join(5)
    assert isinstance(closed[2][0], RendezvousError)
    assert table._table.waiters == {}


# -- urls ------------------------------------------------------------------------

def test_urls(tmp_path):
    with connect(f"file://{tmp_path}/d", secret=SECRET) as s:
        assert isinstance(s, FileStore) and s.path == str(tmp_path / "d")
    a, b = connect("hash://", secret=SECRET), connect("hash://", secret=SECRET)
    a.set("k", b"v")
    assert b.get("k", timeout=0) == b"v"
    a.clear()
    for url, match in [
        ("nosuch://x", "scheme"),
        ("file://relative/path", "absolute"),
        ("file:///x?mode=1", "unknown option"),
        ("hash://x?y=1", "unknown option"),
        ("redis://", "host"),
        ("redis://host:99999", "(?i)port"),
        ("redis://host/notadb", "database"),
        ("redis://host/0?prefix=a&prefix=b", "twice"),
        ("redis://host/0?timeout=3", "unknown option"),
        ("redis://user:hunter2@host/x", "database"),
    ]:
        with pytest.raises(ValueError, match=match) as info:
            connect(url, secret=SECRET)
        assert "hunter2" not in str(info.value)
    with pytest.raises(ValueError, match="username needs a password"):
        connect("redis://justuser@127.0.0.1:1", secret=SECRET, timeout=0.1)


# -- Redis: blocking without polling, credentials, failures, cleanup -------------

@needs_redis
def test_redis_waiters_block_in_the_server(redis_server):
    from gloocy.rendezvous import RedisStore

    def commands():
        info = redis_cmd(redis_server.port, "INFO", "stats").decode()
        return int(info.split("total_commands_processed:")[1].split()[0])

    prefix = f"poll-{uuid.uuid4().hex[:8]}/"
    waiter = RedisStore(port=redis_server.port, prefix=prefix, timeout=5)
    getter = RedisStore(port=redis_server.port, prefix=prefix, timeout=5)
    t1, _, e1 = in_thread(waiter.wait, ["x", "y"])
    t2, got, e2 = in_thread(getter.get, "y")
    time.sleep(0.2)
    before = commands()
    time.sleep(1.0)
    assert commands() - before <= 2  # the INFO calls themselves; no polling
    writer = RedisStore(port=redis_server.port, prefix=prefix, timeout=5)
    writer.set("x", b"1")
    writer.set("y", b"2")
    t1.join(5)
    t2.join(5)
    assert not e1 and not e2 and got == [b"2"]
    # clear leaves nothing of the job in Redis
    assert writer.clear() == 2
    assert redis_cmd(redis_server.port, "KEYS", prefix + "*") == []
    for s in (waiter, getter, writer):
        s.close()


@needs_redis
def test_redis_prefix_is_glob_escaped(redis_server):
    from gloocy.rendezvous import RedisStore

    tag = uuid.uuid4().hex[:8]
    star = RedisStore(port=redis_server.port, prefix=f"{tag}*[x]?/", timeout=5)
    plain = RedisStore(port=redis_server.port, prefix=f"{tag}ab/", timeout=5)
    star.set("k", b"1")
    plain.set("k", b"2")
    assert star.clear() == 1
    assert plain.get("k") == b"2"
    assert plain.clear() == 1
    star.close()
    plain.close()


@needs_redis
def test_redis_foreign_value_is_reported(redis_server):
    from gloocy.rendezvous import RedisStore

    prefix = f"foreign-{uuid.uuid4().hex[:8]}/"
    redis_cmd(redis_server.port, "SET", prefix + "k", "a plain string")
    with RedisStore(port=redis_server.port, prefix=prefix, timeout=5) as s:
        with pytest.raises(RendezvousError, match="did not write"):
            s.get("k")
        s.set("k", b"ours")  # a set replaces it
        assert s.get("k") == b"ours"
        s.clear()


@needs_redis
def test_redis_unreachable_names_host_and_port():
    from gloocy.rendezvous import RedisStore

    port = free_port()
    start = time.monotonic()
    with pytest.raises(RendezvousError, match=f"127.0.0.1:{port}"):
        RedisStore(port=port, connect_timeout=0.5)
    assert time.monotonic() - start < 10     # its 0.5 s, not a default
    start = time.monotonic()
    with pytest.raises(RendezvousError, match=f"127.0.0.1:{port}"):
        connect(f"redis://127.0.0.1:{port}/0", secret=SECRET, timeout=0.5)
    assert time.monotonic() - start < 10


@needs_redis
def test_redis_credentials_and_database(tmp_path):
    from gloocy.rendezvous import RedisStore

    srv = RedisServer(tmp_path, "--requirepass", "s3cret")
    try:
        port = srv.port
        for kw, match in [({}, "needs a password"),
                          ({"password": "wrong"}, "refused the password"),
                          ({"username": "nobody", "password": "x"}, "refused user 'nobody'")]:
            start = time.monotonic()
            with pytest.raises(RendezvousError, match=match) as info:
                RedisStore(port=port, connect_timeout=60, **kw)
            assert time.monotonic() - start < 10  # refused: not retried for 60 s
            assert f"127.0.0.1:{port}" in str(info.value)
        with connect(f"redis://:s3cret@127.0.0.1:{port}", secret=SECRET, timeout=5) as s:
            s.set("k", b"db0")
        # an ACL user (Redis 6+), a password that needs percent-encoding, db 3
        redis_cmd(port, "ACL", "SETUSER", "alice", "on", ">p@ss:/word", "~*", "+@all",
                  password="s3cret")
        url = f"redis://alice:p%40ss%3A%2Fword@127.0.0.1:{port}/3?prefix=job7/"
        with connect(url, secret=SECRET, timeout=5) as s:
            assert s.username == "alice" and s.db == 3 and s.prefix == "job7/"
            s.set("k", b"db3")
            assert redis_cmd(port, "LRANGE", "job7/k", 0, -1, password="s3cret", db=3) == [b"db3"]
            assert s.clear() == 1
        assert redis_cmd(port, "LRANGE", "gloocy/k", 0, -1, password="s3cret") == [b"db0"]
        with pytest.raises(RendezvousError, match="no database 99"):
            RedisStore(port=port, password="s3cret", db=99, connect_timeout=5)
    finally:
        srv.stop()


@needs_redis
def test_redis_server_lost_mid_wait(tmp_path):
    from gloocy.rendezvous import RedisStore

    srv = RedisServer(tmp_path)
    try:
        store = RedisStore(port=srv.port, timeout=60)
        t, _, errors = in_thread(store.get, "never")
        time.sleep(0.2)
        srv.stop()
        t.join(10)
        assert not t.is_alive()
        assert errors and isinstance(errors[0], RendezvousError)
        assert f"127.0.0.1:{srv.port}" in str(errors[0])
        # the next call reconnects (and fails, naming the address, in time)
        store.timeout = 0.5
        start = time.monotonic()
        with pytest.raises(RendezvousError, match=f"127.0.0.1:{srv.port}"):
            store.set("k", b"")
        assert time.monotonic() - start < 10   # its 0.5 s, not the 60 s before
        store.close()
    finally:
        srv.stop()


# -- FileStore: atomic files --------------------------------------------------------

def test_file_store_layout(tmp_path):
    a, b = FileStore(tmp_path), FileStore(tmp_path)
    a.set("A", b"upper")
    a.set("a", b"lower")
    a.set("y" * 1000, b"long")
    a.set("../escape", b"x")
    assert b.get("A") == b"upper" and b.get("a") == b"lower"
    assert b.get("y" * 1000) == b"long"
    names = sorted(os.listdir(tmp_path))
    assert "lock" in names and not [n for n in names if n.startswith("tmp.")]
    assert all(n == "lock" or n.startswith(("k.", "h.")) for n in names)
    assert not (tmp_path.parent / "escape").exists()
    # a writer that died between writing and renaming leaves a temp file: clear removes it
    (tmp_path / "tmp.host.1.dead").write_bytes(b"junk")
    assert a.clear() == 4
    assert os.listdir(tmp_path) == ["lock"]
    a.close()
    b.set("still", b"works")  # another client's lock is unaffected by a's close
    assert b.add("n") == 1
    b.close()
