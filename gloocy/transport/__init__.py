"""Transports: how a rank reaches its peers.

`connect()` authenticates one TCP connection per peer, then turns those to
peers on the same host into shared-memory pairs (`shm`), and those to other
hosts into RDMA pairs (`ibverbs`) where both ends have a usable device.
Pairs are connected on first use (`connect_lazy`, see lazy.py) unless
GLOOCY_CONNECT=eager asks for every connection at start-up (`connect`).
GLOOCY_TRANSPORT chooses: `auto` (shared memory where the host is shared,
else ibverbs if both ends can, else TCP), `tcp`, `shm` (every peer must be
local) or `ibverbs` (every peer over RDMA, local ones too). GLOOCY_TCP_DEAD_S bounds how long
an idle TCP connection to a vanished host goes unnoticed (see _dead_after).
"""

import os
import time
from typing import NamedTuple

from gloocy._core import UNCONNECTED, new_node_segment
from gloocy.errors import RendezvousError, RendezvousTimeout
from gloocy.rendezvous.address import listen_port_and_advertised
from gloocy.rendezvous.shared_wait import get_once, one_at_a_time
from gloocy.rendezvous.store import capped
from gloocy.transport import ibverbs, shm, startup
from gloocy.transport.startup import CANNOT_START, cannot_start
from gloocy.transport._tcp import TcpPair, tcp_pair
from gloocy.transport.handshake import connect_sockets

__all__ = ["connect", "connect_by_allgather", "connect_lazy", "connect_mode",
           "Mesh", "TcpPair", "TRANSPORTS"]

TRANSPORTS = ("auto", "tcp", "shm", "ibverbs")
CONNECT_MODES = ("lazy", "eager")


def connect_mode():
    """GLOOCY_CONNECT: `lazy` (default: a pair is connected when first
    used) or `eager` (every pair at start-up)."""
    name = os.environ.get("GLOOCY_CONNECT", "") or "lazy"
    if name not in CONNECT_MODES:
        raise ValueError(f"GLOOCY_CONNECT={name!r} is not one of "
                         f"{', '.join(CONNECT_MODES)}")
    return name


def connect_lazy(store, rank, size, secret, *, host="127.0.0.1", job="",
                 timeout=300.0, transport=None, hosts_store=False):
    """Join the job without connecting: (a Mesh of UNCONNECTED and the node
    segment's fd, if any; the Connector that connects them on first use,
    which needs `store` until it is closed). `hosts_store`: this rank
    serves the store (it then leaves last)."""
    mode, dead_s = _settings(transport, rank)
    with one_at_a_time(store):        # (the rank threads of a process)
        _claim(store, rank, size, job, "lazy")
    _check_size(store, rank, size, job, timeout, "lazy")
    connector, node = startup.start(store, rank, size, secret, host=host, job=job,
                                 timeout=timeout, mode=mode, dead_s=dead_s,
                                 hosts_store=hosts_store, **_listen())
    pairs = [UNCONNECTED] * size      # (one stand-in: no object per peer)
    pairs[rank] = None
    return Mesh(pairs, node), connector


def connect(store, rank, size, secret, *, host="127.0.0.1", job="",
            timeout=300.0, transport=None):
    """Connect `rank` to every other rank of the job: a Mesh of pairs
    indexed by rank (None at `rank`) and the node segment's fd, if any (the
    caller closes it)."""
    mode, dead_s = _settings(transport, rank)
    if size == 1:
        return Mesh([None], None)
    deadline = time.monotonic() + timeout
    _check_membership(store, rank, size, job, timeout, "eager")

    def publish(address):
        store.set(f"{job}/tcp/{rank}", address.encode())

    def lookup(peer, timeout):
        got = store.get(f"{job}/tcp/{peer}", timeout=timeout)
        if got.startswith(CANNOT_START):
            raise cannot_start(rank, got)
        return got.decode()

    def failed():                 # (a rank that cannot join said why)
        key = f"{job}/cannot_start"
        try:
            return cannot_start(rank, store.get(key)) if store.check([key]) else None
        except (RendezvousError, OSError):
            return None           # (the wait's own error will tell)

    socks = connect_sockets(rank, size, secret, publish, lookup, host=host,
                            job=job, timeout=timeout, failed=failed, **_listen())
    return _pairs(socks, rank, size, mode, dead_s, deadline)


