"""Transports: how a rank reaches its peers.

`connect()` authenticates one TCP connection per peer, then turns those to
peers on the same host into shared-memory pairs (`shm`). GLOOCY_TRANSPORT
chooses: `auto` (shared memory where the host is shared, else TCP), `tcp`,
or `shm` (every peer must be local).
"""

import os
import time

from gloocy.errors import RendezvousError
from gloocy.rendezvous.address import listen_port_and_advertised
from gloocy.transport._tcp import TcpPair, connect_sockets, tcp_pair

__all__ = ["connect", "connect_by_allgather", "TcpPair", "TRANSPORTS"]

TRANSPORTS = ("auto", "tcp", "shm")


def connect(store, rank, size, secret, *, host="127.0.0.1", job="",
            timeout=300.0, transport=None):
    """Connect `rank` to every other rank of the job; a list of pairs indexed
    by rank, None at `rank`."""
    mode = _mode(transport)
    if size == 1:
        return [None]
    deadline = time.monotonic() + timeout
    _check_membership(store, rank, size, job, timeout)

    def publish(address):
        store.set(f"{job}/tcp/{rank}", address.encode())

    def lookup(peer, timeout):
        return store.get(f"{job}/tcp/{peer}", timeout=timeout).decode()

    socks = connect_sockets(rank, size, secret, publish, lookup, host=host,
                            job=job, timeout=timeout, **_listen())
    return _pairs(socks, rank, size, mode, deadline)


def connect_by_allgather(allgather, rank, size, secret, *, host="127.0.0.1",
                         job="", timeout=300.0, transport=None):
    """Like connect(), with the addresses exchanged by one collective
    `allgather(obj) -> list` of another library (e.g. mpi4py's)."""
    mode = _mode(transport)
    if size == 1:
        return [None]
    deadline = time.monotonic() + timeout
    addresses = []

    def publish(address):
        addresses.extend(allgather(address))

    socks = connect_sockets(rank, size, secret, publish,
                            lambda peer, timeout: addresses[peer], host=host,
                            job=job, timeout=timeout, **_listen())
    return _pairs(socks, rank, size, mode, deadline)


def _mode(transport):
    name = transport or os.environ.get("GLOOCY_TRANSPORT", "auto")
    if name not in TRANSPORTS:
        raise ValueError(f"transport {name!r} is not one of {', '.join(TRANSPORTS)}")
    return name


def _listen():
    port, advertise = listen_port_and_advertised()
    return dict(port=port, advertise=advertise)


def _pairs(socks, rank, size, mode, deadline):
    """One pair per peer from the authenticated sockets: shared memory to
    the local peers (unless `mode` is tcp), TCP to the others."""
    from gloocy.transport import shm

    pairs = [None] * size
    try:
        local = shm.local_peers(socks, rank, mode, deadline)
        for peer in sorted(socks):
            sock, address = socks.pop(peer)
            pairs[peer] = (shm.shm_pair(sock, rank, peer, deadline) if peer in local
                           else tcp_pair(sock, rank, peer, address))
        return pairs
    except BaseException:
        for sock, _ in socks.values():
            sock.close()
        for pair in pairs:
            if pair is not None:
                pair.close(False)
        raise


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
