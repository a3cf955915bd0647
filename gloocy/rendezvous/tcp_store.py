"""The embedded TCP store: a one-thread server and its client.

Handshake (mutual, HMAC-SHA256 over the per-job secret)::

    server -> client   server_nonce (32 bytes)
    client -> server   HMAC(secret, CLIENT_LABEL + server_nonce) + client_nonce
    server -> client   HMAC(secret, SERVER_LABEL + client_nonce + server_nonce)

A connection that does not answer correctly within ``auth_timeout`` is closed.
A server out of file descriptors sends ``REFUSED`` and a reason in place of
its nonce, then closes.

Frames, both ways: ``!I`` body length (1..MAX_FRAME), then the body: one
byte (request op or reply status) followed by fields, each ``!I`` length +
bytes. A client has at most one request in flight; the server answers in
order and parks a GET/WAIT on a missing key until the key is set, so
clients never poll. A client whose deadline passes drops its connection
(the server forgets the parked request) and reconnects on next use.

The server is one thread around epoll: its work per event is independent
of how many clients are connected (thousands, one per rank of a job).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import secrets
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Sequence

from .._quiet import start_quiet
from ..errors import RendezvousError, RendezvousTimeout
from .store import DEFAULT_TIMEOUT, Store, _check_timeout

__all__ = ["TCPStore", "TCPStoreServer", "MAX_FRAME"]

MAX_FRAME = 64 << 20  # largest frame body, checked before allocating
NONCE = 32
CLIENT_LABEL = b"gloocy-store"
SERVER_LABEL = b"gloocy-store-server"
# A client that has not authenticated by then is dropped. Long: one that
# stays silent costs the server an fd, and delays nobody (one epoll loop),
# while thousands of clients starting at once on a loaded host can take
# seconds to answer (dropped, they failed their job's start-up).
AUTH_TIMEOUT = 60.0
# The least time a client gives a reply to come back: a get or wait with
# timeout=0 looks once (the question and its answer need a round trip).
MIN_REPLY_WAIT = 0.05
BACKLOG = 4096  # connections queued before accept (the kernel caps it: somaxconn)
RECV_SIZE = 1 << 16
ACCEPT_RETRY = 0.1  # pause of accepting when not even a refusal can be sent
# Sent in place of the nonce by a server that cannot take the client.
REFUSED = b"gloocy-store: refused\n".ljust(NONCE, b"\0")

_U32 = struct.Struct("!I")

# request ops
SET, GET, ADD, WAIT, CHECK, DELETE, COMPARE_SET, CLEAR, GET_MANY = range(1, 10)
# reply status
OK, ERR = 0, 1

_READABLE = select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR


class _Malformed(Exception):
    """The peer sent bytes that break the protocol."""


def _mac(secret: bytes, label: bytes, data: bytes) -> bytes:
    return hmac.new(secret, label + data, hashlib.sha256).digest()


def _pack(code: int, fields: Sequence[bytes] = ()) -> bytes:
    parts = [bytes((code,))]
    for f in fields:
        parts += (_U32.pack(len(f)), f)
    body = b"".join(parts)
    return _U32.pack(len(body)) + body


_REPLY_OK = _pack(OK)
_REPLY_YES, _REPLY_NO = _pack(OK, [b"1"]), _pack(OK, [b"0"])


def _unpack(buf: bytes | bytearray, start: int = 0,
            end: int | None = None) -> tuple[int, list[bytes]]:
    """The op (or status) and fields of the frame body ``buf[start:end]``."""
    end = len(buf) if end is None else end
    fields, pos = [], start + 1
    while pos < end:
        if pos + 4 > end:
            raise _Malformed("truncated field length")
        (n,) = _U32.unpack_from(buf, pos)
        pos += 4
        if n > end - pos:
            raise _Malformed("field longer than its frame")
        fields.append(bytes(buf[pos : pos + n]))
        pos += n
    return buf[start], fields


def _check_secret(secret: object) -> bytes:
    if not isinstance(secret, (bytes, bytearray, memoryview)):
        raise TypeError(f"secret must be bytes, not {type(secret).__name__}")
    if not secret:
        raise ValueError("secret must not be empty")
    return bytes(secret)


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --------------------------------------------------------------------------
# server


class _Conn:
    __slots__ = ("sock", "fd", "inbuf", "outbuf", "nonce", "deadline", "authed",
                 "parked", "missing", "writing", "closed")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.inbuf = bytearray()   # received bytes not yet handled
        self.outbuf = bytearray()  # replies the socket did not take yet
        self.nonce = secrets.token_bytes(NONCE)
        self.deadline = deadline   # for the handshake only
        self.authed = False
        self.parked: tuple[int, list[bytes]] | None = None  # a GET/GET_MANY/WAIT
        self.missing: set[bytes] = set()  # keys a parked request still waits for
        self.writing = False       # watched for writability (outbuf not empty)
        self.closed = False


class TCPStoreServer:
    """A store server on ``host:port`` served by one daemon thread.

    One epoll loop serves every client: no thread per client, no polling.
    A GET/GET_MANY/WAIT on a missing key parks until a SET (or ADD,
    COMPARE_SET) of that key wakes it. If the process runs out of file
    descriptors the server raises its soft RLIMIT_NOFILE to the hard one;
    past that it refuses new clients with a message saying why, and the
    clients it has keep being served.

    The socket is bound in the constructor (``port=0`` picks a free port;
    ``.port`` is the bound one), so the address can be published before
    ``start()``. Only ``host`` is bound: all interfaces only if asked
    with "0.0.0.0" or "::".
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *,
                 secret: bytes, auth_timeout: float = AUTH_TIMEOUT) -> None:
        if not isinstance(host, str) or not host:
            raise ValueError(f"host must be a non-empty str, got {host!r}")
        self._secret = _check_secret(secret)
        self._auth_timeout = _check_timeout(auth_timeout, "auth_timeout")
        family, type_, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        self._listener = socket.socket(family, type_, proto)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(addr)
            self._listener.listen(BACKLOG)
            self._listener.setblocking(False)
        except BaseException:
            self._listener.close()
            raise
        self.host = host
        self.port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._ep = select.epoll()
        self._ep.register(self._listener.fileno(), select.EPOLLIN)
        self._ep.register(self._wake_r.fileno(), select.EPOLLIN)
        # Kept to be given up when the process is out of fds: then one
        # client at a time can still be accepted and told why it is refused.
        self._spare_fd: int | None = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self._accept_paused_until: float | None = None
        self._data: dict[bytes, bytes] = {}
        self._waiters: dict[bytes, set[_Conn]] = {}
        self._conns: dict[int, _Conn] = {}  # fd -> conn
        # Connections still in the handshake, oldest first: with one
        # auth_timeout for all, that is also earliest deadline first.
        self._handshaking: deque[_Conn] = deque()
        self._ready: list[_Conn] = []  # conns with buffered requests to resume
        self._thread: threading.Thread | None = None
        self._clients = threading.Condition()  # notified as `_authed` falls
        self._authed = 0  # authenticated clients connected
        self._stopping = False
        self._closed = False
        self._close_lock = threading.Lock()

    @property
    def url(self) -> str:
        return "tcp://" + _hostport(self.host, self.port)

    def start(self) -> TCPStoreServer:
        if self._closed:
            raise RendezvousError(f"store server {self.url} is closed")
        if self._thread is None:
            self._thread = start_quiet(threading.Thread(
                target=self._serve, name=f"gloocy-store {self.url}", daemon=True))
        return self

    def close(self) -> None:
        """Stop the thread and close every socket. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        for conn in list(self._conns.values()):
            self._drop(conn)
        with self._clients:
            self._clients.notify_all()  # wait_clients() returns
        self._ep.close()
        for s in (self._listener, self._wake_r, self._wake_w):
            s.close()
        if self._spare_fd is not None:
            os.close(self._spare_fd)
            self._spare_fd = None

    def wait_clients(self, most: int, timeout: float) -> bool:
        """Wait until at most `most` authenticated clients are connected
        (a client that closes, or whose process ends, leaves), for up to
        `timeout` seconds. True if they were that few in time."""
        with self._clients:
            return self._clients.wait_for(
                lambda: self._authed <= most or self._closed, timeout)

    def __enter__(self) -> TCPStoreServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the loop ------------------------------------------------------------

    def _serve(self) -> None:
        conns, poll = self._conns, self._ep.poll
        listen_fd, wake_fd = self._listener.fileno(), self._wake_r.fileno()
        while not self._stopping:
            for fd, ev in poll(self._poll_timeout()):
                conn = conns.get(fd)
                if conn is None:
                    if fd == listen_fd:
                        self._accept()
                    elif fd == wake_fd:
                        try:
                            self._wake_r.recv(4096)
                        except OSError:
                            pass
                    continue
                try:
                    if ev & select.EPOLLOUT:
                        self._flush(conn)
                    if ev & _READABLE and not conn.closed:
                        self._on_read(conn)
                except Exception:  # a bad client never takes the server down
                    self._drop(conn)
            self._expire_handshakes()
            if (self._accept_paused_until is not None
                    and time.monotonic() >= self._accept_paused_until):
                self._accept_paused_until = None
                self._ep.modify(listen_fd, select.EPOLLIN)
            while self._ready:
                conn = self._ready.pop()
                try:
                    self._process(conn)
                except Exception:
                    self._drop(conn)

    def _poll_timeout(self) -> float:
        """Seconds until the next handshake deadline or accept retry; -1: none."""
        hs = self._handshaking
        while hs and (hs[0].authed or hs[0].closed):
            hs.popleft()
        when = [t for t in (hs[0].deadline if hs else None, self._accept_paused_until)
                if t is not None]
        return max(0.0, min(when) - time.monotonic()) if when else -1

    def _expire_handshakes(self) -> None:
        hs, now = self._handshaking, time.monotonic()
        while hs and hs[0].deadline <= now:
            conn = hs.popleft()
            if not conn.authed:
                self._drop(conn)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE) and self._out_of_fds():
                    continue
                if e.errno == errno.ECONNABORTED:
                    continue
                return
            sock.setblocking(False)
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock, time.monotonic() + self._auth_timeout)
            self._conns[conn.fd] = conn
            self._handshaking.append(conn)
            self._ep.register(conn.fd, select.EPOLLIN)
            self._send(conn, conn.nonce)

    def _out_of_fds(self) -> bool:
        """accept() found no free fd. Raise the soft limit to the hard one,
        or else refuse the waiting client, if any, with the reason. True:
        accept again; False: stop for now (the listener wakes the loop when
        a client waits, or accepting is paused for a moment: no busy loop)."""
        import resource           # (seldom needed: imported here)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (
                    hard if hard != resource.RLIM_INFINITY else max(2 * soft, 1 << 16), hard))
                return True
            except (ValueError, OSError):
                pass
        if self._spare_fd is None:  # could not be taken back last time
            try:
                self._spare_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._accept_paused_until = time.monotonic() + ACCEPT_RETRY
                self._ep.modify(self._listener.fileno(), 0)
                return False
        os.close(self._spare_fd)
        self._spare_fd = None
        try:
            sock, _ = self._listener.accept()
        except OSError:  # EMFILE comes before "nothing to accept": often this
            refused = False
        else:
            refused = True
            with sock:
                reason = (f"the store server is out of file descriptors ({len(self._conns)} "
                          f"clients connected, open-file limit {soft}); raise the limit "
                          f"(ulimit -n) of the process that serves the store")
                try:
                    sock.send(REFUSED + reason.encode())
                except OSError:
                    pass
        try:
            self._spare_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            pass
        return refused

    def _on_read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        if not data:
            raise _Malformed("peer closed")
        if not conn.authed:
            conn.inbuf += data
            if len(conn.inbuf) < 2 * NONCE:
                return
            answer, client_nonce = bytes(conn.inbuf[:NONCE]), bytes(conn.inbuf[NONCE:2 * NONCE])
            del conn.inbuf[:2 * NONCE]
            if not hmac.compare_digest(answer, _mac(self._secret, CLIENT_LABEL, conn.nonce)):
                raise _Malformed("authentication failed")
            conn.authed = True
            with self._clients:
                self._authed += 1
            self._send(conn, _mac(self._secret, SERVER_LABEL, client_nonce + conn.nonce))
            self._process(conn)
        elif conn.inbuf:
            conn.inbuf += data
            self._process(conn)
        else:  # the usual case: whole requests, handled from the bytes received
            used = self._frames(conn, data)
            if used < len(data):
                conn.inbuf += memoryview(data)[used:]
                self._check_backlog(conn)

    def _process(self, conn: _Conn) -> None:
        """Handle the complete frames buffered for ``conn``, in order."""
        used = self._frames(conn, conn.inbuf)
        if used:
            del conn.inbuf[:used]
        self._check_backlog(conn)

    def _frames(self, conn: _Conn, buf: bytes | bytearray) -> int:
        """Handle the complete frames at the start of ``buf``; return the
        number of bytes they took."""
        pos, end = 0, len(buf)
        # Stop while a request is parked or the client is not reading replies.
        while conn.parked is None and not conn.closed and len(conn.outbuf) <= MAX_FRAME:
            if end - pos < 4:
                break
            (n,) = _U32.unpack_from(buf, pos)
            if not 1 <= n <= MAX_FRAME:
                raise _Malformed(f"bad frame length {n}")
            if end - pos - 4 < n:
                break
            op, fields = _unpack(buf, pos + 4, pos + 4 + n)
            pos += 4 + n
            self._handle(conn, op, fields)
        return pos

    @staticmethod
    def _check_backlog(conn: _Conn) -> None:
        if len(conn.inbuf) > 2 * (4 + MAX_FRAME):
            raise _Malformed("too much unanswered input")

    def _handle(self, conn: _Conn, op: int, f: list[bytes]) -> None:
        data = self._data
        if op == GET and len(f) == 1:
            value = data.get(f[0])
            if value is not None:
                self._send(conn, _pack(OK, (value,)))
            else:
                self._park(conn, GET, f)
        elif op == SET and len(f) == 2:
            data[f[0]] = f[1]
            self._send(conn, _REPLY_OK)
            self._notify(f[0])
        elif op == ADD and len(f) == 2:
            try:
                value = str(int(data.get(f[0], b"0")) + int(f[1])).encode()
            except ValueError:
                key = f[0].decode("utf-8", "replace")
                self._reply(conn, ERR, [f"value of key {key!r} is not a decimal integer".encode()])
                return
            data[f[0]] = value
            self._send(conn, _pack(OK, (value,)))
            self._notify(f[0])
        elif op == CHECK:
            self._send(conn, _REPLY_YES if all(k in data for k in f) else _REPLY_NO)
        elif op == WAIT or op == GET_MANY:
            self._park(conn, op, f)
        elif op == DELETE and len(f) == 1:
            self._send(conn, _REPLY_YES if data.pop(f[0], None) is not None else _REPLY_NO)
        elif op == COMPARE_SET and len(f) == 4:
            # key, b"1" if a value is expected (b"0": absence), expected, desired
            current = data.get(f[0])
            if current == (f[2] if f[1] == b"1" else None):
                data[f[0]] = current = f[3]
                self._notify(f[0])
            self._reply(conn, OK, [b"0"] if current is None else [b"1", current])
        elif op == CLEAR and len(f) == 1:
            doomed = [k for k in data if k.startswith(f[0])]
            for k in doomed:
                del data[k]
            self._reply(conn, OK, [str(len(doomed)).encode()])
        else:
            raise _Malformed(f"bad request op={op} fields={len(f)}")

    def _park(self, conn: _Conn, op: int, keys: list[bytes]) -> None:
        """Answer a GET/GET_MANY/WAIT now if its keys exist, else when they do."""
        conn.parked = (op, keys)
        conn.missing = {k for k in keys if k not in self._data}
        if not conn.missing:
            self._finish(conn)
            return
        for k in conn.missing:
            self._waiters.setdefault(k, set()).add(conn)

    def _notify(self, key: bytes) -> None:
        for conn in self._waiters.pop(key, ()):
            conn.missing.discard(key)
            if not conn.missing:
                self._finish(conn)

    def _finish(self, conn: _Conn) -> None:
        op, keys = conn.parked
        data = self._data
        if op != WAIT and any(k not in data for k in keys):
            self._park(conn, op, keys)  # one was deleted while it waited for another
            return
        conn.parked = None
        values = [] if op == WAIT else [data[k] for k in keys]
        if 1 + sum(4 + len(v) for v in values) > MAX_FRAME:
            self._reply(conn, ERR, [f"the values of these {len(keys)} keys are over the "
                                    f"store's frame limit of {MAX_FRAME} bytes; ask for "
                                    f"fewer at a time".encode()])
        else:
            self._reply(conn, OK, values)
        self._ready.append(conn)  # it may have more requests buffered

    # -- output --------------------------------------------------------------

    def _reply(self, conn: _Conn, status: int, fields: Sequence[bytes] = ()) -> None:
        self._send(conn, _pack(status, fields))

    def _send(self, conn: _Conn, data: bytes) -> None:
        """Send ``data`` after what is queued; queue what the socket does not
        take now. Errors drop ``conn``: this may run while serving another."""
        if conn.outbuf:
            conn.outbuf += data
            return
        try:
            n = conn.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            self._drop(conn)
            return
        if n < len(data):
            conn.outbuf += memoryview(data)[n:]
            self._watch_writes(conn, True)

    def _flush(self, conn: _Conn) -> None:
        try:
            while conn.outbuf:
                n = conn.sock.send(conn.outbuf)
                del conn.outbuf[:n]
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        self._watch_writes(conn, False)
        if conn.inbuf:
            self._ready.append(conn)  # was throttled; resume its requests

    def _watch_writes(self, conn: _Conn, on: bool) -> None:
        if conn.writing != on and not conn.closed:
            conn.writing = on
            self._ep.modify(conn.fd, select.EPOLLIN | (select.EPOLLOUT if on else 0))

    def _drop(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        del self._conns[conn.fd]
        if conn.authed:
            with self._clients:
                self._authed -= 1
                self._clients.notify_all()
        for k in conn.missing:
            waiters = self._waiters.get(k)
            if waiters is not None:
                waiters.discard(conn)
                if not waiters:
                    del self._waiters[k]
        conn.missing = set()
        conn.parked = None
        try:
            self._ep.unregister(conn.fd)
        except (OSError, ValueError):
            pass
        conn.sock.close()


# --------------------------------------------------------------------------
# client


def _recv_some(sock: socket.socket, most: int, deadline: float) -> bytes:
    """1 to ``most`` bytes from ``sock`` before ``deadline``."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    sock.settimeout(max(remaining, 0.001))
    chunk = sock.recv(min(most, 1 << 20))
    if not chunk:
        raise ConnectionError("connection closed by the store")
    return chunk


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        buf += _recv_some(sock, n - len(buf), deadline)
    return bytes(buf)


