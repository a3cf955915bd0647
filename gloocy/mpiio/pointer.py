"""The shared file pointer of an MPI-IO file (gloocy.mpiio): one position,
in etypes, that every process of the file's group moves.

A file opened by one process keeps it in memory. A file opened by several
keeps it in a small side file (8 bytes, little-endian) that each process
opens when it first uses the pointer and changes under an exclusive
``lockf`` lock (and a thread lock: POSIX locks belong to the process). The
side file holds a value only once a process moved the pointer; until then
the pointer is the value the group agreed on in the last collective call
that set it (Open, Set_view, Seek_shared), which every process knows.
"""

import fcntl
import os
import struct
import threading

from gloocy.errors import ERR_IO, GloocyError

__all__ = ["LocalPointer", "SidePointer", "side_path"]

_VALUE = struct.Struct("<q")


class LocalPointer:
    """The shared pointer of a file opened by one process."""

    def __init__(self, value=0):
        self._value = value
        self._lock = threading.Lock()

    def get(self):
        return self._value

    def fetch_add(self, n):
        """The position before moving it by `n` etypes."""
        with self._lock:
            old = self._value
            self._value = old + n
            return old

    def reset(self, value, leader):
        self._value = value

    def remove(self):
        pass


def side_path(path, token):
    """The side file of data file `path`: next to it if its folder is
    writable, else in the temporary folder (one host only then)."""
    import tempfile
    folder, name = os.path.split(os.path.abspath(path))
    if not os.access(folder, os.W_OK):
        folder = tempfile.gettempdir()
    return os.path.join(folder, f".{name}.gloocy-shfp-{token}")


class SidePointer:
    """The shared pointer of a file opened by several processes."""

    def __init__(self, path, value=0):
        self.path = path
        self._agreed = value          # the value while the side file is empty
        self._fd = -1
        self._lock = threading.Lock()

    def _open(self):
        if self._fd < 0:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                                   0o600)
            except OSError as e:
                raise GloocyError(f"shared file pointer: cannot open {self.path}: "
                                  f"{e.strerror}", ERR_IO) from e
        return self._fd

    def _update(self, change):
        """Run change(old) -> new under the locks; the old value."""
        with self._lock:
            fd = self._open()
            fcntl.lockf(fd, fcntl.LOCK_EX)
            try:
                raw = os.pread(fd, _VALUE.size, 0)
                old = _VALUE.unpack(raw)[0] if len(raw) == _VALUE.size else self._agreed
                new = change(old)
                if new != old:
                    os.pwrite(fd, _VALUE.pack(new), 0)
                return old
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)

    def get(self):
        return self._update(lambda old: old)

    def fetch_add(self, n):
        return self._update(lambda old: old + n)

    def reset(self, value, leader):
        """Collective: the pointer is `value`. The leader (first, once
        every earlier access is done) empties the side file; the others
        follow once told the value."""
        self._agreed = value
        if leader and (self._fd >= 0 or os.path.exists(self.path)):
            with self._lock:
                fd = self._open()
                fcntl.lockf(fd, fcntl.LOCK_EX)
                try:
                    os.ftruncate(fd, 0)
                finally:
                    fcntl.lockf(fd, fcntl.LOCK_UN)

    def remove(self):
        """Close the side file; the caller unlinks it once (remove_file)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def remove_file(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
