"""One adapter per implementation, all with the same methods over numpy
buffers: ``barrier()``, ``bcast(buf)`` (root 0), ``allreduce(buf)`` (SUM,
in place), ``allgather(send, recv)``, ``reduce_scatter(send, recv)`` (SUM),
``alltoall(send, recv)``; plus ``init()``, ``close()`` and ``wrap(array)``
(what the methods take: the array itself, or a tensor sharing its memory).

``missing()`` and ``collectives()`` run in the parent and start nothing;
the rest runs in the ranks.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import shutil
import sys
from typing import Any, ClassVar

import numpy as np

__all__ = ["Impl", "GloocyImpl", "TorchGlooImpl", "Mpi4pyImpl",
           "Mpi4pyYieldImpl", "IMPLS",
           "parse_spec", "expand", "mpiexec"]

TIMEOUT = float(os.environ.get("GLOOCY_BENCH_TIMEOUT", "300"))  # per call, s
PORT_ENV = "GLOOCY_BENCH_PORT"          # torch's rendezvous port, chosen by the parent

ALL = ("allreduce", "bcast", "allgather", "reduce_scatter", "alltoall", "barrier")


class Impl:
    """An implementation of the collectives (abstract)."""

    name: ClassVar[str]
    launcher: ClassVar[str] = "gloocy-run"      # or "mpiexec"
    env: ClassVar[dict[str, str]] = {}          # set for the ranks

    def __init__(self, transport: str = "") -> None:
        self.transport = transport
        self.rank = 0
        self.size = 1

    @property
    def label(self) -> str:
        return f"{self.name}:{self.transport}" if self.name == "gloocy" else self.name

    def missing(self) -> str | None:
        """Why this implementation cannot run here, or None."""
        return None

    def collectives(self) -> tuple[str, ...]:
        """The collectives this implementation has."""
        return ALL

    def version(self) -> str:
        return ""

    def init(self) -> None: ...
    def close(self) -> None: ...

    def wrap(self, array: np.ndarray) -> Any:
        return array


# How to get each peer (torch: its CPU build; PyPI's plain torch is CUDA's).
INSTALL = {"torch": "pip install torch==2.13.0 --index-url "
                    "https://download.pytorch.org/whl/cpu",
           "mpi4py": "pip install mpi4py mpich"}


def _no_module(name: str) -> str | None:
    if importlib.util.find_spec(name) is None:
        return f"{name} is not installed ({INSTALL[name]})"
    return None


class GloocyImpl(Impl):
    """gloocy's Communicator; the transport is forced via GLOOCY_TRANSPORT."""

    name = "gloocy"
    # collective -> the Communicator method (mpi4py's name); absent => n/a
    METHODS = {"barrier": "Barrier", "bcast": "Bcast", "allreduce": "Allreduce",
               "allgather": "Allgather", "reduce_scatter": "Reduce_scatter_block",
               "alltoall": "Alltoall"}

    @classmethod
    def available_transports(cls) -> tuple[str, ...]:
        """The transports this machine can run (ibverbs only with a usable
        RDMA device)."""
        import gloocy.transport as t
        return tuple(x for x in getattr(t, "TRANSPORTS", ("tcp",))
                     if x != "auto" and not cls._unusable(x))

    @staticmethod
    def _unusable(transport: str) -> str | None:
        if transport != "ibverbs":
            return None
        from gloocy.transport import ibverbs
        return ibverbs.probe()[1] or None

    def missing(self) -> str | None:
        import gloocy.transport as t
        if self.transport not in getattr(t, "TRANSPORTS", ("tcp",)):
            return (f"gloocy has no {self.transport!r} transport "
                    f"(has: {', '.join(self.available_transports())})")
        return self._unusable(self.transport)

    def collectives(self) -> tuple[str, ...]:
        from gloocy.communicator import Communicator
        return tuple(c for c in ALL
                     if callable(getattr(Communicator, self.METHODS[c], None)))

    def version(self) -> str:
        import gloocy
        return gloocy.__version__

    def init(self, comm=None) -> None:
        """Join the job (gloocy.init()), or use `comm`, a communicator the
        caller already has."""
        import gloocy
        self._gloocy = gloocy
        self.comm = gloocy.init() if comm is None else comm
        self.rank, self.size = self.comm.rank, self.comm.size

    def close(self) -> None:
        self.comm.Free()

    def barrier(self) -> None:
        self.comm.Barrier()

    def bcast(self, buf) -> None:
        self.comm.Bcast(buf, root=0)

    def allreduce(self, buf) -> None:
        self.comm.Allreduce(self._gloocy.IN_PLACE, buf, op=self._gloocy.SUM)

    def allgather(self, send, recv) -> None:
        self.comm.Allgather(send, recv)

    def reduce_scatter(self, send, recv) -> None:
        self.comm.Reduce_scatter_block(send, recv, op=self._gloocy.SUM)

    def alltoall(self, send, recv) -> None:
        self.comm.Alltoall(send, recv)


