"""torch's c10d Store seen through gloocy's Store interface.

torch hands a backend a c10d Store (a PrefixStore over the job's TCPStore,
FileStore or HashStore); gloocy's mesh set-up publishes its addresses
through it, so no second store or port is needed.
"""

from __future__ import annotations

import datetime

from ..errors import RendezvousError, RendezvousTimeout
from ..rendezvous.store import Store

__all__ = ["C10dStore"]


class C10dStore(Store):
    """A gloocy Store whose keys live in a torch.distributed Store."""

    def __init__(self, store, *, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self._store = store

    def _set(self, key, value):
        self._store.set(key, value)

    def _get(self, key, timeout):
        self._wait([key], timeout)
        return bytes(self._store.get(key))

    def _add(self, key, amount):
        return int(self._store.add(key, amount))

    def _wait(self, keys, timeout):
        try:
            self._store.wait(keys, datetime.timedelta(seconds=timeout))
        except RuntimeError as e:       # DistStoreError: a timeout or a lost store
            if "timeout" in str(e).lower() or "timed out" in str(e).lower():
                raise RendezvousTimeout(
                    f"keys {keys} did not appear in torch's store within "
                    f"{timeout:g} s: {e}") from None
            raise RendezvousError(f"torch's store failed: {e}") from None

    def _check(self, keys):
        return bool(self._store.check(keys))

    def _delete(self, key):
        return bool(self._store.delete_key(key))

    def _compare_set(self, key, expected, desired):
        # c10d's compare_set takes b"" for "the key is absent".
        value = bytes(self._store.compare_set(key, expected or b"", desired))
        return value or None

    def _clear(self, prefix):
        # c10d stores cannot list keys; torch drops the group's store itself.
        return 0

    def close(self):
        pass
