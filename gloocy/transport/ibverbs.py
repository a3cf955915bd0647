"""Set-up of the ibverbs (RDMA) transport between ranks (see _ibverbs.pyx).

Which device and port: GLOOCY_IB_HCA in NCCL's grammar (NCCL_IB_HCA): a
comma-separated list of device names, each optionally `:port`; names match
as prefixes (`mlx5` matches mlx5_0 and mlx5_1) unless the list starts with
`=` (exact names); a list starting with `^` excludes what it names. Unset:
every device, port 1. GLOOCY_IB_GID_INDEX picks the GID (needed on RoCE,
where addresses are GIDs; unset, as NCCL does: the port's RoCE v2 GID,
an IPv4-mapped one first, else index 0; LIDs on InfiniBand).

Over each authenticated TCP connection the two ranks first say whether they
can use ibverbs (`agree`); a pair then exchanges its queue pair's address
(QPN, PSN, LID, GID, MTU), moves its QP to RTR and RTS, and the two confirm
before either sends. The TCP connection stays open: the kernel closing it
tells a rank that its peer died even when it has nothing in flight to it.
"""

import os
import struct
import threading
import time
import weakref

from gloocy.errors import ProtocolError, RendezvousError
from gloocy.transport.handshake import recv_exact
from gloocy.transport.knobs import int_env

__all__ = ["probe", "require", "agree", "ib_pair", "parse_hca", "select_ports",
           "settings", "reg_cache_stats"]

_ADDR = struct.Struct("<8sIIH16sBII")
_ADDR_MAGIC = b"GLCYIBV1"
_CAN = struct.Struct("<8s?")
_CAN_MAGIC = b"GLCYIBOK"
LIBRARY = "libibverbs.so.1"        # GLOOCY_IB_LIBRARY: another path
DEFAULT_RDV = 32768
DEFAULT_SLOTS = 64
DEFAULT_SLOT_BYTES = 8192
DEFAULT_REG_CACHE = 256 << 20

_open = weakref.WeakValueDictionary()     # one open device per (name, port, gid)
# Pairs of one process are built on several threads at once: two that
# opened a device each would hold two protection domains, and a buffer
# registered in one could not be used by the other's queue pairs.
_open_lock = threading.Lock()


def parse_hca(text):
    """GLOOCY_IB_HCA -> (exclude, exact, [(name, port or None)])."""
    text = text.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    items = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, port = part.partition(":")
        if port and not port.isdigit():
            raise ValueError(f"GLOOCY_IB_HCA={os.environ.get('GLOOCY_IB_HCA')!r}: "
                             f"port {port!r} of {name!r} is not a number")
        items.append((name, int(port) if port else None))
    return exclude, exact, items


def select_ports(names, spec):
    """The (device, port) pairs GLOOCY_IB_HCA `spec` selects among the
    device `names`, in device order."""
    if not spec:
        return [(n, 1) for n in names]
    exclude, exact, items = parse_hca(spec)

    def hits(name, want):
        return name == want if exact else name.startswith(want)

    if exclude:
        return [(n, 1) for n in names
                if not any(hits(n, want) for want, _ in items)]
    return [(n, port or 1) for n in names for want, port in items if hits(n, want)]


def settings():
    """The pair's knobs, checked (ValueError naming the variable):
    GLOOCY_IB_SLOTS eager receive slots per peer, GLOOCY_IB_SLOT_BYTES each
    (the same on every rank), GLOOCY_IB_RDV_BYTES the smallest payload sent
    by rendezvous (RDMA read into the receive buffer) rather than copied.
    (GLOOCY_IB_REG_CACHE_BYTES: see reg_cache_bytes.)"""
    gid_index()
    reg_cache_bytes()
    qp_settings()
    parse_hca(os.environ.get("GLOOCY_IB_HCA", ""))
    return dict(slots=int_env("GLOOCY_IB_SLOTS", DEFAULT_SLOTS, 4),
                slot_bytes=int_env("GLOOCY_IB_SLOT_BYTES", DEFAULT_SLOT_BYTES, 256),
                rdv_min=int_env("GLOOCY_IB_RDV_BYTES", DEFAULT_RDV, 1))


