"""Set-up of the shared-memory transport between ranks of one host.

Over each authenticated TCP connection the two ranks first tell each other
their host identity (`host_identity()`). Where it is the same, the lower
rank listens on an abstract Unix socket (no file, gone with the process)
whose random name it sends over TCP; the higher rank connects and proves it
knows the name; the lower rank makes a memfd segment and passes it over
that socket. The TCP connection is then closed, and the Unix socket stays
for wake-ups (see _shm.pyx). Nothing is ever created in /dev/shm.
"""

import contextlib
import errno
import hmac
import os
import secrets
import select
import socket
import struct
import threading
import time

from gloocy.errors import ProtocolError, RendezvousError
from gloocy.transport._shm import ShmPair, segment_bytes
from gloocy.transport.handshake import out_of_fds, peer_out_of_fds, recv_exact
from gloocy.transport.knobs import int_env
from gloocy.waiting import usable_cpus

__all__ = ["host_identity", "id_frame", "id_length", "is_local", "local_peers",
           "shm_pair", "ring_bytes", "chunk_bytes"]

_ID = struct.Struct("<8s?H")
_ID_MAGIC = b"GLCYHOST"
_RING = struct.Struct("<Q?")          # ring bytes, and whether it is a full one
DEFAULT_RING = 1 << 18        # small rings stay in cache (measured: bench/README.md)
# Rings between many local ranks. With L local ranks and every pair used
# there are L(L-1) rings (two per pair), L - 1 per rank: at 256 KiB each,
# 4 GiB at 128 ranks. So a ring is cut to the largest power of two within
# RING_BUDGET / (L - 1) from L = 18 on (64 KiB at 64 local ranks, 32 KiB at
# 128), except in a rank's first FULL_PAIRS pairs (where both ranks still
# have one to spend: the neighbours a ring or halo exchange uses keep their
# speed). A point-to-point message goes through the ring, so a smaller one
# costs large messages: at N = 2 a 1 MiB ping-pong took 1.4-9x as long over
# 32-64 KiB rings, on a loaded machine (bench/results/large/). Per rank at
# most FULL_PAIRS x 512 KiB + 2 x RING_BUDGET of mappings; the host holds
# half the sum (each pair's rings are mapped by both): <= 6 MiB x L.
RING_BUDGET = 4 << 20
MIN_RING = 4096
FULL_PAIRS = 8
_WHY_MAX = 512                       # an offer's error, sent in its place (ring 0)
# The offerer's first byte on the TCP connection: its token follows, or why
# it cannot offer (and, after the token, why the rings will not come).
_OFFERED, _CANNOT = b"\x01", b"\x00"
_FULL = struct.Struct("<?")          # the higher rank: it can take a full ring
_full_taken = 0                      # this process's pairs given full rings
_full_lock = threading.Lock()
DEFAULT_CHUNK = 1 << 18       # 2 parities x N slots stay in cache
# Where local ranks outnumber CPUs, each step of a node collective waits for
# every rank, and such a wait may cost a switch (a rank asleep, or queued
# behind another on its CPU): fewer, larger steps then pay more than slots
# that stay in cache. In one job alternating the two, at N = 4 on the
# project's 2-CPU machine loaded by other jobs, 1 MiB slots made 26 of 32
# points (allreduce, alltoall, allgather, reduce_scatter; 1-64 MiB) faster
# than 256 KiB ones, most by 1.3-3x (bench/cma_threshold.py --compare
# chunk; bench/results/n4-large/). The segment's slots stay within
# SHARED_CPU_SEGMENT (2 parities x N slots): 1 MiB up to 8 ranks, 256 KiB
# from 32.
SHARED_CPU_CHUNK = 1 << 20
SHARED_CPU_SEGMENT = 16 << 20
# Point-to-point messages from this many bytes copy once between local
# processes (process_vm_readv; see _shm.pyx): GLOOCY_CMA_P2P_MIN_BYTES;
# receives from P2P_SPLIT_MIN are copied half by each process
# (GLOOCY_CMA_P2P_SPLIT_MIN_BYTES; 0: never), where there are CPUs for two.
P2P_SINGLE_MIN = 64 << 10
P2P_SPLIT_MIN = 128 << 10
_PEERCRED = struct.Struct("3i")      # struct ucred: pid, uid, gid


