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
import urllib.parse

from gloocy._core import Context
from gloocy.communicator import (ANY_SOURCE, ANY_TAG, IN_PLACE, PROC_NULL,
                                  Communicator, Status)
from gloocy.errors import (CollectiveTimeout, ContextPoisoned, GloocyError,
                           MismatchError, PeerLostError, ProtocolError,
                           RendezvousError, RendezvousTimeout)
from gloocy.requests import (Request, Testall, Testany, Waitall, Waitany,
                             Waitsome)
from gloocy.ops import (AVG, BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MAXLOC,
                        MIN, MINLOC, PROD, SUM, Op)

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


def _default_spin_us(size):
    """Spinning before sleeping pays only while every local rank has a core
    of its own; oversubscribed, it steals the core a peer needs."""
    local = _env_int("GLOOCY_LOCAL_SIZE", size)
    return 50 if local <= len(os.sched_getaffinity(0)) else 0


def _tuning(size):
    """Knobs for tests and benchmarks (environment variables)."""
    return dict(
        segment=_env_int("GLOOCY_SEGMENT_BYTES", 1 << 18),
        spin_us=_env_int("GLOOCY_SPIN_US", _default_spin_us(size)),
        small_allreduce=_env_int("GLOOCY_SMALL_ALLREDUCE_BYTES", 1 << 16),
    )


def connect(rank, size, store, *, secret=None, job="gloocy", timeout=None,
            host=None, host_store=False):
    """Build a communicator of `size` ranks that meet through `store`.

    `store` is a store URL (tcp://host:port) or a Store object. With
    `host_store`, this process serves the TCP store at that URL for the
    others (as rank 0 does when ranks are not started by gloocy-run).
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
            if host_store:
                url = urllib.parse.urlsplit(store)
                server = rendezvous.TCPStoreServer(
                    url.hostname, url.port, secret=secret).start()
            client = rendezvous.connect(store, secret=secret, timeout=timeout)
        else:
            client = store
        if host is None:
            host = os.environ.get("GLOOCY_HOST", "127.0.0.1")
        pairs = transport.connect(client, rank, size, secret, host=host,
                                  job=job, timeout=timeout)
        ctx = Context(rank, size, pairs, timeout=timeout, **_tuning(size))
        # Once every rank is through this barrier, nobody needs the store.
        ctx.barrier()
        return Communicator(ctx)
    finally:
        if client is not None and client is not store:
            client.close()
        if server is not None:
            server.close()


def init(*, rank=None, size=None, store=None, secret=None, timeout=None,
         host=None, job=None):
    """The world communicator, built once per process.

    Arguments default to the launcher's environment (GLOOCY_RANK,
    GLOOCY_SIZE, GLOOCY_STORE, GLOOCY_SECRET, GLOOCY_JOB_ID, GLOOCY_TIMEOUT);
    with neither, the world is this process alone. When ranks are started
    another way with an explicit `store` URL, rank 0 serves that store.
    """
    global _world
    if _world is not None and not _world.closed:
        return _world
    env = os.environ
    launched = env.get("GLOOCY_LAUNCHER") == "gloocy-run"
    rank = _env_int("GLOOCY_RANK") if rank is None else rank
    size = _env_int("GLOOCY_SIZE") if size is None else size
    store = store or env.get("GLOOCY_STORE")
    if rank is None and size is None and store is None:
        rank, size = 0, 1
    if rank is None or size is None:
        raise RendezvousError("init() needs both rank and size (arguments or "
                              "GLOOCY_RANK and GLOOCY_SIZE)")
    if size > 1 and store is None:
        raise RendezvousError("init() needs a store URL (store= or "
                              "GLOOCY_STORE) for more than one rank")
    if timeout is None:
        timeout = float(env.get("GLOOCY_TIMEOUT", DEFAULT_TIMEOUT))
    _world = connect(rank, size, store, secret=secret,
                     job=job or env.get("GLOOCY_JOB_ID", "gloocy"),
                     timeout=timeout, host=host,
                     host_store=(rank == 0 and not launched))
    return _world


@atexit.register
def _close_world():
    if _world is not None:
        _world._close()


def new_secret():
    """A fresh random job secret (bytes) for connect()/init()."""
    return secrets.token_bytes(32)
