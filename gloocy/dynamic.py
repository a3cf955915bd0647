"""Dynamic processes (MPI's process creation and management): ports,
Accept/Connect, Join, name publishing and the parent of spawned processes
(Spawn itself: spawn.py).

A port is a capability: the address of a TCP store (served by a thread of
the process that opened it), a fresh key prefix and a secret, written as

    gloocy-port:tcp://HOST:PORT/PREFIX#SECRET-HEX

Two groups meet at a port: each root draws a match number (the k-th
Accept pairs with the k-th Connect), the roots swap their group's size and
processes, then every member of both groups connects into one fresh world
of P + C processes (the acceptors first) over its own connections, and the
intercommunicator is made from that world, as Merge's inverse.
"""

from __future__ import annotations

import atexit
import os
import secrets
import socket
import struct
import sys
import threading
import time
import urllib.parse
import zlib

from gloocy.errors import (ERR_ARG, ERR_NAME, ERR_OTHER, ERR_PORT,
                           ERR_SERVICE, ArgumentError, GloocyError,
                           RendezvousTimeout)

__all__ = ["open_port", "close_port", "spawn", "accept", "connect", "join",
           "get_parent", "join_parent", "publish_name", "unpublish_name",
           "lookup_name"]

SCHEME = "gloocy-port:"
ENV_PARENT = "GLOOCY_PARENT_PORT"       # a spawned process's parents' port
ENV_NAMES = "GLOOCY_NAME_SERVICE"       # "URL#SECRET-HEX" of the names' store
POLL_S = 0.2                            # slices of the waits for a peer group
ORPHAN_POLL_S = 0.5                     # how often a spawned process checks its parent
LOCAL_BITS = 32                         # process ids: (world tag << 32) | rank

_lock = threading.Lock()
_servers = {}                           # port name -> TCPStoreServer we serve
_state = {"parent": None, "tag": None}
_joined = []                            # intercomms made here: closed at exit


# -- ports -------------------------------------------------------------------

class Port:
    """A parsed port name."""

    def __init__(self, url, prefix, secret):
        self.url, self.prefix, self.secret = url, prefix, secret

    @property
    def name(self):
        return f"{SCHEME}{self.url}/{self.prefix}#{self.secret.hex()}"

    @classmethod
    def parse(cls, name):
        if not isinstance(name, str):
            raise ArgumentError(f"port_name: expected a str, got {name!r}",
                                ERR_PORT)
        try:
            if not name.startswith(SCHEME):
                raise ValueError
            rest, _, key = name[len(SCHEME):].rpartition("#")
            url, _, prefix = rest.rpartition("/")
            parts = urllib.parse.urlsplit(url)
            if parts.scheme != "tcp" or not parts.port or not prefix:
                raise ValueError
            return cls(url, prefix, bytes.fromhex(key))
        except ValueError:
            raise ArgumentError(f"port_name: {name!r} is not a port name "
                                "(from Open_port)", ERR_PORT) from None


def _world_store_host():
    """The host of the job's store, if it runs elsewhere (a multi-host job:
    our ports must be reachable from there), else None."""
    store = os.environ.get("GLOOCY_STORE", "")
    return urllib.parse.urlsplit(store).hostname if store.startswith("tcp:") else None


def open_port(info=None):
    """A new port name, served by a thread of this process until
    close_port."""
    from gloocy.rendezvous import TCPStoreServer
    from gloocy.rendezvous.address import advertised_address

    secret = secrets.token_bytes(32)
    server = TCPStoreServer(advertised_address(_world_store_host()), 0,
                            secret=secret).start()
    port = Port(server.url, "port-" + secrets.token_hex(8), secret)
    with _lock:
        _servers[port.name] = server
    return port.name


def close_port(port_name):
    Port.parse(port_name)
    with _lock:
        server = _servers.pop(port_name, None)
    if server is None:
        raise ArgumentError(f"port_name: {port_name!r} is not open in this "
                            "process", ERR_PORT)
    server.close()


@atexit.register
def _close_everything():
    with _lock:
        joined = list(_joined)
        _joined.clear()
    for comm in joined:
        try:
            comm._leave()
        except Exception:
            pass
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.close()


# -- process ids across worlds -------------------------------------------------

