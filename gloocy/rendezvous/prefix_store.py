"""A view of a store in which every key is ``prefix + "/" + key``.

Several jobs (or communicators, or retries of one start-up) can share one
store without their keys meeting: each gets its own ``PrefixStore``.
Views nest: ``PrefixStore(PrefixStore(s, "a"), "b")`` uses "a/b/key".
"""

from __future__ import annotations

from ..errors import RendezvousError
from .store import Store, _check_key, _check_timeout

__all__ = ["PrefixStore"]

SEPARATOR = "/"


class PrefixStore(Store):
    """Keys of ``store`` under ``prefix``. ``timeout`` defaults to the
    wrapped store's. ``clear()`` deletes only the keys under the prefix.

    ``close()`` closes this view only, unless ``close_store`` is true (the
    view owns the store): then it also closes ``store``, which wakes a
    thread blocked in ``get``/``wait`` through the view.
    """

    def __init__(self, store: Store, prefix: str, *, timeout: float | None = None,
                 close_store: bool = False) -> None:
        if not isinstance(store, Store):
            raise TypeError(f"store must be a Store, not {type(store).__name__}")
        super().__init__(timeout=store.timeout if timeout is None
                         else _check_timeout(timeout))
        self.store = store
        self.prefix = _check_key(prefix, "prefix")
        self._head = prefix + SEPARATOR
        self._close_store = bool(close_store)
        self._closed = False

    def __repr__(self) -> str:
        return f"PrefixStore({self.store!r}, {self.prefix!r})"

    def close(self) -> None:
        self._closed = True
        if self._close_store:
            self.store.close()

    def _inner(self) -> Store:
        if self._closed:
            raise RendezvousError(f"{self!r} is closed")
        return self.store

    def _set(self, key: str, value: bytes) -> None:
        self._inner().set(self._head + key, value)

    def _get(self, key: str, timeout: float) -> bytes:
        return self._inner().get(self._head + key, timeout=timeout)

    def _get_many(self, keys: list[str], timeout: float) -> list[bytes]:
        return self._inner().get_many([self._head + k for k in keys], timeout=timeout)

    def _add(self, key: str, amount: int) -> int:
        return self._inner().add(self._head + key, amount)

    def _batch(self, ops: list[tuple]) -> list:
        return self._inner().batch([(name, self._head + k, a) for name, k, a in ops])

    def _wait(self, keys: list[str], timeout: float) -> None:
        self._inner().wait([self._head + k for k in keys], timeout=timeout)

    def _check(self, keys: list[str]) -> bool:
        return self._inner().check([self._head + k for k in keys])

    def _delete(self, key: str) -> bool:
        return self._inner().delete(self._head + key)

    def _compare_set(self, key: str, expected: bytes | None,
                     desired: bytes) -> bytes | None:
        return self._inner().compare_set(self._head + key, expected, desired)

    def _clear(self, prefix: str) -> int:
        return self._inner().clear(self._head + prefix)
