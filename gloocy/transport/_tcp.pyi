"""Type stubs for gloocy.transport._tcp (Cython): the TCP transport."""

from typing_extensions import Self, disjoint_base

import socket
from collections.abc import Callable

from gloocy.transport._stream import StreamPair


@disjoint_base
class TcpPair(StreamPair):
    """A Pair over one connected TCP socket (takes ownership of `fd`)."""

    def __new__(cls, fd: int, rank: int, peer: int,
                address: str = "") -> Self: ...


def recv_exact(sock: socket.socket, n: int, what: str = "the handshake") -> bytes:
    """Exactly n bytes from a blocking socket; ProtocolError if it closes."""


def tcp_pair(sock: socket.socket, rank: int, peer: int,
             address: str, *, dead_s: int = 0) -> TcpPair:
    """Hand a connected socket over to a TcpPair (which owns it then); with
    dead_s > 0, TCP keepalive finds a silent idle peer dead after dead_s s."""


def connect_sockets(rank: int, size: int, secret: bytes,
                    publish: Callable[[str], object],
                    lookup: Callable[[int, float], str], *,
                    host: str = "127.0.0.1", port: int = 0,
                    advertise: str | None = None, job: str = "",
                    timeout: float = 300.0) -> dict[int, tuple[socket.socket, str]]:
    """Connect this rank to every other one: {peer: (authenticated blocking
    socket, "host:port")}. We listen on host:port and publish(address)
    makes ours (or `advertise`) known; lookup(peer, timeout) returns a
    peer's."""