def host_identity():
    """Who shares memory with whom: host name, boot id and network
    namespace (namespaces standing in for hosts count as hosts).
    GLOOCY_HOST_ID overrides it (ranks with equal ids must share a host).
    Read once per process (a file and a link: every rank thread of a
    process would read the same); a forked child reads its own."""
    forced = os.environ.get("GLOOCY_HOST_ID")
    if forced:
        return forced
    global _host_read
    pid, got = _host_read
    if pid != os.getpid():
        _host_read = pid, got = os.getpid(), _read_host_identity()
    return got


_host_read = (None, None)     # (the pid that read it, what it read)


def _read_host_identity():
    """host_identity() read afresh (GLOOCY_HOST_ID aside)."""
    parts = [socket.gethostname()]
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            parts.append(f.read().strip())
        parts.append(os.readlink("/proc/self/ns/net"))
    except OSError:
        pass
    return "/".join(parts)


def chunk_bytes(local_ranks=2):
    """One rank's slot in the node segment of `local_ranks` ranks:
    GLOOCY_SHM_CHUNK_BYTES if set (a multiple of 64, at least 4096); else
    DEFAULT_CHUNK where every rank has a CPU, and where they outnumber the
    CPUs the largest power of two within SHARED_CPU_SEGMENT / (2 x
    local_ranks), from DEFAULT_CHUNK to SHARED_CPU_CHUNK."""
    text = os.environ.get("GLOOCY_SHM_CHUNK_BYTES", "")
    if text == "":
        if local_ranks <= usable_cpus():
            return DEFAULT_CHUNK
        share = SHARED_CPU_SEGMENT // (2 * local_ranks)
        return max(DEFAULT_CHUNK, min(SHARED_CPU_CHUNK, 1 << (share.bit_length() - 1)))
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 4096 or n % 64:
        raise ValueError(f"GLOOCY_SHM_CHUNK_BYTES={text!r}: must be a multiple "
                         "of 64 and at least 4096")
    return n


def p2p_single_min():
    """GLOOCY_CMA_P2P_MIN_BYTES (default P2P_SINGLE_MIN): from how many
    bytes a point-to-point message between local processes copies once."""
    return int_env("GLOOCY_CMA_P2P_MIN_BYTES", P2P_SINGLE_MIN, 1)


_local_ranks = 0          # ranks of the job on this host, as the set-up learnt


def note_local_ranks(n):
    """The set-up learnt that `n` ranks of the job share this host."""
    global _local_ranks
    _local_ranks = n


def p2p_split_min():
    """GLOOCY_CMA_P2P_SPLIT_MIN_BYTES (default P2P_SPLIT_MIN where every
    local rank has a CPU, else 0: with 8 ranks on 2 CPUs both halves of a
    pair's copies waited for CPUs, 1.15-1.6x slower than one reader,
    bench/results/p2p-single-copy-2026-12-05.md): from how many bytes a
    single-copy receive is copied half by each process (0: never)."""
    cpus = usable_cpus()
    return int_env("GLOOCY_CMA_P2P_SPLIT_MIN_BYTES",
                   P2P_SPLIT_MIN if cpus >= 2 and _local_ranks <= cpus else 0, 0)


