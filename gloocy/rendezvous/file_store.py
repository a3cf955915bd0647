"""A store in a directory, for ranks that share a file system (e.g. NFS).

Layout: one file per key, named ``k.`` + the key's UTF-8 bytes with every
byte outside ``[a-z0-9_-]`` written as ``%XX`` (so names differ even on a
file system that ignores case), or ``h.`` + SHA-256 of the key when that
name would be too long. A file holds ``!I`` key length, the key, the value.

- Writers write a temporary file and ``os.replace`` it onto the key's name:
  readers see the old value or the new one, never a torn one (rename is
  atomic on local file systems and on NFS).
- Every change (set, add, compare_set, delete, clear) holds ``lock`` with a
  POSIX record lock (``fcntl.lockf``: NFS forwards it to the server, and the
  kernel drops it if the process dies) plus a per-process thread lock (a
  record lock does not exclude threads of one process). Reads take no lock.
- A file system has no blocking "wait until this name exists", so waits
  poll with exponential backoff (1 ms doubling up to 50 ms). Each round
  opens the directory first, which makes an NFS client revalidate its
  cached view of the directory (close-to-open consistency).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import secrets
import socket
import struct
import threading
import time

from ..errors import RendezvousError, RendezvousTimeout
from .store import DEFAULT_TIMEOUT, Store, _check_timeout

__all__ = ["FileStore"]

LOCK_NAME = "lock"
_U32 = struct.Struct("!I")
_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")
_MAX_NAME = 240  # below the usual 255-byte name limit, with room for "k."

FIRST_NAP = 0.001
MAX_NAP = 0.05

# One thread lock per lock file (by device and inode), shared by every
# FileStore of this process on the same directory.
_thread_locks: dict[tuple[int, int], threading.Lock] = {}
_thread_locks_guard = threading.Lock()


def _file_name(key: str) -> str:
    raw = key.encode()
    name = "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw)
    if len(name) > _MAX_NAME:
        return "h." + hashlib.sha256(raw).hexdigest()
    return "k." + name


class FileStore(Store):
    """A store kept as files in ``path`` (created if missing).

    Every rank opens its own FileStore on the same directory. ``timeout``
    also bounds how long a change waits for the lock.
    """

    def __init__(self, path: str | os.PathLike, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(timeout=timeout)
        path = os.fspath(path)
        if not isinstance(path, str) or not path:
            raise ValueError(f"path must be a non-empty str, got {path!r}")
        self.path = os.path.abspath(path)
        self.url = "file://" + self.path
        try:
            os.makedirs(self.path, exist_ok=True)
            fd = os.open(os.path.join(self.path, LOCK_NAME),
                         os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise RendezvousError(f"cannot use {self.path!r} as a store: {e}") from e
        self._lock_fd = fd
        st = os.fstat(fd)
        with _thread_locks_guard:
            self._thread_lock = _thread_locks.setdefault((st.st_dev, st.st_ino),
                                                         threading.Lock())
        self._closed = False
        self._closed_event = threading.Event()  # cuts a waiter's nap short

    def __repr__(self) -> str:
        return f"FileStore({self.path!r})"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._closed_event.set()
        with self._thread_lock:  # not while a change of this process holds it
            os.close(self._lock_fd)

    # -- files ---------------------------------------------------------------

    def _file(self, key: str) -> str:
        return os.path.join(self.path, _file_name(key))

    def _read(self, key: str) -> bytes | None:
        """The value of ``key``, None if it does not exist."""
        try:
            with open(self._file(key), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise RendezvousError(f"cannot read key {key!r} in {self!r}: {e}") from e
        if len(data) < 4:
            raise RendezvousError(f"the file of key {key!r} in {self!r} is damaged")
        (n,) = _U32.unpack_from(data)
        if data[4 : 4 + n] != key.encode():  # a hashed name met another key
            raise RendezvousError(f"the file of key {key!r} in {self!r} holds another key")
        return data[4 + n :]

    def _write(self, key: str, value: bytes) -> None:
        raw = key.encode()
        tmp = os.path.join(self.path, f"tmp.{socket.gethostname()}.{os.getpid()}."
                                      f"{secrets.token_hex(8)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                with open(fd, "wb", closefd=False) as f:
                    f.write(_U32.pack(len(raw)) + raw + value)
            finally:
                os.close(fd)  # on NFS, close() flushes the data to the server
            os.replace(tmp, self._file(key))
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise RendezvousError(f"cannot write key {key!r} in {self!r}: {e}") from e

    def _remove(self, key: str) -> bool:
        try:
            os.unlink(self._file(key))
        except FileNotFoundError:
            return False
        except OSError as e:
            raise RendezvousError(f"cannot delete key {key!r} in {self!r}: {e}") from e
        return True

    def _locked(self) -> _Locked:
        if self._closed:
            raise RendezvousError(f"{self!r} is closed")
        return _Locked(self)

    def _revalidate(self) -> None:
        """Make an NFS client look at the directory again (close-to-open)."""
        try:
            os.close(os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        except OSError as e:
            raise RendezvousError(f"cannot open the store directory {self.path!r}: {e}") from e

    # -- operations ----------------------------------------------------------

    def _set(self, key: str, value: bytes) -> None:
        with self._locked():
            self._write(key, value)

    def _get(self, key: str, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        nap = FIRST_NAP
        while True:
            if self._closed:
                raise RendezvousError(f"{self!r} is closed")
            value = self._read(key)
            if value is not None:
                return value
            nap = self._nap(nap, deadline, timeout, f"key {key!r}")

    def _add(self, key: str, amount: int) -> int:
        with self._locked():
            try:
                current = self._read(key)
                value = int(b"0" if current is None else current) + amount
            except ValueError:
                raise ValueError(f"value of key {key!r} is not a decimal integer") from None
            self._write(key, str(value).encode())
            return value

    def _wait(self, keys: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        nap = FIRST_NAP
        pending = list(dict.fromkeys(keys))
        while True:
            if self._closed:
                raise RendezvousError(f"{self!r} is closed")
            pending = [k for k in pending if not os.path.exists(self._file(k))]
            if not pending:
                return
            nap = self._nap(nap, deadline, timeout, f"keys {keys!r}")

    def _check(self, keys: list[str]) -> bool:
        if self._closed:
            raise RendezvousError(f"{self!r} is closed")
        self._revalidate()
        return all(os.path.exists(self._file(k)) for k in keys)

    def _delete(self, key: str) -> bool:
        with self._locked():
            return self._remove(key)

    def _compare_set(self, key: str, expected: bytes | None,
                     desired: bytes) -> bytes | None:
        with self._locked():
            current = self._read(key)
            if current == expected:
                self._write(key, desired)
                current = desired
            return current

    def _clear(self, prefix: str) -> int:
        raw = prefix.encode()
        count = 0
        with self._locked():
            for name in os.listdir(self.path):
                if name.startswith("tmp.") and not prefix:
                    # a writer's leftover (it died between write and rename)
                    try:
                        os.unlink(os.path.join(self.path, name))
                    except OSError:
                        pass
                    continue
                if not name.startswith(("k.", "h.")):
                    continue
                try:
                    with open(os.path.join(self.path, name), "rb") as f:
                        head = f.read(4)
                        key = f.read(_U32.unpack(head)[0]) if len(head) == 4 else b""
                except (FileNotFoundError, struct.error):
                    continue
                if key.startswith(raw) and _file_name(key.decode("utf-8", "replace")) == name:
                    try:
                        os.unlink(os.path.join(self.path, name))
                        count += 1
                    except FileNotFoundError:
                        pass
        return count

    def _nap(self, nap: float, deadline: float, timeout: float, what: str) -> float:
        """Sleep before the next look (raising once the deadline has passed);
        return the next, longer nap."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RendezvousTimeout(
                f"timed out after {timeout:g} s waiting for {what} in {self!r}")
        self._closed_event.wait(min(nap, remaining))
        self._revalidate()
        return min(nap * 2, MAX_NAP)


