"""Type stubs for gloocy.transport._tcp (Cython): the TCP transport."""

from typing_extensions import Self, disjoint_base

import socket

from gloocy.transport._stream import StreamPair


@disjoint_base
class TcpPair(StreamPair):
    """A Pair over one connected TCP socket (takes ownership of `fd`)."""

    def __new__(cls, fd: int, rank: int, peer: int,
                address: str = "") -> Self: ...


def tcp_pair(sock: socket.socket | int, rank: int, peer: int,
             address: str, *, dead_s: int = 0) -> TcpPair:
    """Hand a connected socket (or its fd) over to a TcpPair (which owns it
    then); with dead_s > 0, TCP keepalive finds a silent idle peer dead
    after dead_s s."""


# The set-up's non-blocking socket calls, keeping the GIL.
def connect_now(host: str, port: int) -> int: ...
def connect_error(fd: int) -> OSError | None: ...
def accept_now(fd: int) -> tuple[int, str] | None: ...
def recv_now(fd: int, n: int) -> bytes | None: ...
def send_now(fd: int, data: bytes) -> int: ...
def close_now(fd: int) -> None: ...
def random_now(n: int) -> bytes: ...
def watch_now(epfd: int, fd: int, on: bool) -> None: ...
def wait_fd(fd: int, out: bool, seconds: float) -> bool: ...
def gil_queue_ranks(change: int) -> int: ...


have_c_hmac: bool

def hmac_sha256_now(key: bytes, data: bytes) -> bytes | None:
    """HMAC-SHA-256 by libcrypto, keeping the GIL (the handshake's; equals
    hmac.digest(key, data, "sha256")); None where libcrypto is missing."""


class DialAuth:
    """The dialer's side of the handshake after its HELLO, without the GIL."""

    authentic: bool
    verdict: int

    def __new__(cls, fd: int, secret: bytes, hello: bytes, after: bytes = b"") -> Self: ...
    def run(self, seconds: float) -> int:
        """1 done, 0 not yet (after `seconds`), -1 the listener hung up."""