def _world_tag():
    """A number naming this process's world, the same on all its ranks: the
    high bits of the ids our processes have in other worlds' groups."""
    if _state["tag"] is None:
        job = os.environ.get("GLOOCY_JOB_ID", "") + os.environ.get("GLOOCY_STORE", "")
        world = _world_size()
        tag = zlib.crc32(job.encode()) if world > 1 and job else secrets.randbits(31)
        _state["tag"] = (tag & 0x7FFFFFFF) or 1
    return _state["tag"]


def _world_size():
    import gloocy
    return gloocy._world.Get_size() if gloocy._world is not None else 1


def _universal(procs):
    tag = _world_tag()
    return tuple(p if p >> LOCAL_BITS else (tag << LOCAL_BITS) | p for p in procs)


def _localized(ids):
    tag, mask = _world_tag(), (1 << LOCAL_BITS) - 1
    return tuple(u & mask if u >> LOCAL_BITS == tag else u for u in ids)


# -- the meeting of two groups -------------------------------------------------

def _timeout(comm, timeout):
    if timeout is not None:
        return float(timeout)
    import gloocy
    return float(getattr(comm, "timeout", None) or gloocy.DEFAULT_TIMEOUT)


def _check_intracomm(comm, root, name):
    from gloocy.communicator import Intercomm, Intracomm
    if not isinstance(comm, Intracomm) or isinstance(comm, Intercomm):
        raise TypeError(f"{name}: expected an Intracomm, got {comm!r}")
    size = comm.Get_size()
    if not isinstance(root, int) or not 0 <= root < size:
        from gloocy.errors import ERR_ROOT
        raise ArgumentError(f"root: {root!r} is not a rank of the "
                            f"communicator (size {size})", ERR_ROOT)


def wait_key(store, key, deadline, watch=None, what="the other group"):
    """Wait for `key` in slices (Ctrl-C works), calling `watch()` (which
    raises if what we wait for can no longer come) between them."""
    while True:
        if watch is not None:
            watch()
        left = deadline - time.monotonic()
        if left <= 0:
            raise RendezvousTimeout(f"no sign of {what} at the port within "
                                    "the deadline")   # (the caller's timeout)
        try:
            return store.get(key, timeout=min(POLL_S, left))
        except RendezvousTimeout:
            continue


def _open_store(port, timeout):
    from gloocy import rendezvous
    from gloocy.rendezvous.prefix_store import PrefixStore
    client = rendezvous.connect(port.url, secret=port.secret, timeout=timeout)
    return PrefixStore(client, port.prefix, close_store=True)


def _meet_at_root(port_name, accepting, nprocs, timeout, watch, what=None):
    """At a root: (port, match number, remote processes) from the other
    root, through the port's store."""
    import pickle
    port = Port.parse(port_name)
    deadline = time.monotonic() + timeout
    store = _open_store(port, timeout)
    try:
        mine = pickle.dumps(nprocs)
        if accepting:
            k = store.add("accepts", 1)
            theirs = wait_key(store, f"{k}/hello", deadline, watch,
                              what or "a Connect")
            store.set(f"{k}/welcome", mine)
        else:
            k = store.add("connects", 1)
            store.set(f"{k}/hello", mine)
            theirs = wait_key(store, f"{k}/welcome", deadline, watch,
                              "an Accept")
        return port, k, pickle.loads(theirs)
    finally:
        store.close()


def share_outcome(comm, root, make, timeout=None):
    """`make()` at root, its value at every rank; if it raises, every rank
    raises (root its own exception, the others a copy with its class).
    The others wait longer than `timeout` (root's own deadline), so that
    they hear how root's wait ended rather than time out first."""
    found = error = None
    if comm.Get_rank() == root:
        try:
            found = ("ok", make())
        except BaseException as e:
            error = e
            found = ("error", getattr(e, "error_class", ERR_OTHER),
                     f"at root (rank {root}): {type(e).__name__}: {e}")
    found = comm.bcast(found, root=root, timeout=None if timeout is None
                       else timeout * 1.25 + 10)
    if error is not None:
        raise error
    if found[0] == "error":
        raise GloocyError(found[2], found[1])
    return found[1]