class TorchGlooImpl(Impl):
    """torch.distributed, backend "gloo", TCP rendezvous on loopback; rank
    and size from gloocy-run's environment, the port from the parent."""

    name = "torch-gloo"

    def missing(self) -> str | None:
        return _no_module("torch")

    def version(self) -> str:
        import torch
        return torch.__version__

    def init(self) -> None:
        import torch
        import torch.distributed as dist
        self._torch, self._dist = torch, dist
        self.rank = int(os.environ["GLOOCY_RANK"])
        self.size = int(os.environ["GLOOCY_SIZE"])
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{os.environ[PORT_ENV]}",
            rank=self.rank, world_size=self.size,
            timeout=datetime.timedelta(seconds=TIMEOUT))
        # The non-deprecated names where this torch has them.
        self._allgather = getattr(dist, "all_gather_single", None) \
            or dist.all_gather_into_tensor
        self._reduce_scatter = getattr(dist, "reduce_scatter_single", None) \
            or dist.reduce_scatter_tensor

    def close(self) -> None:
        self._dist.destroy_process_group()

    def wrap(self, array: np.ndarray) -> Any:
        return self._torch.from_numpy(array)    # shares the array's memory

    def barrier(self) -> None:
        self._dist.barrier()

    def bcast(self, buf) -> None:
        self._dist.broadcast(buf, src=0)

    def allreduce(self, buf) -> None:
        self._dist.all_reduce(buf)

    def allgather(self, send, recv) -> None:
        self._allgather(recv, send)

    def reduce_scatter(self, send, recv) -> None:
        self._reduce_scatter(recv, send)

    def alltoall(self, send, recv) -> None:
        self._dist.all_to_all_single(recv, send)


def mpiexec() -> str | None:
    """The mpiexec next to this Python (the mpich wheel's), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else shutil.which("mpiexec")


class Mpi4pyImpl(Impl):
    """mpi4py's buffer API (upper-case methods) on COMM_WORLD."""

    name = "mpi4py"
    launcher = "mpiexec"

    def missing(self) -> str | None:
        reason = _no_module("mpi4py")
        if reason is None and mpiexec() is None:
            reason = "mpiexec not found (pip install mpich)"
        return reason

    def version(self) -> str:
        import mpi4py
        from mpi4py import MPI
        lib = MPI.Get_library_version().splitlines()[0].strip()
        return f"mpi4py {mpi4py.__version__}, {lib}"

    def init(self) -> None:
        from mpi4py import MPI
        self._mpi = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def barrier(self) -> None:
        self.comm.Barrier()

    def bcast(self, buf) -> None:
        self.comm.Bcast(buf, root=0)

    def allreduce(self, buf) -> None:
        self.comm.Allreduce(self._mpi.IN_PLACE, buf, op=self._mpi.SUM)

    def allgather(self, send, recv) -> None:
        self.comm.Allgather(send, recv)

    def reduce_scatter(self, send, recv) -> None:
        self.comm.Reduce_scatter_block(send, recv, op=self._mpi.SUM)

    def alltoall(self, send, recv) -> None:
        self.comm.Alltoall(send, recv)


class Mpi4pyYieldImpl(Mpi4pyImpl):
    """mpi4py on MPICH told to yield the CPU while it polls (what MPICH
    advises where ranks outnumber cores)."""

    name = "mpi4py-yield"
    env = {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"}


IMPLS: dict[str, type[Impl]] = {c.name: c for c in (GloocyImpl, TorchGlooImpl, Mpi4pyImpl,
                                                    Mpi4pyYieldImpl)}

# What the peers run over here (for the JSON's transport field).
_PEER_TRANSPORT = {"torch-gloo": "tcp", "mpi4py": "shm", "mpi4py-yield": "shm"}


def parse_spec(spec: str) -> Impl:
    """"gloocy:tcp", "torch-gloo", "mpi4py" -> an (uninitialised) adapter."""
    name, _, transport = spec.partition(":")
    if name not in IMPLS:
        raise ValueError(f"unknown implementation {name!r} "
                         f"(choose from {', '.join(IMPLS)})")
    if name == "gloocy":
        transport = transport or "tcp"
    elif transport:
        raise ValueError(f"{name} takes no transport (got {spec!r})")
    else:
        transport = _PEER_TRANSPORT[name]
    return IMPLS[name](transport)


def expand(specs: list[str]) -> list[str]:
    """Bare "gloocy" means each transport gloocy has; duplicates dropped."""
    out: list[str] = []
    for spec in specs:
        names = ([f"gloocy:{t}" for t in GloocyImpl.available_transports()]
                 if spec == "gloocy" else [spec])
        out += [s for s in names if s not in out]
    return out
