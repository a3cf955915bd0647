"""The in-process store: a dict behind a lock, for threads.

``HashStore()`` makes a private store; ``HashStore.named(name)`` (and the
url ``hash://name``) gives a client of the one store of that name in this
process, so threads that only know the url meet in the same place. Waiting
threads block on a condition of their own (no polling), filed under the keys
they miss; a write wakes only the waiters of its key (thousands of rank
threads of a thread world wait at once: waking them all on every write
would cost a wake-up per waiter per write).
"""

from __future__ import annotations

import threading
import time

from ..errors import RendezvousError, RendezvousTimeout
from .store import DEFAULT_TIMEOUT, Store

__all__ = ["HashStore"]


class _Table:
    """The shared state: the data, its lock, and the waiters by key."""

    __slots__ = ("data", "lock", "waiters")

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.waiters: dict[str, set[threading.Condition]] = {}

    def wrote(self, key: str) -> None:
        """Wake the waiters of `key` (the lock held)."""
        for cond in self.waiters.pop(key, ()):
            cond.notify()


_named: dict[str, _Table] = {}  # name -> table; lives as long as the process
_named_lock = threading.Lock()


class HashStore(Store):
    """A store in this process's memory, shared by the threads that hold
    clients of it. Each client can be closed on its own (a thread blocked
    in ``get``/``wait`` on it gets RendezvousError); the data stays for the
    other clients until ``clear()``.
    """

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT,
                 _table: _Table | None = None, _name: str | None = None) -> None:
        super().__init__(timeout=timeout)
        self._table = _Table() if _table is None else _table
        self.name = _name
        self.url = None if _name is None else "hash://" + _name
        self._closed = False
        self._waiting: set[threading.Condition] = set()  # this client's blocked calls

    @classmethod
    def named(cls, name: str = "", *, timeout: float = DEFAULT_TIMEOUT) -> HashStore:
        """A new client of the process-wide store called ``name``."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        with _named_lock:
            table = _named.get(name)
            if table is None:
                table = _named[name] = _Table()
        return cls(timeout=timeout, _table=table, _name=name)

    def client(self) -> HashStore:
        """Another client of the same data (e.g. one per thread)."""
        return type(self)(timeout=self.timeout, _table=self._table, _name=self.name)

    def __repr__(self) -> str:
        return f"HashStore({self.url!r})" if self.url else f"<HashStore at {id(self):#x}>"

    def close(self) -> None:
        if self._closed:
            return
        with self._table.lock:  # wake this client's waiters so they see it
            self._closed = True
            for cond in self._waiting:
                cond.notify()

    # -- operations ----------------------------------------------------------

    def _enter(self) -> dict[str, bytes]:
        if self._closed:
            raise RendezvousError(f"{self!r} is closed")
        return self._table.data

    def _set(self, key: str, value: bytes) -> None:
        with self._table.lock:
            self._enter()[key] = value
            self._table.wrote(key)

    def _get(self, key: str, timeout: float) -> bytes:
        with self._table.lock:
            self._block([key], timeout, f"key {key!r}")
            return self._table.data[key]

    def _add(self, key: str, amount: int) -> int:
        with self._table.lock:
            data = self._enter()
            try:
                value = int(data.get(key, b"0")) + amount
            except ValueError:
                raise ValueError(f"value of key {key!r} is not a decimal integer") from None
            data[key] = str(value).encode()
            self._table.wrote(key)
            return value

    def _wait(self, keys: list[str], timeout: float) -> None:
        with self._table.lock:
            self._block(keys, timeout, f"keys {keys!r}")

    def _check(self, keys: list[str]) -> bool:
        with self._table.lock:
            data = self._enter()
            return all(k in data for k in keys)

    def _delete(self, key: str) -> bool:
        with self._table.lock:
            return self._enter().pop(key, None) is not None

    def _compare_set(self, key: str, expected: bytes | None,
                     desired: bytes) -> bytes | None:
        with self._table.lock:
            data = self._enter()
            current = data.get(key)
            if current == expected:
                data[key] = current = desired
                self._table.wrote(key)
            return current

    def _clear(self, prefix: str) -> int:
        with self._table.lock:
            data = self._enter()
            doomed = [k for k in data if k.startswith(prefix)]
            for k in doomed:
                del data[k]
            return len(doomed)

    def _block(self, keys: list[str], timeout: float, what: str) -> None:
        """Wait (holding the lock) until every key exists."""
        table = self._table
        data, cond = table.data, None
        deadline = time.monotonic() + timeout
        try:
            while True:
                self._enter()
                missing = [k for k in keys if k not in data]
                if not missing:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RendezvousTimeout(
                        f"timed out after {timeout:g} s waiting for {what} in {self!r}")
                if cond is None:
                    cond = threading.Condition(table.lock)
                    self._waiting.add(cond)
                for k in missing:  # (a write of one pops every waiter of it)
                    table.waiters.setdefault(k, set()).add(cond)
                cond.wait(remaining)
        finally:
            if cond is not None:
                self._waiting.discard(cond)
                for k in keys:
                    waiting = table.waiters.get(k)
                    if waiting is not None:
                        waiting.discard(cond)
                        if not waiting:
                            del table.waiters[k]
