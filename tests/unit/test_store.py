"""The rendezvous store: the embedded TCP server and its client, over real sockets."""

import os
import resource
import socket
import subprocess
import sys
import threading
import time

import pytest

from gloocy.errors import RendezvousError, RendezvousTimeout
from gloocy.rendezvous import TCPStore, TCPStoreServer, connect, tcp_store

SECRET = b"s" * 32


@pytest.fixture
def server():
    with TCPStoreServer(secret=SECRET) as srv:
        yield srv


def client(srv, **kw):
    kw.setdefault("timeout", 5.0)
    return TCPStore(srv.host, srv.port, secret=kw.pop("secret", SECRET), **kw)


def run_threads(fn, n, timeout):
    """fn(0) ... fn(n - 1), each in a thread; join each for ``timeout`` s."""
    threads = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

    run_threads(work, n, 10)
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


@pytest.mark.parametrize("reply, error", [
    (b"\x00\x00\x00\x01\x00" + b"junk", "bytes after the reply"),
    (b"\xff\xff\xff\xff", "bad reply length"),
])
def test_client_refuses_a_broken_reply(reply, error):
    """A server that knows the secret but breaks the framing is named, not
    trusted: the client drops the connection and says why."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def server():
        conn, _ = listener.accept()
        with conn:
            nonce = os.urandom(32)
            conn.sendall(nonce)
            answer = conn.recv(64)
            conn.sendall(tcp_store._mac(SECRET, tcp_store.SERVER_LABEL, answer[32:] + nonce))
            conn.recv(1024)  # the request
            conn.sendall(reply)
            conn.recv(1)

    t = threading.Thread(target=server, daemon=True)
    t.start()
    store = TCPStore("127.0.0.1", port, secret=SECRET, timeout=3.0)
    with pytest.raises(RendezvousError, match=error):
        store.set("k", b"v")
    store.close()
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


def test_wait_clients_counts_authenticated_clients_till_they_leave(server):
    # Three clients; a stranger that never authenticates does not count. A
    # client that closes leaves, and so does one whose process is killed.
    clients = [client(server) for _ in range(2)]
    for c in clients:
        c.set("k", b"1")                  # connected and authenticated
    child = subprocess.Popen([sys.executable, "-c", f"""
