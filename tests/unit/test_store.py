"""The rendezvous store: the embedded TCP server and its client, over real sockets."""

import os
import socket
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gloocy.errors import RendezvousError, RendezvousTimeout
from gloocy.rendezvous import TCPStore, TCPStoreServer, connect

SECRET = b"s" * 32


@pytest.fixture
def server():
    with TCPStoreServer(secret=SECRET) as srv:
        yield srv


def client(srv, **kw):
    kw.setdefault("timeout", 5.0)
    return TCPStore(srv.host, srv.port, secret=kw.pop("secret", SECRET), **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- semantics --------------------------------------------------------------

_keys = st.sampled_from(["a", "b", "c", "é/ü"])
_ops = st.one_of(
    st.tuples(st.just("set"), _keys, st.binary(max_size=64)),
    st.tuples(st.just("add"), _keys, st.integers(-(10**20), 10**20)),
    st.tuples(st.just("get"), _keys),
    st.tuples(st.just("check"), st.lists(_keys, max_size=3)),
    st.tuples(st.just("delete"), _keys),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_ops, max_size=25))
def test_semantics_match_a_dict(server, ops):
    oracle = {}
    with client(server) as store:
        for k in list("abc") + ["é/ü"]:
            store.delete(k)
        for op, *args in ops:
            if op == "set":
                store.set(*args)
                oracle[args[0]] = args[1]
            elif op == "add":
                key, amount = args
                try:
                    expect = int(oracle.get(key, b"0")) + amount
                except ValueError:
                    with pytest.raises(ValueError):
                        store.add(key, amount)
                    continue
                assert store.add(key, amount) == expect
                oracle[key] = str(expect).encode()
            elif op == "get":
                if args[0] in oracle:
                    assert store.get(args[0]) == oracle[args[0]]
                else:
                    with pytest.raises(RendezvousTimeout):
                        store.get(args[0], timeout=0.05)
            elif op == "check":
                assert store.check(args[0]) == all(k in oracle for k in args[0])
            elif op == "delete":
                assert store.delete(args[0]) == (oracle.pop(args[0], None) is not None)


def test_argument_checks(server):
    with client(server) as store:
        with pytest.raises(TypeError, match="key"):
            store.set(1, b"x")
        with pytest.raises(ValueError, match="key"):
            store.get("")
        with pytest.raises(TypeError, match="value"):
            store.set("k", "text")
        with pytest.raises(TypeError, match="keys"):
            store.wait("abc")
        with pytest.raises(TypeError, match="amount"):
            store.add("k", 1.5)
        store.set("k", bytearray(b"ba"))
        assert store.get("k") == b"ba"
        store.set("big", b"x" * (3 << 20))
        assert store.get("big") == b"x" * (3 << 20)


def test_get_blocks_until_another_client_sets(server):
    got = []
    with client(server) as reader, client(server) as writer:
        t = threading.Thread(target=lambda: got.append((reader.get("late"), time.monotonic())))
        t.start()
        time.sleep(0.3)
        set_at = time.monotonic()
        writer.set("late", b"v")
        t.join(5)
        assert got and got[0][0] == b"v" and got[0][1] >= set_at
        # wait() on several keys: returns only once the last one exists
        done = threading.Event()
        t = threading.Thread(target=lambda: (reader.wait(["w1", "w2"]), done.set()))
        t.start()
        writer.set("w1", b"")
        assert not done.wait(0.2)
        writer.add("w2")
        assert done.wait(5)
        t.join(5)


def test_timeout_names_key_and_address_and_client_recovers(server):
    with client(server, timeout=60) as store:
        for call in (lambda: store.get("nope", timeout=0.3),
                     lambda: store.wait(["a1", "nope"], timeout=0.3)):
            start = time.monotonic()
            with pytest.raises(RendezvousTimeout) as info:
                call()
            # the call's 0.3 s, not the client's 60 s
            assert 0.3 <= time.monotonic() - start < 10
            assert "nope" in str(info.value) and f"127.0.0.1:{server.port}" in str(info.value)
        # the server forgot the abandoned requests ...
        deadline = time.monotonic() + 10
        while server._waiters and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not server._waiters
        # ... and the dropped connection did not desynchronize anything
        store.set("nope", b"here")
        assert store.get("nope") == b"here"
        assert store.add("ctr", 2) == 2


