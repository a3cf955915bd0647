"""The Store interface: a small key/value store used only at start-up.

Ranks use a store to publish their addresses and to wait for each other's.
Keys are non-empty ``str``, values are ``bytes``. Blocking calls take a
deadline in seconds (``timeout``); ``None`` means the store's default.

Concrete stores implement the underscored methods; the public methods here
check the arguments once, so every store rejects bad input the same way.
"""

from __future__ import annotations

import abc
import contextlib
import socket
import threading
import time
from collections.abc import Sequence

from ..errors import RendezvousError, RendezvousTimeout

__all__ = ["Store", "SocketStore", "TryAgain", "DEFAULT_TIMEOUT", "capped", "capped_end",
           "client_lock", "hostport"]

DEFAULT_TIMEOUT = 300.0

# The end (time.monotonic()) of this thread's store operations, if capped.
_cap = threading.local()


@contextlib.contextmanager
def capped(until: float):
    """Every store operation this thread makes in the block ends by
    ``until`` (a time.monotonic() value), whatever its store's timeout:
    its waits (for a key, for the client's lock, for a reply, for a
    connection) are cut to the time left; one that runs out raises
    RendezvousTimeout, as at its own timeout. For work that must not wait
    on a store that may be unreachable (a rank's failure path, its exit).
    Caps nest: the earlier end wins."""
    before = getattr(_cap, "until", None)
    _cap.until = until if before is None else min(before, until)
    try:
        yield
    finally:
        _cap.until = before


def _capped(timeout: float) -> float:
    """``timeout``, cut to what is left of this thread's cap (see capped)."""
    until = getattr(_cap, "until", None)
    return timeout if until is None else min(timeout, max(until - time.monotonic(), 0.0))


def capped_end(deadline: float) -> float:
    """``deadline`` (time.monotonic()), or this thread's cap if earlier."""
    until = getattr(_cap, "until", None)
    return deadline if until is None else min(deadline, until)


@contextlib.contextmanager
def client_lock(lock: threading.Lock, what: str):
    """Hold a store client's ``lock`` (its one request at a time), waiting
    for another thread's request no longer than this thread's cap allows
    (see capped): RendezvousTimeout naming ``what`` if it runs out."""
    until = getattr(_cap, "until", None)
    if not lock.acquire(timeout=-1 if until is None
                        else max(until - time.monotonic(), 0.0)):
        raise RendezvousTimeout(f"timed out waiting for {what}: the client "
                                f"is busy with another thread's request")
    try:
        yield
    finally:
        lock.release()


def hostport(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_key(key: object, name: str = "key") -> str:
    if not isinstance(key, str):
        raise TypeError(f"{name} must be a str, not {type(key).__name__}")
    if not key:
        raise ValueError(f"{name} must not be empty")
    return key


def _check_keys(keys: object) -> list[str]:
    # A lone str is a Sequence too; wait("ab") would silently wait for "a" and "b".
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise TypeError(
            f"keys must be a sequence of str (e.g. a list), not {type(keys).__name__}"
        )
    return [_check_key(k, "each key in keys") for k in keys]


def _check_amount(amount: object) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise TypeError(f"amount must be an int, not {type(amount).__name__}")
    return amount


def _check_value(value: object) -> bytes:
    if isinstance(value, str):
        raise TypeError("value must be bytes-like, not str (encode it first)")
    try:
        return bytes(memoryview(value))
    except TypeError:
        raise TypeError(
            f"value must be bytes-like, not {type(value).__name__}"
        ) from None


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
    return prefix


def _check_timeout(timeout: object, name: str = "timeout") -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(timeout).__name__}")
    if not timeout >= 0:  # also rejects NaN
        raise ValueError(f"{name} must be >= 0, got {timeout!r}")
    return float(timeout)


