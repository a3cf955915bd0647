"""gloocy: collective communication for Python, Gloo's job with mpi4py's face.

    import gloocy, numpy as np
    comm = gloocy.init()                     # under gloocy-run, or a world of one
    x = np.full(4, comm.rank, dtype=np.float64)
    comm.Allreduce(gloocy.IN_PLACE, x, op=gloocy.SUM)
"""

import atexit
import hashlib
import os
import secrets
import sys
import urllib.parse

from gloocy._core import Context
from gloocy.communicator import Communicator
from gloocy.constants import ANY_SOURCE, ANY_TAG, IN_PLACE, PROC_NULL
from gloocy.status import Status
from gloocy.errors import (CollectiveTimeout, ContextPoisoned, GloocyError,
                           MismatchError, PeerLostError, ProtocolError,
                           RendezvousError, RendezvousTimeout)
from gloocy.requests import (Request, Testall, Testany, Waitall, Waitany,
                             Waitsome)
from gloocy.ops import (AVG, BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MAXLOC,
                        MIN, MINLOC, PROD, SUM, Op)
# (at the top: thousands of thread ranks importing it at once in _tuning
# queue on the import lock while the first one runs its body)
from gloocy.waiting import wait_tuning

__version__ = "0.1.0"

__all__ = [
    "init", "Communicator", "IN_PLACE", "Op", "Status", "ANY_SOURCE",
    "Request", "Waitall", "Testall", "Waitany", "Testany", "Waitsome",
    "ANY_TAG", "PROC_NULL",
    "SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR", "LAND", "LOR", "LXOR",
    "MAXLOC", "MINLOC", "AVG",
    "GloocyError", "PeerLostError", "CollectiveTimeout", "MismatchError",
    "RendezvousError", "RendezvousTimeout", "ProtocolError", "ContextPoisoned",
]

DEFAULT_TIMEOUT = 300.0
_world = None


def _env_int(name, default=None):
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"environment variable {name}={text!r} is not an "
                         "integer") from None


def _secret_bytes(secret, job):
    """The job secret: argument, else GLOOCY_SECRET (hex), else one derived
    from the job id -- which only keeps other jobs out, not attackers."""
    if secret is None:
        text = os.environ.get("GLOOCY_SECRET", "")
        try:
            secret = bytes.fromhex(text)
        except ValueError:
            raise ValueError("GLOOCY_SECRET must be hex") from None
    elif isinstance(secret, str):
        secret = secret.encode()
    secret = bytes(secret)
    if not secret:
        secret = hashlib.sha256(b"gloocy-job:" + job.encode()).digest()
    return secret


def _tuning(size, local_size=None):
    """Knobs for tests and benchmarks (environment variables); how a wait
    spins and yields follows from the host (gloocy/waiting.py)."""
    return dict(
        segment=_env_int("GLOOCY_SEGMENT_BYTES", 1 << 20),
        small_allreduce=_env_int("GLOOCY_SMALL_ALLREDUCE_BYTES", 1 << 16),
        **wait_tuning(local_size or _env_int("GLOOCY_LOCAL_SIZE", size)),
    )


def connect(rank, size, store, *, secret=None, job="gloocy", timeout=None,
            host=None, host_store=False, local_size=None, announce=None):
    """Build a communicator of `size` ranks that meet through `store`.

    `store` is a store URL (tcp://host:port) or a Store object. With
    `host_store`, this process serves the TCP store at that URL for the
    others (as rank 0 does when ranks are not started by gloocy-run);
    port 0 picks a free one, and `announce(url)` is told the URL served.
    """
    from gloocy import rendezvous, transport

    if not isinstance(size, int) or size < 1:
        raise ValueError(f"size: must be a positive int, got {size!r}")
    if not isinstance(rank, int) or not 0 <= rank < size:
        raise ValueError(f"rank: {rank!r} is not in 0..{size - 1}")
    timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    if not timeout > 0:
        raise ValueError(f"timeout: must be positive, got {timeout!r}")
    secret = _secret_bytes(secret, job)
    if size == 1:
        return Communicator(Context(0, 1, [None], timeout=timeout, **_tuning(1)))
    server = client = None
    try:
        if isinstance(store, str):
            url = urllib.parse.urlsplit(store)
            if host_store and url.scheme == "tcp":  # others are served elsewhere
                try:
                    server = rendezvous.TCPStoreServer(
                        url.hostname, url.port, secret=secret).start()
                except OSError as e:
                    raise RendezvousError(f"rank {rank} cannot serve the store at "
                                          f"{store}: {e.strerror or e}") from None
                store = server.url
                if announce is not None:
                    announce(store)
            client = rendezvous.connect(store, secret=secret, timeout=timeout)
        else:
            client = store
        if host is None:
            from gloocy.rendezvous.address import advertised_address
            host = advertised_address(urllib.parse.urlsplit(store).hostname
                                      if isinstance(store, str) else None)
        if transport.connect_mode() == "lazy":
            comm = _connect_lazy(client, server, store, rank, size, secret,
                                 host, job, timeout, local_size)
            client = server = None          # the connector's now
            return comm
        mesh = transport.connect(client, rank, size, secret, host=host,
                                 job=job, timeout=timeout)
        ctx = _context(rank, size, mesh, timeout, local_size)
        # Once every rank is through this barrier, nobody needs the store:
        # rank 0 removes the job's keys (Redis and file stores outlive us).
        ctx.barrier()
        if rank == 0:
            try:
                client.clear(f"{job}/")
            except RendezvousError as e:    # best effort: the job runs anyway
                _debug(f"could not remove the job's keys: {e}")
        return Communicator(ctx)
    finally:
        if client is not None and client is not store:
            client.close()
        if server is not None:
            server.close()


