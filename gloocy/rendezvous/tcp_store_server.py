"""The embedded TCP store's server: one thread around epoll, its work per
event independent of how many clients are connected (thousands, one per
rank of a job). The handshake and the frames are tcp_store's."""

from __future__ import annotations

import errno
import hmac
import os
import secrets
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence

from .._quiet import start_quiet
from ..errors import RendezvousError
from . import tcp_store as wire      # wire.MAX_FRAME: one limit, both ends
from .store import _check_timeout, hostport
from .tcp_store import (ACCEPT_RETRY, ADD, AUTH_TIMEOUT, BACKLOG, CHECK, CLEAR,
                        CLIENT_LABEL, COMPARE_SET, DELETE, ERR, GET, GET_MANY,
                        NONCE, OK, RECV_SIZE, REFUSED, SERVER_LABEL,
                        SET, WAIT, _Malformed, _READABLE, _REPLY_NO, _REPLY_OK,
                        _REPLY_YES, _U32, _check_secret, _mac, _pack,
                        _unpack)

__all__ = ["TCPStoreServer"]


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
        return "tcp://" + hostport(self.host, self.port)

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
        while conn.parked is None and not conn.closed and len(conn.outbuf) <= wire.MAX_FRAME:
            if end - pos < 4:
                break
            (n,) = _U32.unpack_from(buf, pos)
            if not 1 <= n <= wire.MAX_FRAME:
                raise _Malformed(f"bad frame length {n}")
            if end - pos - 4 < n:
                break
            op, fields = _unpack(buf, pos + 4, pos + 4 + n)
            pos += 4 + n
            self._handle(conn, op, fields)
        return pos

    @staticmethod
    def _check_backlog(conn: _Conn) -> None:
        if len(conn.inbuf) > 2 * (4 + wire.MAX_FRAME):
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
        if 1 + sum(4 + len(v) for v in values) > wire.MAX_FRAME:
            self._reply(conn, ERR, [f"the values of these {len(keys)} keys are over the "
                                    f"store's frame limit of {wire.MAX_FRAME} bytes; ask for "
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
