"""The embedded TCP store: its wire (handshake, frames) and its client
(the server: tcp_store_server).

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

import hashlib
import hmac
import secrets
import select
import socket
import struct
import threading
import time
from collections.abc import Sequence

from ..errors import RendezvousError
from .shared_wait import one_at_a_time
from .store import DEFAULT_TIMEOUT, SocketStore, _check_timeout, hostport

__all__ = ["TCPStore", "MAX_FRAME"]

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


def _recv_replies(sock: socket.socket, count: int, deadline: float) -> list[bytearray]:
    """The `count` reply frames (length, body each) to the requests in
    flight, in as few recvs as they come in: nothing may follow the last."""
    buf, frames, start, need = bytearray(), [], 0, 4
    while len(frames) < count:
        if len(buf) < need:
            buf += _recv_some(sock, max(need - len(buf), RECV_SIZE), deadline)
        elif need == start + 4:
            (n,) = _U32.unpack_from(buf, start)
            if not 1 <= n <= MAX_FRAME:
                raise _Malformed(f"bad reply length {n}")
            need += n
        else:
            frames.append(buf[start:need])
            start, need = need, need + 4
    if len(buf) > start:
        raise _Malformed("bytes after the reply")
    return frames


class TCPStore(SocketStore):
    """Client of a TCPStoreServer.

    Connects in the constructor, retrying until ``connect_timeout`` (default:
    ``timeout``) since the server may not be up yet. One request at a time
    per client (a lock); use one client per thread for concurrent blocking
    calls.
    """

    _broken = (OSError, _Malformed)
    _min_wait = MIN_REPLY_WAIT

    def __init__(self, host: str, port: int, *, secret: bytes,
                 timeout: float = DEFAULT_TIMEOUT,
                 connect_timeout: float | None = None) -> None:
        super().__init__(timeout=timeout)
        if not isinstance(host, str) or not host:
            raise ValueError(f"host must be a non-empty str, got {host!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port must be an int in 1..65535, got {port!r}")
        self.host, self.port = host, port
        self.address = hostport(host, port)
        self.url = "tcp://" + self.address
        self._secret = _check_secret(secret)
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._closed = False
        ct = self.timeout if connect_timeout is None else _check_timeout(
            connect_timeout, "connect_timeout")
        # (one at a time with the other clients of this process to the same
        # store, as hundreds of rank threads start: see shared_wait)
        with one_at_a_time(self, ct), self._lock:
            self._connect(time.monotonic() + ct)

    def __repr__(self) -> str:
        return f"TCPStore({self.url!r})"

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

    def _batch(self, ops: list[tuple]) -> list:
        """The requests sent together, their replies read as they come
        (the server answers in order): one round trip."""
        requests = [(SET, [k.encode(), a]) if name == "set"
                    else (ADD, [k.encode(), str(a).encode()]) for name, k, a in ops]
        replies = self._exchange(requests, self.timeout, f"a batch of {len(ops)}")
        return [None if name == "set" else self._count(r[0])
                for (name, _, _), r in zip(ops, replies)]

    def _count(self, field: bytes) -> int:
        """The number in a reply; a server that sends anything else is broken."""
        try:
            return int(field)
        except ValueError:
            raise RendezvousError(f"malformed reply from the store at {self.address}: "
                                  f"{field[:40]!r} is not a number") from None

    # -- plumbing ------------------------------------------------------------

    def _request(self, op: int, fields: list[bytes], timeout: float, what: str) -> list[bytes]:
        return self._exchange([(op, fields)], timeout, what)[0]

    def _exchange(self, requests: list[tuple[int, list[bytes]]], timeout: float,
                  what: str) -> list[list[bytes]]:
        """Send the requests (op, fields) at once; the fields of each
        reply, in order."""
        frames = [_pack(op, fields) for op, fields in requests]
        for frame in frames:
            if len(frame) - 4 > MAX_FRAME:
                raise ValueError(f"request for {what} is {len(frame)} bytes, over the "
                                 f"store's frame limit of {MAX_FRAME} bytes")
        def send_and_receive(deadline):
            sock = self._sock
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.sendall(b"".join(frames))
            return [_unpack(frame, 4) for frame in
                    _recv_replies(sock, len(frames), deadline)]
        got = self._run(what, timeout, send_and_receive)
        for (op, fields), (status, reply) in zip(requests, got):
            if status == ERR:
                raise ValueError(reply[0].decode("utf-8", "replace") if reply
                                 else "store error")
            if status != OK or (op in (GET, ADD, CHECK, DELETE, CLEAR) and len(reply) != 1) or (
                    op == COMPARE_SET and len(reply) != (2 if reply[:1] == [b"1"] else 1)) or (
                    op == GET_MANY and len(reply) != len(fields)):
                raise RendezvousError(f"malformed reply from the store at {self.address}")
        return [reply for _, reply in got]

    def _greet(self, sock: socket.socket, deadline: float) -> None:
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