def connect_by_allgather(allgather, rank, size, secret, *, host="127.0.0.1",
                         job="", timeout=300.0, transport=None):
    """Like connect(), with the addresses exchanged by one collective
    `allgather(obj) -> list` of another library (e.g. mpi4py's)."""
    mode, dead_s = _settings(transport, rank)
    if size == 1:
        return Mesh([None], None)
    deadline = time.monotonic() + timeout
    addresses = []

    def publish(address):
        addresses.extend(allgather(address))

    socks = connect_sockets(rank, size, secret, publish,
                            lambda peer, timeout: addresses[peer], host=host,
                            job=job, timeout=timeout, **_listen())
    return _pairs(socks, rank, size, mode, dead_s, deadline)


def _settings(transport, rank):
    """The transport and its knobs, checked on every rank before any
    connection: a bad value is the same clear error on every rank."""
    mode = _mode(transport)
    if mode in ("auto", "ibverbs"):
        ibverbs.settings()
    if mode == "ibverbs":
        ibverbs.require(rank)
    if mode != "tcp":
        shm.chunk_bytes()
        shm.ring_bytes()
    return mode, _dead_after()


def _mode(transport):
    name = transport or os.environ.get("GLOOCY_TRANSPORT", "auto")
    if name not in TRANSPORTS:
        raise ValueError(f"transport {name!r} is not one of {', '.join(TRANSPORTS)}")
    return name


def _dead_after():
    """GLOOCY_TCP_DEAD_S (default 30, 0 = off): a peer host from which
    nothing (data, acknowledgement or keepalive reply) has come for that
    many seconds while we had nothing in flight to it is lost; the next
    call raises PeerLostError naming it. Catches hosts that vanish without
    closing their connections (a cut link, a power loss) between calls;
    within a call the call's deadline does it."""
    text = os.environ.get("GLOOCY_TCP_DEAD_S", "")
    try:
        seconds = int(text) if text else 30
    except ValueError:
        seconds = -1
    if seconds != 0 and not 2 <= seconds <= 86400:
        raise ValueError(f"GLOOCY_TCP_DEAD_S={text!r}: must be a whole number "
                         "of seconds from 2 to 86400, or 0 (off)")
    return seconds


def _listen():
    port, advertise = listen_port_and_advertised()
    return dict(port=port, advertise=advertise)


class Mesh(NamedTuple):
    pairs: list          # a Pair per rank, None at ours
    node: int | None     # fd of the node segment (all ranks on one host), or None


def _pairs(socks, rank, size, mode, dead_s, deadline):
    """One pair per peer from the authenticated sockets: shared memory to
    the local peers (unless `mode` is tcp), TCP (with keepalive after
    `dead_s`) to the others. When every
    rank is local, rank 0 also hands out a node segment for the direct
    shared-memory collectives."""
    pairs, node = [None] * size, None
    try:
        # GLOOCY_TRANSPORT=ibverbs: no shared memory, every peer over RDMA
        local = shm.local_peers(socks, rank, "tcp" if mode == "ibverbs" else mode,
                                deadline)
        rdma = _rdma_peers(socks, local, rank, mode, deadline)
        shm.note_local_ranks(len(local) + 1)
        if rank == 0 and len(local) == size - 1:
            node = new_node_segment(size, shm.chunk_bytes(size))
        for peer in sorted(socks):
            sock, address = socks.pop(peer)
            if peer in local:
                pairs[peer], got = shm.shm_pair(sock, rank, peer, deadline,
                                                node=node if rank == 0 else None,
                                                ring=shm.ring_bytes(len(local) + 1))
                if got is not None and rank != 0:
                    node = got
            elif peer in rdma:
                pairs[peer] = ibverbs.ib_pair(sock, rank, peer, address, rdma[peer],
                                              deadline, dead_s=dead_s)
            else:
                pairs[peer] = tcp_pair(sock, rank, peer, address, dead_s=dead_s)
        return Mesh(pairs, node)
    except BaseException:
        for sock, _ in socks.values():
            sock.close()
        for pair in pairs:
            if pair is not None:
                pair.close(False)
        if node is not None:
            os.close(node)
        raise