def _peer_pid(conn):
    """The process at the other end of the Unix socket `conn`, as the
    kernel recorded it at connect (0 where it cannot say)."""
    try:
        pid, _, _ = _PEERCRED.unpack(conn.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    except OSError:
        return 0
    return pid if pid != os.getpid() else 0


def _ring_forced():
    return bool(os.environ.get("GLOOCY_SHM_RING_BYTES", ""))


def ring_bytes(local_ranks=2):
    """Bytes of each direction's ring between two of `local_ranks` ranks on
    this host: GLOOCY_SHM_RING_BYTES rounded up to a power of two (>= 4 KiB)
    if set, else DEFAULT_RING cut to the largest power of two within
    RING_BUDGET / (local_ranks - 1) (>= 4 KiB). (A rank's first FULL_PAIRS
    pairs get DEFAULT_RING all the same unless the variable is set: see
    shm_pair.)"""
    text = os.environ.get("GLOOCY_SHM_RING_BYTES", "")
    if not _ring_forced():
        share = max(RING_BUDGET // max(local_ranks - 1, 1), MIN_RING)
        return max(MIN_RING, min(DEFAULT_RING, 1 << (share.bit_length() - 1)))
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"GLOOCY_SHM_RING_BYTES={text!r} is not an integer") from None
    return max(MIN_RING, 1 << (max(n, 1) - 1).bit_length())


def id_frame(mode, me=None):
    """What we tell a peer about our host: its identity (`me`, default
    host_identity()) and whether we take shared memory under
    GLOOCY_TRANSPORT `mode`."""
    me = (me or host_identity()).encode()
    return _ID.pack(_ID_MAGIC, mode != "tcp", len(me)) + me


ID_HEADER_BYTES = _ID.size


def id_length(header, rank, peer, address):
    """(whether the peer takes shared memory, the length of its host id)
    from the header of its id frame."""
    magic, willing, n = _ID.unpack(header)
    if magic != _ID_MAGIC:
        raise ProtocolError(f"rank {rank}: rank {peer} ({address}) sent "
                            "no host identity")
    return willing, n


def is_local(ours, theirs, theirs_willing, mode, rank, peer, address):
    """Whether to reach `peer` through shared memory, from our id frame and
    the peer's host id and willingness (RendezvousError where `mode` is
    shm and we cannot)."""
    magic, willing, n = _ID.unpack_from(ours)
    if theirs == ours[_ID.size:] and willing and theirs_willing:
        return True
    if mode == "shm":
        why = ("is on another host" if theirs != ours[_ID.size:]
               else "refuses shared memory (its GLOOCY_TRANSPORT is tcp)")
        raise RendezvousError(f"rank {rank}: GLOOCY_TRANSPORT=shm, but rank "
                              f"{peer} ({address}) {why}")
    return False


def local_peers(socks, rank, mode, deadline, ours=None):
    """The peers (of {peer: (socket, address)}) to reach through shared
    memory under GLOOCY_TRANSPORT `mode` (auto, tcp or shm); `ours`: our
    id frame, if made already."""
    ours = ours or id_frame(mode)
    for sock, _ in socks.values():
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(ours)
    local = set()
    for peer, (sock, address) in sorted(socks.items()):
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        willing, n = id_length(recv_exact(sock, _ID.size, "a host id"), rank, peer,
                               address)
        theirs = recv_exact(sock, n, "a host id")
        if is_local(ours, theirs, willing, mode, rank, peer, address):
            local.add(peer)
    return local


def shm_pair(sock, rank, peer, deadline, *, node=None, ring=None):
    """Turn the TCP connection `sock` to a local peer into a ShmPair (the
    TCP connection is closed); (pair, node segment fd or None). The lower
    rank hands `node` (a node segment's fd, see _node.pxi) over too, and
    makes rings of `ring` bytes (default: ring_bytes()), or of DEFAULT_RING
    where both ranks still have one of their FULL_PAIRS to spend."""
    try:
        if rank < peer:
            conn, memfd, ring = _offer(sock, peer, deadline, ring or ring_bytes(), node)
        else:
            conn, memfd, ring, node = _take(sock, peer, deadline)
        try:
            conn.setblocking(False)
            pid = _peer_pid(conn)
            pair = ShmPair(conn.detach(), memfd, ring, rank, peer, rank < peer)
            pair.allow_single_copy(pid, p2p_single_min(),
                                   os.environ.get("GLOOCY_CMA", "1") != "0",
                                   p2p_split_min())
            return pair, node
        finally:
            conn.close()
            os.close(memfd)
    except (OSError, ValueError, ProtocolError) as e:
        no_fds = getattr(e, "errno", None) in (errno.EMFILE, errno.ENFILE)
        why = (peer_out_of_fds(rank, e.errno) if no_fds else f"rank {rank}: {e}")
        # The peer may wait for us (the offerer for the taker to come, the
        # taker for the rings): tell it why.
        _tell_peer(sock, why.encode() if rank > peer else _CANNOT + why.encode())
        raise RendezvousError(f"rank {rank}: cannot set up shared memory with "
                              f"rank {peer}: {out_of_fds(e) if no_fds else e}") from None
    finally:
        sock.close()


def _tell_peer(sock, why):
    """We failed: say why on the TCP connection, which the offerer watches
    until the taker comes for the rings (_await_taker), and the taker reads
    in place of the token or when the rings do not come (_offered_why).
    Best effort."""
    try:
        sock.settimeout(1.0)
        sock.sendall(why[:_WHY_MAX])
    except OSError:
        pass


def _offered_why(sock, error):
    """The offerer's why (_tell_peer), if it says within a second, as a
    ProtocolError to raise for `error` (what we saw: the rings' socket cut
    or the peer's hang-up); else `error`."""
    try:
        sock.settimeout(1.0)
        why = sock.recv(1 + _WHY_MAX)
    except OSError:
        return error
    if why[:1] != _CANNOT:
        return error
    return ProtocolError(why[1:].decode(errors="replace"))


def _await_taker(listener, sock, peer, deadline):
    """Until the taker knocks at our `listener`; ProtocolError if it says
    on the TCP connection `sock` why it cannot come (_tell_offerer), or
    hangs up; TimeoutError at `deadline`."""
    waiting = select.poll()
    for s in (listener, sock):
        waiting.register(s, select.POLLIN)
    ready = dict(waiting.poll(max(deadline - time.monotonic(), 0.0) * 1000))
    if listener.fileno() in ready:
        return
    if sock.fileno() not in ready:
        raise TimeoutError("timed out")
    sock.settimeout(1.0)
    why = sock.recv(_WHY_MAX).decode(errors="replace")
    raise ProtocolError(why or f"rank {peer} hung up before it came for it")


def _take_full():
    """One of this process's FULL_PAIRS full rings, if one is left."""
    global _full_taken
    with _full_lock:
        if _full_taken >= FULL_PAIRS:
            return False
        _full_taken += 1
        return True


def _give_back_full():
    global _full_taken
    with _full_lock:
        _full_taken -= 1


def _name(token):
    return b"\0gloocy-" + token.hex().encode()


def _offer(sock, peer, deadline, ring, node):
    token = secrets.token_bytes(16)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(_name(token))
        listener.listen(4)
        sock.sendall(_OFFERED + token)
        while True:                     # a stranger may knock first
            _await_taker(listener, sock, peer, deadline)
            listener.settimeout(max(0.001, deadline - time.monotonic()))
            conn, _ = listener.accept()
            try:
                conn.settimeout(max(0.001, deadline - time.monotonic()))
                if hmac.compare_digest(recv_exact(conn, 16, "the token"), token):
                    break
            except (OSError, ProtocolError):
                pass
            conn.close()
    full, memfd = False, None
    try:
        (theirs,) = _FULL.unpack(recv_exact(conn, _FULL.size, "the ring's size"))
        full = (ring < DEFAULT_RING and theirs and not _ring_forced()
                and _take_full())
        ring = DEFAULT_RING if full else ring
        memfd = os.memfd_create("gloocy-ring", os.MFD_CLOEXEC)
        os.ftruncate(memfd, segment_bytes(ring))
        socket.send_fds(conn, [_RING.pack(ring, full)],
                        [memfd] if node is None else [memfd, node])
    except BaseException as e:
        if full:
            _give_back_full()
        if memfd is not None:
            os.close(memfd)
        if isinstance(e, OSError):      # tell the taker why (a ring of 0)
            with contextlib.suppress(OSError):
                conn.sendall(_RING.pack(0, False) + str(e).encode()[:_WHY_MAX])
        conn.close()
        raise
    return conn, memfd, ring


def _take(sock, peer, deadline):
    if recv_exact(sock, 1, "the shared-memory token") != _OFFERED:
        why = sock.recv(_WHY_MAX).decode(errors="replace")
        raise ProtocolError(why or "the peer could not offer shared memory")
    token = recv_exact(sock, 16, "the shared-memory token")
    try:
        return _take_offered(sock, token, deadline)
    except (ConnectionError, ProtocolError) as e:   # (the peer's doing)
        raise _offered_why(sock, e) from None


def _take_offered(sock, token, deadline):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(max(0.001, deadline - time.monotonic()))
        conn.connect(_name(token))
        spare = _take_full()          # offered; given back unless used
        try:
            conn.sendall(token + _FULL.pack(spare))
            msg, fds, flags, _ = socket.recv_fds(conn, _RING.size, 2)
        except BaseException:
            if spare:
                _give_back_full()
            raise
        used = len(msg) == _RING.size and _RING.unpack(msg)[1]
        if spare and not used:
            _give_back_full()
        try:
            if flags & socket.MSG_CTRUNC:
                raise OSError(errno.EMFILE, "the peer's shared segment was dropped "
                              "on arrival: this process has no file descriptor "
                              "left for it (raise the open-file limit)")
            if len(msg) == _RING.size and _RING.unpack(msg)[0] == 0 and not fds:
                why = conn.recv(_WHY_MAX).decode(errors="replace")
                raise ProtocolError(f"the peer could not make its shared segment: {why}")
            if not msg:
                raise ProtocolError("the peer hung up before sending its shared "
                                    "segment (it could not make or send one: its "
                                    "own error says why)")
            if len(fds) not in (1, 2) or len(msg) != _RING.size:
                raise ProtocolError("the peer sent no shared segment")
            ring, _ = _RING.unpack(msg)
            if os.fstat(fds[0]).st_size != segment_bytes(ring):
                raise ProtocolError("the shared segment has the wrong size")
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
    except BaseException:
        conn.close()
        raise
    return conn, fds[0], ring, (fds[1] if len(fds) == 2 else None)
