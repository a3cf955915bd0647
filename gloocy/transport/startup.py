"""Joining a job with lazy connections: each rank publishes its address and
host and meets the others through a handful of store operations; rank 0
waits until all have joined and says, in its go, whether it serves the
store, where the ranks live and (all on one host) the node segment. The
keys are listed in lazy.py, whose Connector then makes the pairs."""

import array
import functools
import hashlib
import os
import time

from gloocy.errors import RendezvousError, RendezvousTimeout
from gloocy.rendezvous.shared_wait import get_once, nothing_to_pass, one_at_a_time
from gloocy.transport import handshake, shm
from gloocy.transport.lazy import Connector
from gloocy.transport.listener import Listener

__all__ = ["CANNOT_START", "cannot_start", "host_runs", "hosts_of_ranks", "start"]


def start(store, rank, size, secret, *, host, job, timeout, mode, dead_s,
          port=0, advertise=None, hosts_store=False):
    """Join the job lazily: (Connector, node segment fd or None). Every
    rank reads O(1) keys; rank 0 waits until all have joined, then tells
    them whether it serves the store (`hosts_store`: it must outlive the
    others' use) and, when every rank is on its host, the node segment."""
    deadline = time.monotonic() + timeout
    listener = Listener.get(host, port, handshake.job_tag(job))
    connector = Connector(store, rank, size, secret, job, mode, dead_s,
                          timeout, listener)
    node = None
    pass_on = nothing_to_pass
    try:
        address = (advertise or listener.address).encode()
        listener.addresses[rank] = address    # (for the ranks of this process)
        # Sent together, answered in one round trip where the store can.
        if mode in ("auto", "shm"):
            _check_node_knobs(size)
        ops = [("set", f"{job}/tcp/{rank}", address)]
        if mode != "tcp":                 # (read by node segments' waits only)
            ops.append(("set", f"{job}/pid/{rank}", str(os.getpid()).encode()))
        # Our host, for rank 0's layout (go) and the node segment's count
        # (counted in every mode: rank 0 reads the ranks' hosts only when
        # not all of them are on its own).
        digest = hashlib.sha256(shm.host_identity().encode()).hexdigest()[:32]
        host_key = f"{job}/host/{digest}"
        if mode in ("auto", "shm"):
            connector.host_key = host_key
        ops += [("add", host_key, 1), ("set", f"{job}/on/{rank}", digest.encode())]
        ops.append(("add", f"{job}/joined", 1))
        with one_at_a_time(store):        # (the rank threads of a process)
            if store.batch(ops)[-1] == size:
                store.set(f"{job}/all", b"1")
        if rank == 0:
            _wait_for_all(store, job, size, deadline)
            here = store.add(host_key, 0)
            local = connector.host_key is not None and here == size
            pid = fd = 0
            if local:
                node = _new_node_segment(size)
                if node is not None:      # the others open this one via /proc
                    connector.own_fd = os.dup(node)
                    pid, fd = os.getpid(), connector.own_fd
            layout = (f"0*{size}" if here == size
                      else host_runs(store.get_many([f"{job}/on/{r}" for r in range(size)])))
            got = f"{int(hosts_store)} {pid} {fd} {layout}".encode()
            store.set(f"{job}/go", got)
        else:
            # (the rank threads of one process: one asks, the others go in turn)
            got, pass_on = get_once(
                store, f"{job}/go", lambda: _wait_for_go(store, job, rank, size, deadline),
                deadline)
            if got.startswith(CANNOT_START):
                raise cannot_start(rank, got)
        fields = got.split()              # (no 4th: the ranks' hosts untold)
        go = tuple(map(int, fields[:3]))
        connector.hosts = (hosts_of_ranks(fields[3].decode(), size)
                           if len(fields) > 3 else None)
        if rank != 0:
            if go[1]:
                node = _open_node_segment(rank, go[1], go[2])
                # rank 0 keeps its fd open until every rank has opened it
                if store.add(f"{job}/opened", 1) == size - 1:
                    store.set(f"{job}/opened_all", b"1")
        connector.store_hosted, connector.all_local = bool(go[0]), bool(go[1])
        if connector.host_key is not None:    # rings sized by the ranks here
            here = (store.add(connector.host_key, 0) if connector.hosts is None
                    else connector.hosts.count(connector.hosts[rank]))
            connector.ring = shm.ring_bytes(here)
            shm.note_local_ranks(here)
        return connector, node
    except BaseException:
        if node is not None:
            os.close(node)
        connector.close(False)
        raise
    finally:
        pass_on()