def qp_settings():
    """The queue pair's retries, as NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT:
    GLOOCY_IB_TIMEOUT (0-31; a try waits 4.096 us * 2**timeout) and
    GLOOCY_IB_RETRY_CNT (0-7 tries) bound how long a send to a peer that
    stopped answering takes to fail (IBV_WC_RETRY_EXC_ERR: PeerLostError)."""
    out = {}
    for key, name, default, high in (("timeout", "GLOOCY_IB_TIMEOUT", 14, 31),
                                     ("retry_cnt", "GLOOCY_IB_RETRY_CNT", 7, 7)):
        out[key] = int_env(name, default, 0)
        if out[key] > high:
            raise ValueError(f"{name}={os.environ[name]!r}: must be at most {high}")
    return out


def reg_cache_bytes():
    """GLOOCY_IB_REG_CACHE_BYTES: how many bytes of user buffers stay
    registered between transfers (whole pages; 0: none, every rendezvous
    registers its buffer and deregisters it after)."""
    return int_env("GLOOCY_IB_REG_CACHE_BYTES", DEFAULT_REG_CACHE, 0)


def reg_cache_stats():
    """The registration caches' counters in this process, summed over the
    open devices: hits, misses, invalidations (an owner died or moved its
    memory), evictions (LRU, or to make room when the device refused a
    registration), refused (registrations the device refused: the transfer
    went by copies), entries and bytes kept now."""
    total = {}
    for dev in list(_open.values()):
        for k, v in dev.cache.counters().items():
            total[k] = total.get(k, 0) + v
    return total


def gid_index():
    return int_env("GLOOCY_IB_GID_INDEX", -1, -1)


SYSFS = "/sys/class/infiniband"


def roce_v2_gid(name, port, root=SYSFS):
    """The index of `name` port `port`'s RoCE v2 GID (routable over IP), an
    IPv4-mapped one (::ffff:a.b.c.d) before others, from the kernel's GID
    table in sysfs; None if it lists none (InfiniBand, or no sysfs)."""
    base = os.path.join(root, name, "ports", str(port))
    found = []
    try:
        indices = sorted(int(i) for i in os.listdir(os.path.join(base, "gid_attrs", "types"))
                         if i.isdigit())
    except OSError:
        return None
    for i in indices:
        try:
            with open(os.path.join(base, "gid_attrs", "types", str(i))) as f:
                kind = f.read().strip()
            with open(os.path.join(base, "gids", str(i))) as f:
                gid = f.read().strip().lower()
        except OSError:
            continue                   # an unused entry (the kernel says EINVAL)
        if kind.lower() != "roce v2" or not gid.strip("0:"):
            continue
        found.append((not gid.startswith("0000:0000:0000:0000:0000:ffff:"), i))
    return min(found)[1] if found else None


def probe():
    """(device, '') with the first usable device and port, or (None, why
    not): the library, a device, an active port."""
    spec = os.environ.get("GLOOCY_IB_HCA", "")
    gid = gid_index()
    try:
        from gloocy.transport import _ibverbs
        _ibverbs.load(os.environ.get("GLOOCY_IB_LIBRARY") or LIBRARY)
    except (ImportError, RuntimeError) as e:
        return None, f"libibverbs cannot be used: {e}"
    names = _ibverbs.device_names()
    if not names:
        return None, "no RDMA device (ibv_get_device_list found none)"
    chosen = select_ports(names, spec)
    if not chosen:
        return None, f"GLOOCY_IB_HCA={spec!r} selects none of the devices {names}"
    with _open_lock:
        return _open_first(chosen, gid)


