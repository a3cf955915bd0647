"""Rendezvous: how ranks find each other at start-up.

``connect(url, secret=...)`` opens a client to the store named by ``url``.
Schemes map to factories in ``SCHEMES``; "tcp" is built in (the store that
``gloocy-run`` embeds); redis://, file:// and hash:// can be added there.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import SplitResult, urlsplit

from .store import DEFAULT_TIMEOUT, Store
from .tcp_store import TCPStore, TCPStoreServer

__all__ = ["Store", "TCPStore", "TCPStoreServer", "connect", "SCHEMES"]


def _connect_tcp(url: SplitResult, secret: bytes, timeout: float) -> Store:
    try:
        host, port = url.hostname, url.port  # .port raises on a bad number
    except ValueError as e:
        raise ValueError(f"bad store url {url.geturl()!r}: {e}") from None
    if not host or port is None:
        raise ValueError(f"store url {url.geturl()!r} needs a host and a port, "
                         f"e.g. tcp://127.0.0.1:29500 or tcp://[::1]:29500")
    return TCPStore(host, port, secret=secret, timeout=timeout)


# scheme -> factory(parsed url, secret, timeout) -> Store
SCHEMES: dict[str, Callable[[SplitResult, bytes, float], Store]] = {
    "tcp": _connect_tcp,
}


def connect(url: str, *, secret: bytes, timeout: float = DEFAULT_TIMEOUT) -> Store:
    """Open a client of the store at ``url`` (e.g. "tcp://127.0.0.1:29500")."""
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__name__}")
    parsed = urlsplit(url)
    factory = SCHEMES.get(parsed.scheme.lower())
    if factory is None:
        raise ValueError(f"unknown store url {url!r}: scheme must be one of "
                         f"{', '.join(s + '://' for s in sorted(SCHEMES))}")
    return factory(parsed, secret, timeout)
