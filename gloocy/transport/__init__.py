"""Transports: how a rank reaches its peers.

`connect()` builds one Pair per peer. TCP is the only transport so far;
`GLOOCY_TRANSPORT` (tcp|auto) selects one explicitly.
"""

import os

from gloocy.transport._tcp import TcpPair, connect_mesh

__all__ = ["connect", "TcpPair"]

TRANSPORTS = ("auto", "tcp")


def connect(store, rank, size, secret, *, host="127.0.0.1", job="",
            timeout=300.0, transport=None):
    """Connect `rank` to every other rank of the job; a list of pairs indexed
    by rank, None at `rank`."""
    name = transport or os.environ.get("GLOOCY_TRANSPORT", "auto")
    if name not in TRANSPORTS:
        raise ValueError(f"transport {name!r} is not one of {', '.join(TRANSPORTS)}")
    if size == 1:
        return [None]
    return connect_mesh(store, rank, size, secret, host=host, job=job,
                        timeout=timeout)