def meet(comm, port_name, root, accepting, timeout, watch=None, what=None):
    """The intercommunicator between comm's group and the group meeting it
    at `port_name` (Accept when `accepting`, else Connect); `watch` and
    `what`: see wait_key."""
    from gloocy.communicator import _intercomm_over
    _check_intracomm(comm, root, "Accept" if accepting else "Connect")
    timeout = _timeout(comm, timeout)
    procs = tuple(comm.Get_group()._procs)
    port, k, rprocs = share_outcome(comm, root, lambda: _meet_at_root(
        port_name, accepting, _universal(procs), timeout, watch, what), timeout)
    nlocal, nremote = len(procs), len(rprocs)
    rank = comm.Get_rank() + (0 if accepting else nremote)
    joint = _joint_context(port, f"{port.prefix}/{k}/mesh", rank,
                           nlocal + nremote, timeout)
    try:
        inter = _intercomm_over(joint, nlocal if accepting else nremote,
                                accepting, procs, _localized(rprocs))
    finally:
        joint.close()
    with _lock:
        _joined[:] = [c for c in _joined if c] + [inter]
    return inter


def _joint_context(port, job, rank, size, timeout):
    """A context of `size` processes meeting under the key prefix `job` of
    the port's store, over connections of its own."""
    import gloocy
    from gloocy import rendezvous, transport
    from gloocy._core import Context
    from gloocy.rendezvous.address import advertised_address

    client = rendezvous.connect(port.url, secret=port.secret, timeout=timeout)
    try:
        host = advertised_address(urllib.parse.urlsplit(port.url).hostname)
        mesh = transport.connect(client, rank, size, port.secret, host=host,
                                 job=job, timeout=timeout)
        if mesh.node is not None:
            os.close(mesh.node)         # no node segment: not a hot path
        ctx = Context(rank, size, mesh.pairs, timeout=timeout,
                      **gloocy._tuning(size))
        ctx.barrier()                   # all are through the store
        if rank == 0:
            try:
                client.clear(f"{job}/")
            except GloocyError:
                pass                    # best effort: the port's keys
        return ctx
    finally:
        client.close()


def spawn(comm, *args, **kwargs):
    """Intracomm.Spawn/Spawn_multiple (gloocy.spawn)."""
    from gloocy.spawn import spawn as start
    return start(comm, *args, **kwargs)


def accept(comm, port_name, root=0, timeout=None):
    return meet(comm, port_name, root, True, timeout)


def connect(comm, port_name, root=0, timeout=None):
    return meet(comm, port_name, root, False, timeout)


# -- Join: two processes joined by a socket ----------------------------------

def join(fd, timeout=None):
    """The intercommunicator of this process and the one at the other end
    of the connected socket `fd`: the side with the lower random draw
    opens a port and sends its name, the other connects to it."""
    import gloocy
    from gloocy._core import Context
    from gloocy.communicator import Intracomm
    if not isinstance(fd, int) or fd < 0:
        raise ArgumentError(f"fd: {fd!r} is not a file descriptor", ERR_ARG)
    timeout = gloocy.DEFAULT_TIMEOUT if timeout is None else float(timeout)
    world = gloocy._world
    self_comm = Intracomm(Context(0, 1, [None]), procs=[
        world.Get_rank() if world is not None and world else 0])
    try:
        blocking = os.get_blocking(fd)  # our copy shares the flags: restored
        sock = socket.socket(fileno=os.dup(fd))
    except OSError as e:
        raise ArgumentError(f"fd: {fd} is not a socket ({e})", ERR_ARG) from None
    try:
        return _join_over(sock, fd, timeout, self_comm)
    finally:
        sock.close()
        os.set_blocking(fd, blocking)


def _join_over(sock, fd, timeout, self_comm):
    """Join's exchange over our copy of the socket."""
    sock.settimeout(timeout)
    try:
        while True:
            mine = secrets.token_bytes(16)
            sock.sendall(mine)
            theirs = _recv_exact(sock, 16)
            if mine != theirs:
                break
        if mine < theirs:
            port_name = open_port()
            try:
                data = port_name.encode()
                sock.sendall(struct.pack("!I", len(data)) + data)
                return accept(self_comm, port_name, 0, timeout)
            finally:
                close_port(port_name)
        n, = struct.unpack("!I", _recv_exact(sock, 4))
        if n > 4096:
            raise GloocyError(f"Join: the peer sent a port name of {n} "
                              "bytes", ERR_PORT)
        return connect(self_comm, _recv_exact(sock, n).decode(), 0, timeout)
    except OSError as e:
        raise GloocyError(f"Join: socket fd {fd}: {e}", ERR_OTHER) from None


