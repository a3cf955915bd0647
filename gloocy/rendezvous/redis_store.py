"""A store in a Redis server: a raw socket, with hiredis as the RESP parser.

Each store key is the Redis key ``prefix + key``, holding a *list of one
element*, the value. That lets a waiter block on the key itself, without
polling: ``BLMOVE k k LEFT RIGHT timeout`` returns at once if ``k`` exists
(rotating a one-element list changes nothing) and otherwise blocks in the
server until some client creates ``k``; then Redis serves every client
blocked on ``k`` in turn, since each one puts the element back. Writes
replace the list in a ``MULTI``/``EXEC`` transaction (``DEL`` + ``RPUSH``);
``add`` and ``compare_set`` read under ``WATCH`` and retry if another
client changed the key in between (values are Python ints of any size, so
the sum is computed here, not by Lua's doubles or INCRBY's 64 bits).

``clear()`` deletes the keys under the store's prefix (``SCAN`` + ``DEL``):
call it once when the job ends so that nothing of the job stays in Redis.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence

import hiredis

from ..errors import RendezvousError, RendezvousTimeout
from .store import DEFAULT_TIMEOUT, SocketStore, TryAgain, _check_timeout, capped_end, hostport

__all__ = ["RedisStore", "DEFAULT_PORT", "DEFAULT_PREFIX"]

DEFAULT_PORT = 6379
DEFAULT_PREFIX = "gloocy/"
# How much later than a blocking command's own timeout the reply may come
# before the client gives up on the connection (Redis checks blocked
# clients' timeouts about every 1/hz s, 100 ms by default).
BLOCK_GRACE = 1.0
SCAN_COUNT = 1000
# Replies that say "not now" rather than "no": the connection is retried.
_TRANSIENT = ("LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN")


def _glob_escape(raw: bytes) -> bytes:
    out = bytearray()
    for b in raw:
        if b in b"\\*?[]^":
            out += b"\\"
        out.append(b)
    return bytes(out)


class _Refused(Exception):
    """The server answered a handshake command with a lasting error."""


class RedisStore(SocketStore):
    """Client of a Redis server (``redis-server`` 6.2 or later; older ones
    work through BRPOPLPUSH).

    Connects in the constructor, retrying until ``connect_timeout``
    (default: ``timeout``) while the server refuses or does not answer; a
    server that is still unreachable then raises RendezvousTimeout naming
    host:port. Wrong credentials raise RendezvousError at once.

    ``username``/``password`` are sent with AUTH (``username`` needs
    ``password``: Redis 6 ACL users), ``db`` with SELECT. ``prefix`` is put
    before every key, so that jobs sharing a server do not meet; give each
    job its own. One request at a time per client (a lock); use one client
    per thread for concurrent blocking calls.
    """

    _server = "the Redis server"
    _store = "the Redis store"
    _broken = (OSError, hiredis.ProtocolError)

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT, *,
                 db: int = 0, username: str | None = None, password: str | None = None,
                 prefix: str = DEFAULT_PREFIX, timeout: float = DEFAULT_TIMEOUT,
                 connect_timeout: float | None = None) -> None:
        super().__init__(timeout=timeout)
        if not isinstance(host, str) or not host:
            raise ValueError(f"host must be a non-empty str, got {host!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port must be an int in 1..65535, got {port!r}")
        if isinstance(db, bool) or not isinstance(db, int) or db < 0:
            raise ValueError(f"db must be an int >= 0, got {db!r}")
        for name, v in (("username", username), ("password", password)):
            if v is not None and not isinstance(v, str):
                raise TypeError(f"{name} must be a str, not {type(v).__name__}")
        if username is not None and password is None:
            raise ValueError("a Redis username needs a password")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        self.host, self.port, self.db = host, port, db
        self.username, self._password = username, password
        self.prefix = prefix
        self._raw_prefix = prefix.encode()
        self.address = hostport(host, port)
        self.url = f"redis://{self.address}/{db}"
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._reader: hiredis.Reader | None = None
        self._blmove = True  # False: the server predates BLMOVE (6.2)
        self._closed = False
        ct = self.timeout if connect_timeout is None else _check_timeout(
            connect_timeout, "connect_timeout")
        with self._lock:
            self._connect(time.monotonic() + ct)

    def __repr__(self) -> str:
        return f"RedisStore({self.url!r}, prefix={self.prefix!r})"

    # -- operations ----------------------------------------------------------

    def _k(self, key: str) -> bytes:
        return self._raw_prefix + key.encode()

    def _set(self, key: str, value: bytes) -> None:
        k = self._k(key)
        self._run(f"set({key!r})", self.timeout,
                  lambda deadline: self._replace(k, value, deadline))

    def _get(self, key: str, timeout: float) -> bytes:
        k = self._k(key)
        return self._run(f"key {key!r}", timeout,
                         lambda deadline: self._block(k, deadline, f"key {key!r}", timeout))

    def _add(self, key: str, amount: int) -> int:
        k = self._k(key)

        def update(current: bytes | None) -> bytes:
            try:
                return str(int(b"0" if current is None else current) + amount).encode()
            except ValueError:
                raise ValueError(f"value of key {key!r} is not a decimal integer") from None

        return int(self._run(f"add({key!r})", self.timeout,
                             lambda deadline: self._update(k, update, deadline)))

    def _wait(self, keys: list[str], timeout: float) -> None:
        ks = [self._k(k) for k in dict.fromkeys(keys)]
        what = f"keys {keys!r}"

        def wait_all(deadline: float) -> None:
            for k in ks:
                self._block(k, deadline, what, timeout)

        self._run(what, timeout, wait_all)

    def _check(self, keys: list[str]) -> bool:
        if not keys:
            return True
        n = self._run("check()", self.timeout, lambda deadline: self._call(
            [(b"EXISTS", *(self._k(k) for k in keys))], deadline)[0])
        return n == len(keys)

    def _delete(self, key: str) -> bool:
        k = self._k(key)
        return self._run(f"delete({key!r})", self.timeout,
                         lambda deadline: self._call([(b"DEL", k)], deadline)[0]) == 1

    def _compare_set(self, key: str, expected: bytes | None,
                     desired: bytes) -> bytes | None:
        k = self._k(key)
        return self._run(f"compare_set({key!r})", self.timeout, lambda deadline: self._update(
            k, lambda current: desired if current == expected else None, deadline))

    def _clear(self, prefix: str) -> int:
        pattern = _glob_escape(self._raw_prefix + prefix.encode()) + b"*"

        def scan_and_delete(deadline: float) -> int:
            cursor, count = b"0", 0
            while True:
                cursor, keys = self._call(
                    [(b"SCAN", cursor, b"MATCH", pattern, b"COUNT", SCAN_COUNT)], deadline)[0]
                if keys:
                    count += self._call([(b"DEL", *keys)], deadline)[0]
                if cursor == b"0":
                    return count

        return self._run(f"clear({prefix!r})", self.timeout, scan_and_delete)

    # -- Redis commands (the lock is held) -----------------------------------

    def _replace(self, k: bytes, value: bytes, deadline: float) -> None:
        self._call([(b"MULTI",), (b"DEL", k), (b"RPUSH", k, value), (b"EXEC",)], deadline)

    def _update(self, k: bytes, change, deadline: float) -> bytes | None:
        """Replace the value at ``k`` by ``change(current)`` atomically (an
        optimistic transaction); ``change`` returning None leaves it."""
        while True:
            _, current = self._call([(b"WATCH", k), (b"LINDEX", k, 0)], deadline)
            try:
                new = change(current)
            except BaseException:
                self._call([(b"UNWATCH",)], deadline)
                raise
            if new is None:
                self._call([(b"UNWATCH",)], deadline)
                return current
            # EXEC answers nil if another client touched k after WATCH: retry
            if self._call([(b"MULTI",), (b"DEL", k), (b"RPUSH", k, new), (b"EXEC",)],
                          deadline)[-1] is not None:
                return new

    def _block(self, k: bytes, deadline: float, what: str, timeout: float) -> bytes:
        """Return the value at ``k``, blocking in the server until it exists."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining < 0.001:  # a blocking timeout of 0 would mean "forever"
                value = self._call([(b"LINDEX", k, 0)], capped_end(deadline + BLOCK_GRACE))[0]
                if value is not None:
                    return value
                raise RendezvousTimeout(
                    f"timed out after {timeout:g} s waiting for {what} in the Redis "
                    f"store at {self.address} (prefix {self.prefix!r})")
            seconds = f"{remaining:.3f}".encode()
            cmd = ((b"BLMOVE", k, k, b"LEFT", b"RIGHT", seconds) if self._blmove
                   else (b"BRPOPLPUSH", k, k, seconds))
            reply = self._call([cmd], capped_end(deadline + BLOCK_GRACE), check=False)[0]
            if isinstance(reply, hiredis.ReplyError) and self._blmove and \
                    str(reply).startswith("ERR unknown command"):
                self._blmove = False
                continue
            if isinstance(reply, hiredis.ReplyError):
                self._reply_error(reply, [cmd])
            if reply is not None:
                return reply

    def _call(self, commands: Sequence[tuple], deadline: float, *,
              check: bool = True) -> list:
        """Send ``commands`` in one write and return their replies, raising
        on the first error reply unless ``check`` is false."""
        sock = self._sock
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        sock.sendall(b"".join(hiredis.pack_command(c) for c in commands))
        replies = [self._read_reply(deadline) for _ in commands]
        if check:
            for reply in replies:
                if isinstance(reply, hiredis.ReplyError):
                    self._reply_error(reply, commands)
                if isinstance(reply, list):  # EXEC: errors of queued commands
                    for r in reply:
                        if isinstance(r, hiredis.ReplyError):
                            self._reply_error(r, commands)
        return replies

    def _read_reply(self, deadline: float):
        reader = self._reader
        while True:
            reply = reader.gets()
            if reply is not Ellipsis:
                return reply
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self._sock.settimeout(remaining)
            data = self._sock.recv(1 << 16)
            if not data:
                raise ConnectionError("connection closed by the Redis server")
            reader.feed(data)

    def _reply_error(self, reply: hiredis.ReplyError, commands: Sequence[tuple]) -> None:
        text = str(reply)
        if text.startswith("WRONGTYPE"):
            raise RendezvousError(
                f"a key under prefix {self.prefix!r} in the Redis store at {self.address} "
                f"holds something this store did not write ({text})")
        names = " ".join(c[0].decode() for c in commands)
        raise RendezvousError(f"the Redis server at {self.address} refused {names}: {text}")

    # -- plumbing ------------------------------------------------------------

    def _out_of_step(self) -> bool:
        return self._reader is not None and self._reader.has_data()

    def _disconnect(self) -> None:
        super()._disconnect()
        self._reader = None

    def _greet(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._reader = sock, hiredis.Reader(notEnoughData=Ellipsis)
        try:
            self._handshake(deadline)
        except _Refused as e:
            if str(e).startswith(_TRANSIENT):
                raise TryAgain(e) from None
            raise RendezvousError(self._refusal(str(e))) from None

    def _handshake(self, deadline: float) -> None:
        commands: list[tuple] = []
        if self._password is not None:
            commands.append((b"AUTH", self.username, self._password) if self.username
                            else (b"AUTH", self._password))
        if self.db:
            commands.append((b"SELECT", self.db))
        commands.append((b"PING",))
        for reply in self._call(commands, deadline, check=False):
            if isinstance(reply, hiredis.ReplyError):
                raise _Refused(str(reply))

    def _refusal(self, text: str) -> str:
        where = f"the Redis server at {self.address}"
        if text.startswith("NOAUTH"):
            return (f"{where} needs a password (redis://[user:]password@"
                    f"{self.address}): {text}")
        if text.startswith(("WRONGPASS", "ERR invalid password", "ERR AUTH")):
            who = f"user {self.username!r}" if self.username else "the password"
            return f"{where} refused {who}: {text}"
        if "DB index" in text:
            return f"{where} has no database {self.db}: {text}"
        return f"{where} refused the connection: {text}"