import sys
from gloocy.rendezvous import TCPStore
c = TCPStore({server.host!r}, {server.port}, secret={SECRET!r}, timeout=5)
c.set("child", b"1")
print("in", flush=True)
sys.stdin.read()
"""], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    stranger = socket.create_connection((server.host, server.port))
    try:
        assert child.stdout.readline() == b"in\n"
        t = time.monotonic()
        assert server.wait_clients(2, 0.3) is False      # 3 are connected
        assert time.monotonic() - t >= 0.25
        clients[0].close()
        assert server.wait_clients(2, 5.0) is True
        child.kill()
        child.wait()
        # clients[1] alone: the child's went with its process, and the
        # stranger (connected all along) never counted
        assert server.wait_clients(1, 5.0) is True
        assert server.wait_clients(0, 0.2) is False
    finally:
        stranger.close()
        child.kill()
        child.wait()
        child.stdin.close()
        child.stdout.close()
        for c in clients:
            c.close()
    assert server.wait_clients(0, 5.0) is True


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


# -- many clients -------------------------------------------------------------

def test_800_concurrent_clients_match_a_dict(server):
    """800 clients connected at once, driven by 16 threads, then 64 of them
    blocked in get() until the keys are set: every result against a dict."""
    n, workers, blocked = 800, 16, 64
    clients = [client(server, timeout=30) for _ in range(n)]
    assert len(server._conns) == n
    assert [t.name for t in threading.enumerate()].count(f"gloocy-store {server.url}") == 1

    def value(i):
        return f"value of {i}".encode()

    # what every client must see: the oracle, from a dict of the keys set
    oracle = {f"c{i}/a": value(i) for i in range(n)}
    oracle.update({f"c{i}/n": b"2" for i in range(n)})
    expected = {i: [2, oracle[f"c{(i + 1) % n}/a"],
                    [oracle[f"c{(i + 1) % n}/a"], oracle[f"c{i * 7 % n}/n"]], True, True]
                for i in range(n)}
    got, errors = {}, []
    barrier = threading.Barrier(workers)

    def work(w):
        try:
            mine = range(w, n, workers)
            for i in mine:
                c = clients[i]
                c.set(f"c{i}/a", value(i))
                got[i] = [c.add(f"c{i}/n", 2)]
                c.add("total", i)
            barrier.wait(30)
            for i in mine:
                c, j = clients[i], (i + 1) % n
                got[i] += [c.get(f"c{j}/a"), c.get_many([f"c{j}/a", f"c{i * 7 % n}/n"]),
                           c.check([f"c{i}/a", f"c{j}/a"])]
            barrier.wait(30)
            for i in mine:
                got[i].append(clients[i].delete(f"c{i}/n"))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    run_threads(work, workers, 60)
    assert not errors
    assert got == expected

    # blocking gets of keys set later: the server wakes each waiter
    late = {}
    waiting = [threading.Thread(target=lambda i=i: late.__setitem__(i, clients[i].get(f"late{i}")))
               for i in range(blocked)]
    for t in waiting:
        t.start()
    deadline = time.monotonic() + 10
    while len(server._waiters) < blocked and time.monotonic() < deadline:
        time.sleep(0.01)
    with client(server) as writer:
        for i in reversed(range(blocked)):
            writer.set(f"late{i}", value(i))
        for t in waiting:
            t.join(10)
        assert late == {i: value(i) for i in range(blocked)}
        # the deletes took, the rest is there: one get_many of every key
        assert writer.add("total", 0) == sum(range(n))
        assert not any(writer.check([f"c{i}/n"]) for i in range(0, n, 97))
        keys = [f"c{i}/a" for i in range(n)]
        assert writer.get_many(keys) == [oracle[k] for k in keys]
    for c in clients:
        c.close()


def test_get_many_waits_again_for_a_key_deleted_meanwhile(server):
    with client(server) as reader, client(server) as writer:
        writer.set("a", b"1")
        got = []
        t = threading.Thread(target=lambda: got.append(reader.get_many(["a", "b"])))
        t.start()
        deadline = time.monotonic() + 10
        while b"b" not in server._waiters and time.monotonic() < deadline:
            time.sleep(0.01)
        writer.delete("a")
        writer.set("b", b"2")
        t.join(0.3)
        assert t.is_alive()  # "a" is gone again: the reply needs both
        writer.set("a", b"3")
        t.join(5)
        assert got == [[b"3", b"2"]]


def test_get_many_over_the_frame_limit_is_refused_by_name(server, monkeypatch):
    monkeypatch.setattr(tcp_store, "MAX_FRAME", 1000)  # the real one is 64 MiB
    big = b"x" * 600
    with client(server) as store:
        store.set("a", big)
        store.set("b", big)
        with pytest.raises(ValueError, match="frame limit"):
            store.get_many(["a", "b"])
        assert store.get_many(["a"]) == [big]  # the connection is fine


# -- file descriptors ---------------------------------------------------------

_SERVE_WITH_LIMIT = r"""
import resource, sys
soft, hard = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
from gloocy.rendezvous import TCPStoreServer
srv = TCPStoreServer(secret=bytes.fromhex(sys.argv[3])).start()
print(srv.port, flush=True)
sys.stdin.readline()
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], flush=True)
sys.stdin.readline()
srv.close()
"""


class _LimitedServer:
    """A store server in a child process with RLIMIT_NOFILE (soft, hard)."""

    def __init__(self, soft, hard):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE_WITH_LIMIT, str(soft), str(hard), SECRET.hex()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline())

    def soft_limit(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("\n\n")
            self.proc.stdin.close()
        self.proc.wait(10)


def _hard_fd_limit():
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


@pytest.mark.skipif(_hard_fd_limit() < 400, reason="needs an open-file hard limit of 400")
def test_server_raises_its_fd_limit_when_it_needs_to():
    hard = min(_hard_fd_limit(), 1 << 16)
    srv = _LimitedServer(48, hard)
    clients = []
    try:
        for i in range(120):  # more than 48 fds' worth
            clients.append(TCPStore("127.0.0.1", srv.port, secret=SECRET, timeout=10))
            clients[-1].set(f"k{i}", str(i).encode())
        assert [c.get(f"k{(i + 1) % 120}") for i, c in enumerate(clients)] == [
            str((i + 1) % 120).encode() for i in range(120)]
        assert srv.soft_limit() == hard
    finally:
        for c in clients:
            c.close()
        srv.close()


def test_server_out_of_fds_refuses_a_client_and_serves_the_others():
    srv = _LimitedServer(48, 48)
    clients = []
    try:
        with pytest.raises(RendezvousError, match="out of file descriptors") as info:
            for _ in range(60):
                clients.append(TCPStore("127.0.0.1", srv.port, secret=SECRET, timeout=10,
                                        connect_timeout=60))
        assert not isinstance(info.value, RendezvousTimeout)  # refused, not retried
        assert 10 < len(clients) < 48
        # the clients it has are served as before
        for i, c in enumerate(clients):
            c.set(f"k{i}", str(i).encode())
        assert clients[0].get_many([f"k{i}" for i in range(len(clients))]) == [
            str(i).encode() for i in range(len(clients))]
        # a freed fd takes a new client again
        clients.pop().close()
        deadline = time.monotonic() + 10
        while True:
            try:
                clients.append(TCPStore("127.0.0.1", srv.port, secret=SECRET, timeout=10))
                break
            except RendezvousError:  # the server has not seen the close yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        assert clients[-1].get("k0") == b"0"
        assert srv.soft_limit() == 48
    finally:
        for c in clients:
            c.close()
        srv.close()
