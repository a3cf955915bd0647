"""Type stubs for gloocy.transport._shm (Cython): the shared-memory transport."""

from typing_extensions import Self, disjoint_base

from gloocy.transport._stream import StreamPair


def segment_bytes(ring: int) -> int:
    """Size of the segment of two rings of `ring` bytes each."""


@disjoint_base
class ShmPair(StreamPair):
    """A Pair over two rings in a memfd segment and a Unix socket for
    wake-ups (see the module's docstring)."""

    woke_on_word: int
    """Wake-ups given to the peer on its futex so far."""
    woke_by_socket: int
    """Wake-ups given to the peer through the socket so far."""
    @property
    def in_process(self) -> bool:
        """Whether both ends are rank threads of this process (no socket)."""

    def allow_single_copy(self, peer_pid: int, min_bytes: int, willing: bool,
                          split_min: int = 0) -> None:
        """Copy point-to-point messages from `min_bytes` once with the
        peer's process `peer_pid` (receives from `split_min` half each)."""

    @property
    def single_copies(self) -> tuple[int, int, bool, int]:
        """(sends the peer read once, messages read once from it, whether
        sends still go so, the errno that stopped our reads or 0)."""

    @property
    def split_copies(self) -> tuple[int, int, bool]:
        """(receives the peer wrote half of, split receives whose half we
        read after all, whether we still write the peer's halves)."""

    def __new__(cls, sock_fd: int, mem_fd: int, ring: int, rank: int,
                peer: int, first: bool, address: str = "shared memory") -> Self: ...


class Waker:
    """A rank's eventfd for its in-process pairs' wake-ups (made on need)."""

    @property
    def fileno(self) -> int: ...


def inproc_pair(ring: int, rank: int, peer: int, ours: Waker,
                theirs: Waker) -> tuple[ShmPair, ShmPair]:
    """Both ends of a pair between two rank threads of this process."""