CANNOT_START = b"!"     # a start-up key's value: a rank cannot join; why follows
# How long past its deadline a rank waits for rank 0 to name the ranks that
# never joined (rank 0's deadline is about ours; naming them is N reads).
_NAMED_BY_RANK_0_S = 3.0


def cannot_start(rank, value):
    """The RendezvousError of `rank` at start-up, once a key it waited for
    says that a rank cannot join (CANNOT_START + why)."""
    why = value[len(CANNOT_START):].decode(errors="replace")
    return RendezvousError(f"rank {rank}: the job cannot start: {why}")


def host_runs(digests):
    """The ranks' hosts (each rank's host digest, in rank order) as text
    for rank 0's go: runs "h*k" (k ranks in a row on host h; hosts numbered
    in the order of their lowest rank), comma-separated."""
    index, runs = {}, []
    for d in digests:
        h = index.setdefault(d, len(index))
        if runs and runs[-1][0] == h:
            runs[-1][1] += 1
        else:
            runs.append([h, 1])
    return ",".join(f"{h}*{k}" for h, k in runs)


@functools.lru_cache(maxsize=4)
def hosts_of_ranks(runs, size):
    """host_runs' text as each rank's host index: one array for all the
    rank threads of a process (read only)."""
    out = array.array("i")
    for run in runs.split(","):
        h, k = run.split("*")
        out.extend(array.array("i", [int(h)]) * int(k))
    if len(out) != size:
        raise RendezvousError(f"rank 0's host layout covers {len(out)} ranks, "
                              f"not the job's {size}")
    return out


def _wait_for_all(store, job, size, deadline):
    """Rank 0: until every rank has joined; at the deadline, name the ranks
    that never published their address (O(N) reads, on failure only)."""
    try:
        got = store.get(f"{job}/all", timeout=max(deadline - time.monotonic(), 0.001))
    except RendezvousTimeout:
        missing = [r for r in range(1, size) if not store.check([f"{job}/tcp/{r}"])]
        why = f"rank(s) {missing} did not join the job before the deadline"
        try:                      # (the others wait for go: they name them too)
            store.compare_set(f"{job}/go", None, CANNOT_START + why.encode())
        except (RendezvousError, OSError):
            pass
        raise RendezvousError(f"rank 0: {why}") from None
    if got.startswith(CANNOT_START):
        raise cannot_start(0, got)


def _wait_for_go(store, job, rank, size, deadline):
    """Another rank: rank 0's go (once every rank has joined). At the
    deadline, say how many joined, and whether rank 0 is the one missing."""
    try:
        return store.get(f"{job}/go", timeout=max(deadline - time.monotonic(), 0.001))
    except RendezvousTimeout:
        pass
    try:                          # rank 0 names the missing ranks in go, soon
        return store.get(f"{job}/go", timeout=_NAMED_BY_RANK_0_S)
    except RendezvousTimeout:
        pass
    if not store.check([f"{job}/tcp/0"]):
        why = "rank 0 never joined"
    else:
        joined = store.add(f"{job}/joined", 0)
        why = f"{size - joined} of {size} ranks did not join (rank 0 names them)"
    raise RendezvousError(f"rank {rank}: rank 0's go did not come before the "
                          f"deadline: {why}") from None


def _open_node_segment(rank, pid, fd):
    """Rank 0's node segment (its `fd` in process `pid`), opened through
    /proc: what the kernel allows only where we may trace rank 0."""
    try:
        return os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
    except PermissionError as e:
        raise RendezvousError(
            f"rank {rank}: cannot open rank 0's shared-memory segment through "
            f"/proc/{pid}/fd/{fd} ({e.strerror}): rank 0's process is not "
            f"dumpable, or the ranks may not trace each other (ptrace rules, "
            f"containers); GLOOCY_TRANSPORT=tcp on every rank does without it"
        ) from e


def _new_node_segment(size):
    """A node segment for `size` ranks (its fd), or None if none can be made."""
    from gloocy._core import new_node_segment
    try:
        return new_node_segment(size, shm.chunk_bytes(size))
    except OSError:
        return None


def _check_node_knobs(size):
    """ValueError naming a bad GLOOCY_SHM_CHUNK_BYTES, GLOOCY_CMA_MIN_BYTES
    or GLOOCY_CMA_P2P_(SPLIT_)MIN_BYTES, on every rank before it joins
    (rank 0 reads the first two for the segment; the others are read as
    shared-memory pairs are made, long after start-up)."""
    from gloocy._core import cma_min_bytes
    shm.chunk_bytes(size)
    cma_min_bytes()
    shm.p2p_single_min()
    shm.p2p_split_min()