def _recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise GloocyError("Join: the peer closed the socket", ERR_OTHER)
        data += chunk
    return data


# -- the parent of a spawned world -------------------------------------------

def join_parent(world):
    """In a process started by Spawn (GLOOCY_PARENT_PORT set): connect the
    world (all its ranks, collectively) to the parents. Called once, as
    gloocy.MPI makes COMM_WORLD."""
    port_name = os.environ.pop(ENV_PARENT, None)
    if port_name and _state["parent"] is None:
        spawner = os.getppid()
        _state["parent"] = connect(world, port_name, 0, None)
        threading.Thread(target=_orphan_watch, args=(spawner,), daemon=True,
                         name="gloocy-parent-watch").start()


def _orphan_watch(spawner):
    """A spawned process whose spawning parent died while still connected
    to it exits (as MPI's process manager would stop it) rather than wait
    forever for its parents; once disconnected it lives on its own."""
    while _state["parent"]:
        if os.getppid() != spawner:
            print(f"gloocy: rank {_world_rank()} of a spawned world: the "
                  f"process that spawned it (pid {spawner}) died; exiting",
                  file=sys.stderr, flush=True)
            os._exit(1)
        time.sleep(ORPHAN_POLL_S)


def _world_rank():
    import gloocy
    return gloocy._world.Get_rank() if gloocy._world else 0


def get_parent():
    from gloocy.communicator import Intercomm
    parent = _state["parent"]
    return Intercomm() if parent is None else parent


# -- name publishing ---------------------------------------------------------

_local_names = {}


def name_service():
    """"URL#SECRET-HEX" of the store names are published in: GLOOCY_NAME_SERVICE
    if set (spawned processes get their parents'), else the store of the
    job under gloocy-run; "" (this process only) otherwise."""
    spec = os.environ.get(ENV_NAMES)
    if spec is not None:
        return spec
    store, key = os.environ.get("GLOOCY_STORE"), os.environ.get("GLOOCY_SECRET")
    if os.environ.get("GLOOCY_LAUNCHER") == "gloocy-run" and store and key:
        return f"{store}#{key}"
    return ""


class _Names:
    """The names' table: a store under "gloocy-names", or a dict."""

    def __enter__(self):
        spec = name_service()
        self.store = None
        if spec:
            from gloocy import rendezvous
            url, _, key = spec.rpartition("#")
            self.store = rendezvous.connect(url, secret=bytes.fromhex(key),
                                            timeout=30.0)
        return self

    def __exit__(self, *exc):
        if self.store is not None:
            self.store.close()

    @staticmethod
    def _key(service):
        if not isinstance(service, str) or not service:
            raise ArgumentError(f"service_name: expected a non-empty str, got "
                                f"{service!r}", ERR_SERVICE)
        return "gloocy-names/" + service.encode().hex()

    def get(self, service):
        key = self._key(service)
        if self.store is None:
            return _local_names.get(key)
        return self.store.get(key).decode() if self.store.check([key]) else None

    def add(self, service, port_name):
        key = self._key(service)
        if self.store is None:
            return _local_names.setdefault(key, port_name)
        return self.store.compare_set(key, None, port_name.encode()).decode()

    def remove(self, service):
        key = self._key(service)
        if self.store is None:
            return _local_names.pop(key, None) is not None
        return self.store.delete(key)


def publish_name(service_name, port_name, info=None):
    Port.parse(port_name)
    with _Names() as names:
        if names.add(service_name, port_name) != port_name:
            raise GloocyError(f"Publish_name: {service_name!r} is published "
                              "already (with another port)", ERR_SERVICE)


def unpublish_name(service_name, port_name, info=None):
    with _Names() as names:
        if not names.remove(service_name):
            raise GloocyError(f"Unpublish_name: {service_name!r} is not "
                              "published", ERR_SERVICE)


def lookup_name(service_name, info=None):
    with _Names() as names:
        found = names.get(service_name)
    if found is None:
        raise GloocyError(f"Lookup_name: no port is published as "
                          f"{service_name!r}", ERR_NAME)
    return found