def test_many_concurrent_clients(server):
    n, reps, errors = 16, 20, []

    def work(i):
        try:
            with client(server) as store:
                for _ in range(reps):
                    store.add("counter")
                if store.add("arrived") == n:
                    store.set("go", b"1")
                assert store.get("go") == b"1"
                store.set(f"rank{i}", str(i).encode())
                assert store.get(f"rank{(i + 1) % n}") == str((i + 1) % n).encode()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors
    with client(server) as store:
        assert store.get("counter") == str(n * reps).encode()


# -- defences ---------------------------------------------------------------

def test_wrong_secret_is_refused_quickly(server):
    start = time.monotonic()
    with pytest.raises(RendezvousError, match="refused"):
        client(server, secret=b"wrong", connect_timeout=60.0)
    assert time.monotonic() - start < 10   # refused, not retried for 60 s


def test_bad_peers_do_not_disturb_good_clients():
    with TCPStoreServer(secret=SECRET, auth_timeout=0.5) as srv:
        addr = (srv.host, srv.port)
        silent = socket.create_connection(addr)
        garbage = socket.create_connection(addr)
        garbage.sendall(os.urandom(4096))
        # Authenticated, then a frame that claims 4 GiB.
        liar = client(srv)
        liar._sock.sendall(b"\xff\xff\xff\xff" + b"x" * 100)
        with client(srv) as good:
            for i in range(50):
                good.set(f"k{i}", b"v")
                assert good.get(f"k{i}") == b"v"
        for s in (silent, garbage, liar._sock):
            s.settimeout(3)
            data = b""
            try:
                while chunk := s.recv(4096):
                    data += chunk
            except ConnectionResetError:
                pass
            assert len(data) <= 32  # at most the nonce, then the server hung up
        silent.close()
        garbage.close()
        liar.close()


def test_client_refuses_an_impostor_server():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def impostor():
        conn, _ = listener.accept()
        with conn:
            conn.sendall(os.urandom(32))
            conn.recv(64)
            conn.sendall(os.urandom(32))  # cannot compute the right proof
            conn.recv(1)

    t = threading.Thread(target=impostor, daemon=True)
    t.start()
    with pytest.raises(RendezvousError, match="prove"):
        TCPStore("127.0.0.1", port, secret=SECRET, connect_timeout=3.0)
    t.join(3)
    listener.close()


def test_unreachable_server_names_address():
    port = free_port()
    start = time.monotonic()
    with pytest.raises(RendezvousError, match=f"127.0.0.1:{port}"):
        TCPStore("127.0.0.1", port, secret=SECRET, connect_timeout=0.5)
    assert time.monotonic() - start < 10   # its 0.5 s, not a default (300 s)


def test_client_waits_for_a_late_server():
    port = free_port()
    srv = TCPStoreServer(port=port, secret=SECRET)

    def start_later():
        time.sleep(0.3)
        srv.start()

    # The socket is bound but not served yet: the handshake waits for start().
    threading.Thread(target=start_later).start()
    with TCPStore("127.0.0.1", port, secret=SECRET, timeout=3.0) as store:
        store.set("x", b"1")
    srv.close()


def test_close_frees_the_port_and_stops_the_thread():
    srv = TCPStoreServer(secret=SECRET).start()
    port = srv.port
    c = client(srv)
    c.set("a", b"1")
    srv.close()
    srv.close()  # idempotent
    assert not srv._thread.is_alive()
    with pytest.raises(RendezvousError):
        c.get("a", timeout=1.0)
    c.close()
    with TCPStoreServer(port=port, secret=SECRET) as again:
        assert again.port == port


def test_ipv6_and_connect_urls():
    try:
        srv = TCPStoreServer("::1", secret=SECRET)
    except OSError:
        pytest.skip("no IPv6 loopback")
    with srv.start():
        assert srv.url == f"tcp://[::1]:{srv.port}"
        with connect(srv.url, secret=SECRET, timeout=5) as store:
            assert store.add("n", 3) == 3
    with pytest.raises(ValueError, match="nosuch://nowhere"):
        connect("nosuch://nowhere:1", secret=SECRET)
    with pytest.raises(ValueError, match="port"):
        connect("tcp://127.0.0.1", secret=SECRET)
