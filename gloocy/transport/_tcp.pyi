"""Type stubs for gloocy.transport._tcp (Cython): the TCP transport."""

from typing_extensions import Self, disjoint_base

from collections.abc import Callable

from gloocy._core import Pair


@disjoint_base
class TcpPair(Pair):
    """A Pair over one connected TCP socket (takes ownership of `fd`)."""

    @property
    def address(self) -> str: ...        # the peer's host:port, for messages
    def __new__(cls, fd: int, rank: int, peer: int,
                address: str = "") -> Self: ...


def connect_mesh(rank: int, size: int, secret: bytes,
                 publish: Callable[[str], object],
                 lookup: Callable[[int, float], str], *,
                 host: str = "127.0.0.1", job: str = "",
                 timeout: float = 300.0) -> list[TcpPair | None]:
    """Connect this rank to every other one; a list of TcpPair indexed by
    rank (None at `rank`). publish(address) makes ours known, lookup(peer,
    timeout) returns a peer's "host:port"."""