def _rdma_peers(socks, local, rank, mode, deadline):
    """{peer: device} of the remote peers to reach over ibverbs (none under
    GLOOCY_TRANSPORT tcp or shm; a device is looked for only when some peer
    is on another host)."""
    remote = {p: s for p, s in socks.items() if p not in local}
    if mode not in ("auto", "ibverbs") or not remote:
        return {}
    dev = ibverbs.require(rank) if mode == "ibverbs" else ibverbs.probe()[0]
    return {p: dev for p in ibverbs.agree(remote, rank, mode, deadline, dev)}


def _check_membership(store, rank, size, job, timeout, how):
    """Each rank is claimed once, and every rank has rank 0's world size
    and way of connecting (`how`: GLOOCY_CONNECT)."""
    _claim(store, rank, size, job, how)
    _check_size(store, rank, size, job, timeout, how)


def _claim(store, rank, size, job, how):
    """Claim `rank` (once only); rank 0 says the world's size and `how`."""
    if store.add(f"{job}/claim/{rank}", 1) != 1:
        raise RendezvousError(f"rank {rank}: another process already joined "
                              f"job {job!r} as rank {rank}")
    if rank == 0:
        store.set(f"{job}/size", f"{size} {how}".encode())


def _check_size(store, rank, size, job, timeout, how):
    """Another rank: whether rank 0's size and `how` are ours (if not, the
    others are told: see _tell_cannot_start)."""
    if rank == 0:
        return
    # (the rank threads of one process: one asks, the others are told)
    key, deadline = f"{job}/size", time.monotonic() + timeout
    try:
        got, pass_on = get_once(store, key, lambda: store.get(
            key, timeout=max(deadline - time.monotonic(), 0.001)), deadline)
    except RendezvousTimeout:
        raise RendezvousTimeout(f"rank {rank}: rank 0 did not say the world's "
                                f"size within {timeout:g} s") from None
    pass_on()
    theirs, _, their_how = got.decode().partition(" ")
    if int(theirs) != size:
        why = f"a world of {size} but rank 0 has {theirs}"
    elif their_how != how:
        why = f"GLOOCY_CONNECT={how} but rank 0 has {their_how}"
    else:
        return
    if rank < int(theirs):        # (else not a rank of the job: it goes on)
        _tell_cannot_start(store, rank, job, f"rank {rank} has {why}")
    raise RendezvousError(f"rank {rank}: this process has {why}")


def _tell_cannot_start(store, rank, job, why):
    """Rank `rank` cannot join the job (its size or GLOOCY_CONNECT is not
    rank 0's): say `why` in the keys the others wait for at start-up, so
    that they raise it now rather than at their deadline. Lazy: rank 0's
    wait for all to join, the others' for rank 0's go (startup.start); eager:
    the dials to us, and the waits for dials (connect's `failed`). Keys set
    already are left alone (a job started without us goes on). Best effort,
    within a second."""
    value = CANNOT_START + why.encode()
    try:
        with capped(time.monotonic() + 1.0):
            for key in ("cannot_start", "all", "go", f"tcp/{rank}"):
                store.compare_set(f"{job}/{key}", None, value)
    except (RendezvousError, OSError, TimeoutError):
        pass