def _recv_reply(sock: socket.socket, deadline: float) -> bytearray:
    """The reply frame (length, body) to the one request in flight, in one
    recv when it fits: nothing may follow it."""
    buf, need = bytearray(), 4
    while len(buf) < need:
        buf += _recv_some(sock, max(need - len(buf), RECV_SIZE), deadline)
        if need == 4 and len(buf) >= 4:
            (n,) = _U32.unpack_from(buf)
            if not 1 <= n <= MAX_FRAME:
                raise _Malformed(f"bad reply length {n}")
            need += n
    if len(buf) > need:
        raise _Malformed("bytes after the reply")
    return buf


class TCPStore(Store):
    """Client of a TCPStoreServer.

    Connects in the constructor, retrying until ``connect_timeout`` (default:
    ``timeout``) since the server may not be up yet. One request at a time
    per client (a lock); use one client per thread for concurrent blocking
    calls.
    """

    def __init__(self, host: str, port: int, *, secret: bytes,
                 timeout: float = DEFAULT_TIMEOUT,
                 connect_timeout: float | None = None) -> None:
        super().__init__(timeout=timeout)
        if not isinstance(host, str) or not host:
            raise ValueError(f"host must be a non-empty str, got {host!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port must be an int in 1..65535, got {port!r}")
        self.host, self.port = host, port
        self.address = _hostport(host, port)
        self.url = "tcp://" + self.address
        self._secret = _check_secret(secret)
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._closed = False
        ct = self.timeout if connect_timeout is None else _check_timeout(
            connect_timeout, "connect_timeout")
        with self._lock:
            self._connect(time.monotonic() + ct)

    def __repr__(self) -> str:
        return f"TCPStore({self.url!r})"

    def close(self) -> None:
        self._closed = True
        sock = self._sock
        if sock is not None:
            try:  # wakes a thread blocked in get()/wait() on this client
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._lock:
            self._disconnect()

    # -- operations ----------------------------------------------------------

    def _set(self, key: str, value: bytes) -> None:
        self._request(SET, [key.encode(), value], self.timeout, f"set({key!r})")

    def _get(self, key: str, timeout: float) -> bytes:
        return self._request(GET, [key.encode()], timeout, f"key {key!r}")[0]

    def _get_many(self, keys: list[str], timeout: float) -> list[bytes]:
        if not keys:
            return []
        return self._request(GET_MANY, [k.encode() for k in keys], timeout, f"keys {keys!r}")

    def _add(self, key: str, amount: int) -> int:
        return self._count(self._request(ADD, [key.encode(), str(amount).encode()],
                                         self.timeout, f"add({key!r})")[0])

    def _wait(self, keys: list[str], timeout: float) -> None:
        self._request(WAIT, [k.encode() for k in keys], timeout, f"keys {keys!r}")

    def _check(self, keys: list[str]) -> bool:
        return self._request(CHECK, [k.encode() for k in keys], self.timeout,
                             "check()")[0] == b"1"

    def _delete(self, key: str) -> bool:
        return self._request(DELETE, [key.encode()], self.timeout,
                             f"delete({key!r})")[0] == b"1"

    def _compare_set(self, key: str, expected: bytes | None,
                     desired: bytes) -> bytes | None:
        fields = [key.encode(), b"0" if expected is None else b"1",
                  expected or b"", desired]
        reply = self._request(COMPARE_SET, fields, self.timeout, f"compare_set({key!r})")
        return reply[1] if reply[0] == b"1" else None

    def _clear(self, prefix: str) -> int:
        return self._count(self._request(CLEAR, [prefix.encode()], self.timeout,
                                         f"clear({prefix!r})")[0])

    def _count(self, field: bytes) -> int:
        """The number in a reply; a server that sends anything else is broken."""
        try:
            return int(field)
        except ValueError:
            raise RendezvousError(f"malformed reply from the store at {self.address}: "
                                  f"{field[:40]!r} is not a number") from None

    # -- plumbing ------------------------------------------------------------

    def _request(self, op: int, fields: list[bytes], timeout: float, what: str) -> list[bytes]:
        frame = _pack(op, fields)
        if len(frame) - 4 > MAX_FRAME:
            raise ValueError(f"request for {what} is {len(frame)} bytes, over the "
                             f"store's frame limit of {MAX_FRAME} bytes")
        with self._lock:
            if self._closed:
                raise RendezvousError(f"store client for {self.url} is closed")
            deadline = time.monotonic() + max(timeout, MIN_REPLY_WAIT)
            try:
                if self._sock is None:
                    self._connect(deadline)
                sock = self._sock
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                sock.sendall(frame)
                status, reply = _unpack(_recv_reply(sock, deadline), 4)
            except RendezvousError:
                self._disconnect()
                raise
            except TimeoutError:
                # The reply may still come; drop the connection so that it
                # cannot be taken for the answer to a later request.
                self._disconnect()
                raise RendezvousTimeout(
                    f"timed out after {timeout:g} s waiting for {what} "
                    f"in the store at {self.address}") from None
            except (OSError, _Malformed) as e:
                self._disconnect()
                if self._closed:
                    raise RendezvousError(f"store client for {self.url} was closed") from None
                raise RendezvousError(
                    f"lost the connection to the store at {self.address} "
                    f"during {what}: {e}") from e
            except BaseException:  # e.g. KeyboardInterrupt: stream state unknown
                self._disconnect()
                raise
        if status == ERR:
            raise ValueError(reply[0].decode("utf-8", "replace") if reply else "store error")
        if status != OK or (op in (GET, ADD, CHECK, DELETE, CLEAR) and len(reply) != 1) or (
                op == COMPARE_SET and len(reply) != (2 if reply[:1] == [b"1"] else 1)) or (
                op == GET_MANY and len(reply) != len(fields)):
            raise RendezvousError(f"malformed reply from the store at {self.address}")
        return reply

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connect(self, deadline: float) -> None:
        """Connect and authenticate, retrying until ``deadline``."""
        delay, last_error = 0.01, None
        while True:
            if self._closed:
                raise RendezvousError(f"store client for {self.url} is closed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RendezvousTimeout(
                    f"could not connect to the store at {self.address} before the "
                    f"deadline: {last_error or 'no answer'}")
            sock = None
            try:
                sock = socket.create_connection((self.host, self.port), timeout=remaining)
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._handshake(sock, deadline)
            except TimeoutError:
                last_error = "no answer in time"
            except OSError as e:  # refused, unreachable, not resolvable (yet), reset
                last_error = e
            except BaseException:
                if sock is not None:
                    sock.close()
                raise
            else:
                self._sock = sock
                return
            if sock is not None:
                sock.close()
            time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 0.5)

    def _handshake(self, sock: socket.socket, deadline: float) -> None:
        server_nonce = _recv_exact(sock, NONCE, deadline)  # errors: retried
        if server_nonce == REFUSED:
            raise RendezvousError(f"the store at {self.address} refused this client: "
                                  f"{self._refusal(sock, deadline)}")
        client_nonce = secrets.token_bytes(NONCE)
        sock.sendall(_mac(self._secret, CLIENT_LABEL, server_nonce) + client_nonce)
        try:
            proof = _recv_exact(sock, NONCE, deadline)
        except ConnectionError:
            raise RendezvousError(
                f"the store at {self.address} refused this client's "
                f"authentication (wrong secret?)") from None
        if not hmac.compare_digest(
                proof, _mac(self._secret, SERVER_LABEL, client_nonce + server_nonce)):
            raise RendezvousError(
                f"the server at {self.address} could not prove it knows the job "
                f"secret; refusing to use it as the store")

    @staticmethod
    def _refusal(sock: socket.socket, deadline: float) -> str:
        """The reason a refusing server gives (it closes after it)."""
        reason = b""
        try:
            sock.settimeout(max(min(deadline - time.monotonic(), 1.0), 0.001))
            while len(reason) < 1024 and (chunk := sock.recv(1024)):
                reason += chunk
        except OSError:
            pass
        return reason.decode("utf-8", "replace").strip() or "no reason given"