class Store(abc.ABC):
    """Key/value store used only at start-up to exchange addresses.

    Keys are str, values bytes. ``timeout`` is the default deadline in
    seconds of the blocking operations (``get`` and ``wait``).
    """

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = _check_timeout(timeout)

    # Read, it is cut to the calling thread's cap (see capped), so that every
    # operation the concrete stores bound by it is bounded by the cap too.
    @property
    def timeout(self) -> float:
        return _capped(self._default_timeout)

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._default_timeout = seconds

    # -- public API: validate, then delegate ---------------------------------

    def set(self, key: str, value: bytes) -> None:
        """Store ``value`` under ``key``, replacing any previous value."""
        self._set(_check_key(key), _check_value(value))

    def get(self, key: str, *, timeout: float | None = None) -> bytes:
        """Return the value of ``key``, waiting until some rank sets it.

        Raises RendezvousTimeout if the key does not appear in time.
        """
        return self._get(_check_key(key), self._timeout(timeout))

    def get_many(self, keys: Sequence[str], *, timeout: float | None = None) -> list[bytes]:
        """The values of ``keys``, in order, waiting until every one is set.

        One deadline for all of them. Raises RendezvousTimeout if some key
        does not appear in time.
        """
        return self._get_many(_check_keys(keys), self._timeout(timeout))

    def add(self, key: str, amount: int = 1) -> int:
        """Atomically add ``amount`` to the integer at ``key`` and return the sum.

        A missing key counts as 0; the value is stored as decimal ASCII bytes.
        """
        return self._add(_check_key(key), _check_amount(amount))

    def batch(self, ops: Sequence[tuple]) -> list:
        """Run ``ops`` in order, each ``("set", key, value)`` or ``("add",
        key, amount)``; their results (None for a set, the sum for an add).
        A store that can send them together and wait for the answers once
        does (TCPStore: one round trip instead of one each)."""
        if isinstance(ops, (str, bytes)) or not isinstance(ops, Sequence):
            raise TypeError(f"ops must be a sequence of tuples, not {type(ops).__name__}")
        checked = []
        for op in ops:
            if not (isinstance(op, tuple) and len(op) == 3 and op[0] in ("set", "add")):
                raise ValueError(f"each of ops must be (\"set\", key, value) or "
                                 f"(\"add\", key, amount), not {op!r}")
            name, key, arg = op
            arg = _check_value(arg) if name == "set" else _check_amount(arg)
            checked.append((name, _check_key(key), arg))
        return self._batch(checked)

    def wait(self, keys: Sequence[str], *, timeout: float | None = None) -> None:
        """Block until every key in ``keys`` exists."""
        self._wait(_check_keys(keys), self._timeout(timeout))

    def check(self, keys: Sequence[str]) -> bool:
        """Whether every key in ``keys`` exists now (no waiting)."""
        return self._check(_check_keys(keys))

    def delete(self, key: str) -> bool:
        """Remove ``key``; True if it existed."""
        return self._delete(_check_key(key))

    def compare_set(self, key: str, expected: bytes | None,
                    desired: bytes) -> bytes | None:
        """Atomically set ``key`` to ``desired`` if it holds ``expected``.

        ``expected=None`` means "if ``key`` does not exist" (create once).
        Returns the value ``key`` holds afterwards: ``desired`` if the swap
        happened, else the current value, or None if the key does not exist.
        A swap wakes the ranks waiting for ``key``, as ``set`` does.
        """
        return self._compare_set(
            _check_key(key), None if expected is None else _check_value(expected),
            _check_value(desired))

    def clear(self, prefix: str = "") -> int:
        """Delete every key that starts with ``prefix`` and return how many.

        With the default ``""`` this removes every key of the store (of a
        prefixed store: every key under its prefix), e.g. when a job ends.
        """
        return self._clear(_check_prefix(prefix))

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store's resources. Idempotent."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _timeout(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else _capped(_check_timeout(timeout))

    # -- what a concrete store implements (arguments already checked) --------

    @abc.abstractmethod
    def _set(self, key: str, value: bytes) -> None: ...

    @abc.abstractmethod
    def _get(self, key: str, timeout: float) -> bytes: ...

    @abc.abstractmethod
    def _add(self, key: str, amount: int) -> int: ...

    @abc.abstractmethod
    def _wait(self, keys: list[str], timeout: float) -> None: ...

    @abc.abstractmethod
    def _check(self, keys: list[str]) -> bool: ...

    @abc.abstractmethod
    def _delete(self, key: str) -> bool: ...

    # Not abstract, so that stores written before these existed still load.

    def _get_many(self, keys: list[str], timeout: float) -> list[bytes]:
        """One get after another under one deadline; a store that can ask
        for all at once (one round trip) overrides this."""
        deadline = time.monotonic() + timeout
        return [self._get(k, max(0.0, deadline - time.monotonic())) for k in keys]

    def _batch(self, ops: list[tuple]) -> list:
        """One operation after another; a store that can send them
        together overrides this."""
        return [self._set(k, a) if name == "set" else self._add(k, a)
                for name, k, a in ops]

    def _compare_set(self, key: str, expected: bytes | None,
                     desired: bytes) -> bytes | None:
        raise NotImplementedError(f"{type(self).__name__} has no compare_set()")

    def _clear(self, prefix: str) -> int:
        raise NotImplementedError(f"{type(self).__name__} has no clear()")