class _Locked:
    """Context manager: hold the store's thread lock and its lock file."""

    __slots__ = ("store",)

    def __init__(self, store: FileStore) -> None:
        self.store = store

    def __enter__(self) -> None:
        store = self.store
        deadline = time.monotonic() + store.timeout
        if not store._thread_lock.acquire(timeout=store.timeout):
            raise RendezvousTimeout(f"timed out after {store.timeout:g} s waiting "
                                    f"for the lock of {store!r}")
        nap = FIRST_NAP
        try:
            if store._closed:
                raise RendezvousError(f"{store!r} is closed")
            while True:
                try:
                    fcntl.lockf(store._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return
                except OSError as e:
                    if e.errno not in (errno.EACCES, errno.EAGAIN):
                        raise RendezvousError(f"cannot lock {store!r}: {e}") from e
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RendezvousTimeout(f"timed out after {store.timeout:g} s "
                                            f"waiting for the lock of {store!r}")
                time.sleep(min(nap, remaining))
                nap = min(nap * 2, MAX_NAP)
        except BaseException:
            store._thread_lock.release()
            raise

    def __exit__(self, *exc_info: object) -> None:
        try:
            fcntl.lockf(self.store._lock_fd, fcntl.LOCK_UN)
        finally:
            self.store._thread_lock.release()