def _open_first(chosen, gid):
    """The first of `chosen` (device name, port) that opens, as probe()."""
    from gloocy.transport import _ibverbs
    reasons = []
    for name, port in chosen:
        dev = _open.get((name, port, gid))
        if dev is not None:
            return dev, ""
        index = gid if gid >= 0 else roce_v2_gid(name, port)
        try:
            dev = _ibverbs.IbvDevice(name, port, -1 if index is None else index)
        except RuntimeError as e:
            reasons.append(str(e))
            continue
        dev.cache.limit = reg_cache_bytes()
        if dev.cache.limit:
            # the cache keeps registrations of buffers whose owner it knows
            from gloocy import _core
            _core.set_buffer_watch(_ibverbs.note_buffer,
                                   int_env("GLOOCY_IB_RDV_BYTES", DEFAULT_RDV, 1))
        _open[(name, port, gid)] = dev
        return dev, ""
    return None, "; ".join(reasons)


def require(rank):
    """The device GLOOCY_TRANSPORT=ibverbs needs; RendezvousError naming
    what is missing."""
    dev, why = probe()
    if dev is None:
        raise RendezvousError(f"rank {rank}: GLOOCY_TRANSPORT=ibverbs, but {why}")
    return dev


def agree(socks, rank, mode, deadline, dev):
    """The peers (of {peer: (socket, address)}) to reach over ibverbs:
    those where both ends have a usable device (all of them under
    GLOOCY_TRANSPORT=ibverbs, else RendezvousError)."""
    for sock, _ in socks.values():
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(_CAN.pack(_CAN_MAGIC, dev is not None))
    chosen = set()
    for peer, (sock, address) in sorted(socks.items()):
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        magic, theirs = _CAN.unpack(recv_exact(sock, _CAN.size, "ibverbs capability"))
        if magic != _CAN_MAGIC:
            raise ProtocolError(f"rank {rank}: rank {peer} ({address}) sent no "
                                "ibverbs capability")
        if theirs and dev is not None:
            chosen.add(peer)
        elif mode == "ibverbs":
            raise RendezvousError(f"rank {rank}: GLOOCY_TRANSPORT=ibverbs, but rank "
                                  f"{peer} ({address}) has no usable RDMA device")
    return chosen


def ib_pair(sock, rank, peer, address, dev, deadline, *, dead_s=0):
    """Turn the TCP connection to `peer` into an IbvPair (which keeps the
    connection to notice the peer's death)."""
    from gloocy.transport._ibverbs import IbvPair
    from gloocy.transport._tcp import _keepalive
    pair = IbvPair(dev, -1, rank, peer, address, **settings())
    try:
        qpn, psn, lid, gid, mtu, slots, slot_bytes = pair.local_address()
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(_ADDR.pack(_ADDR_MAGIC, qpn, psn, lid, gid, mtu, slots, slot_bytes))
        magic, rqpn, rpsn, rlid, rgid, rmtu, rslots, rslot_bytes = _ADDR.unpack(
            recv_exact(sock, _ADDR.size, "a queue pair address"))
        if magic != _ADDR_MAGIC:
            raise ProtocolError(f"rank {rank}: rank {peer} ({address}) sent no "
                                "queue pair address")
        if (rslots, rslot_bytes) != (slots, slot_bytes):
            raise ProtocolError(
                f"rank {rank}: rank {peer} ({address}) has GLOOCY_IB_SLOTS/"
                f"GLOOCY_IB_SLOT_BYTES {rslots}/{rslot_bytes}, this rank "
                f"{slots}/{slot_bytes}: they must be the same on every rank")
        pair.connect(rqpn, rpsn, rlid, rgid, rmtu, **qp_settings())
        # Both queue pairs are ready to receive before either sends.
        sock.sendall(b"R")
        if recv_exact(sock, 1, "the queue pair's readiness") != b"R":
            raise ProtocolError(f"rank {rank}: rank {peer} ({address}) did not "
                                "get its queue pair ready")
        if dead_s > 0:
            _keepalive(sock, dead_s)
        sock.setblocking(False)
        pair.watch(sock.detach())
        return pair
    except BaseException:
        pair.close(False)
        raise
    finally:
        sock.close()