class TryAgain(Exception):
    """The server answered but is not ready yet (`SocketStore._greet`)."""


class SocketStore(Store):
    """A store reached through one socket (``_sock``), guarded by ``_lock``,
    at ``host``:``port`` (``address``), called ``_server`` in messages."""

    _sock: socket.socket | None = None
    _closed = False
    _server = "the store"
    _store = "the store"               # as a request's errors name it
    _broken: tuple = (OSError,)        # what a lost connection or stream raises
    _min_wait = 0.0                    # the least time a request is given (s)

    @abc.abstractmethod
    def _greet(self, sock: socket.socket, deadline: float) -> None:
        """Authenticate a new connection (OSError, TimeoutError, TryAgain:
        try again; any other error ends the attempt)."""

    def _connect(self, deadline: float) -> None:
        """Connect and greet, retrying until ``deadline`` while the server
        is unreachable or not ready."""
        delay, last_error = 0.01, None
        while True:
            if self._closed:
                raise RendezvousError(f"store client for {self.url} is closed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RendezvousTimeout(
                    f"could not connect to {self._server} at {self.address} before "
                    f"the deadline: {last_error or 'no answer'}")
            sock = None
            try:
                sock = socket.create_connection((self.host, self.port), timeout=remaining)
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._greet(sock, deadline)
                self._sock = sock
                return
            except TimeoutError:
                last_error = "no answer in time"
            except (OSError, TryAgain) as e:  # refused, unreachable, reset, loading
                last_error = e
            except BaseException:
                self._drop(sock)
                raise
            self._drop(sock)
            time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 0.5)

    def _run(self, what: str, timeout: float, fn):
        """``fn(deadline)`` holding the lock, on a live connection, with
        socket failures turned into RendezvousError (``what``: the request,
        as errors name it)."""
        with client_lock(self._lock, f"{what} in {self._store} at {self.address}"):
            if self._closed:
                raise RendezvousError(f"store client for {self.url} is closed")
            # (_capped: the lock may have taken some of a capped thread's time)
            deadline = time.monotonic() + max(_capped(timeout), self._min_wait)
            try:
                if self._sock is None:
                    self._connect(deadline)
                return fn(deadline)
            except (RendezvousError, ValueError):
                if self._out_of_step():
                    self._disconnect()
                raise
            except TimeoutError:
                # The reply may still come; drop the connection so that it
                # cannot be taken for the answer to a later request.
                self._disconnect()
                raise RendezvousTimeout(
                    f"timed out after {timeout:g} s waiting for {what} "
                    f"in {self._store} at {self.address}") from None
            except self._broken as e:
                self._disconnect()
                if self._closed:
                    raise RendezvousError(f"store client for {self.url} was closed") from None
                raise RendezvousError(
                    f"lost the connection to {self._store} at {self.address} "
                    f"during {what}: {e}") from e
            except BaseException:  # e.g. KeyboardInterrupt: stream state unknown
                self._disconnect()
                raise

    def _out_of_step(self) -> bool:
        """Whether, after a request failed with an answer, replies may be
        left unread on the connection (then it is dropped)."""
        return True

    def _drop(self, sock: socket.socket | None) -> None:
        self._disconnect()
        if sock is not None:
            sock.close()

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

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
