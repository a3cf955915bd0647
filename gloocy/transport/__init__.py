"""Transports: how a rank reaches its peers.

`connect()` builds one Pair per peer. TCP is the only transport so far;
`GLOOCY_TRANSPORT` (tcp|auto) selects one explicitly.
"""

import os

from gloocy.errors import RendezvousError
from gloocy.rendezvous.address import listen_port_and_advertised
from gloocy.transport._tcp import TcpPair, connect_mesh

__all__ = ["connect", "connect_by_allgather", "TcpPair"]

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
    _check_membership(store, rank, size, job, timeout)

    def publish(address):
        store.set(f"{job}/tcp/{rank}", address.encode())

    def lookup(peer, timeout):
        return store.get(f"{job}/tcp/{peer}", timeout=timeout).decode()

    return connect_mesh(rank, size, secret, publish, lookup, host=host,
                        job=job, timeout=timeout, **_listen())


def _check_membership(store, rank, size, job, timeout):
    """Each rank is claimed once, and every rank has rank 0's world size."""
    if store.add(f"{job}/claim/{rank}", 1) != 1:
        raise RendezvousError(f"rank {rank}: another process already joined "
                              f"job {job!r} as rank {rank}")
    if rank == 0:
        store.set(f"{job}/size", str(size).encode())
        return
    theirs = int(store.get(f"{job}/size", timeout=timeout))
    if theirs != size:
        raise RendezvousError(f"rank {rank}: this process has a world of "
                              f"{size} but rank 0 has {theirs}")


def connect_by_allgather(allgather, rank, size, secret, *, host="127.0.0.1",
                         job="", timeout=300.0):
    """Like connect(), with the addresses exchanged by one collective
    `allgather(obj) -> list` of another library (e.g. mpi4py's)."""
    if size == 1:
        return [None]
    addresses = []

    def publish(address):
        addresses.extend(allgather(address))

    return connect_mesh(rank, size, secret, publish,
                        lambda peer, timeout: addresses[peer], host=host,
                        job=job, timeout=timeout, **_listen())


def _listen():
    port, advertise = listen_port_and_advertised()
    return dict(port=port, advertise=advertise)