def init(*, rank=None, size=None, store=None, secret=None, timeout=None,
         host=None, job=None, bootstrap=None):
    """The world communicator, built once per process.

    Who we are and where the ranks meet come from the launcher's
    environment (gloocy-run's GLOOCY_*, torchrun's RANK/WORLD_SIZE/
    MASTER_ADDR/MASTER_PORT, Slurm's SLURM_*, an MPI launcher's PMI_*/
    OMPI_*; see gloocy.rendezvous.env), the first that applies; explicit
    `rank`, `size` and `store` override it. With none, the world is this
    process alone. Unless gloocy-run serves the store, rank 0 does.
    `bootstrap="mpi"` (the default under an MPI launcher with no store)
    exchanges addresses with one mpi4py allgather instead of a store.
    GLOOCY_DEBUG=1 prints which source was used.
    """
    global _world
    if _world is not None and not _world.closed:
        return _world
    from gloocy.rendezvous import env as launch_env

    launch = launch_env.detect()
    if bootstrap not in (None, "env", "mpi"):
        raise ValueError(f"bootstrap: {bootstrap!r} is not 'env' or 'mpi'")
    if timeout is None:
        timeout = float(os.environ.get("GLOOCY_TIMEOUT", DEFAULT_TIMEOUT))
    job = job or launch.job or "gloocy"
    if bootstrap == "mpi" or (bootstrap is None and launch.source == "mpi"
                              and store is None and launch.store is None):
        _debug(f"rank {launch.rank} of {launch.size}: addresses through mpi4py")
        _world = _connect_over_mpi(secret, job, timeout, host)
        return _world
    host_store = launch.host_store if store is None else launch.source != "gloocy-run"
    rank = launch.rank if rank is None else rank
    size = launch.size if size is None else size
    store = store or launch.store
    if rank is None and size is None:
        rank, size = 0, 1
    if rank is None or size is None:
        raise RendezvousError("init() needs both rank and size (arguments or "
                              "the launcher's environment, e.g. GLOOCY_RANK "
                              "and GLOOCY_SIZE)")
    _debug(launch.describe() if launch.source != "none"
           else f"rank {rank} of {size}, store {store}")
    announce = None
    if store is None and launch.agent_store and size > 1:
        from gloocy.rendezvous.torchrun import meeting_point
        store, announce = meeting_point(launch.agent_store, rank, job, timeout, host)
    if size > 1 and store is None:
        raise RendezvousError("init() needs a store URL (store= or "
                              "GLOOCY_STORE) for more than one rank")
    _world = connect(rank, size, store, secret=secret, job=job,
                     timeout=timeout, host=host,
                     host_store=rank == 0 and host_store,
                     local_size=launch.local_size, announce=announce)
    return _world


def _connect_lazy(client, server, store, rank, size, secret, host, job,
                  timeout, local_size):
    """The world with its pairs connected on first use: the store client
    (and the store server we host) live as long as the connections may be
    made, and go with the connector (the links' close)."""
    from gloocy import transport

    mesh, connector = transport.connect_lazy(client, rank, size, secret,
                                             host=host, job=job, timeout=timeout,
                                             hosts_store=server is not None)
    try:
        ctx = _context(rank, size, mesh, timeout, local_size)
    except BaseException:
        connector.close(False)
        raise
    connector.links = ctx.links
    ctx.links.connector = connector
    if client is not store:
        connector.owned.append(client)
    if server is not None:
        connector.owned.append(server)
        connector.server = server
    return Communicator(ctx)


def _context(rank, size, mesh, timeout, local_size):
    try:
        return Context(rank, size, mesh.pairs, timeout=timeout,
                       node_fd=-1 if mesh.node is None else mesh.node,
                       **_tuning(size, local_size))
    finally:
        if mesh.node is not None:
            os.close(mesh.node)


def _connect_over_mpi(secret, job, timeout, host):
    """The world of an MPI job: rank 0's secret and every rank's address
    travel by mpi4py (one bcast, one allgather); MPI is not used after."""
    from mpi4py import MPI
    from gloocy import transport

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if secret is None:
        secret = comm.bcast(new_secret() if rank == 0 else None, root=0)
    secret = _secret_bytes(secret, job)
    host = host or os.environ.get("GLOOCY_HOST", "127.0.0.1")
    mesh = transport.connect_by_allgather(comm.allgather, rank, size, secret,
                                          host=host, job=job, timeout=timeout)
    local = os.environ.get("MPI_LOCALNRANKS") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE")
    ctx = _context(rank, size, mesh, timeout, int(local) if local else None)
    ctx.barrier()
    return Communicator(ctx)


def _debug(message):
    if os.environ.get("GLOOCY_DEBUG", "") not in ("", "0"):
        print(f"gloocy: {message}", file=sys.stderr, flush=True)


@atexit.register
def _close_world():
    if _world is not None:
        _world._leave()


def new_secret():
    """A fresh random job secret (bytes) for connect()/init()."""
    return secrets.token_bytes(32)
