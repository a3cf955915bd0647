"""Who this process is and where its peers meet, read from the launcher's
environment: gloocy-run's own variables, torchrun's, Slurm's, or an MPI
launcher's (MPICH's hydra, Open MPI). `detect()` takes the first that
applies; gloocy.init() lets explicit arguments override it.
"""

from __future__ import annotations

import dataclasses
import os
import re

from .store import hostport

__all__ = ["Launch", "detect", "first_host"]

DEFAULT_PORT = 29500


@dataclasses.dataclass(frozen=True)
class Launch:
    source: str                     # "gloocy-run", "torchrun", "slurm", "mpi", "none"
    rank: int | None = None
    size: int | None = None
    local_rank: int | None = None
    local_size: int | None = None
    store: str | None = None        # store URL, None: not known from here
    host_store: bool = False        # rank 0 serves the TCP store at `store`
    job: str | None = None
    agent_store: str | None = None  # torchrun's store "host:port", see torchrun.py

    def describe(self):
        where = self.store or (f"published in torchrun's agent store at {self.agent_store}"
                               if self.agent_store else "no store")
        served = " (served by rank 0)" if self.host_store else ""
        return (f"rank {self.rank} of {self.size} from {self.source}, "
                f"store {where}{served}")


def _int(env, name):
    text = env.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"environment variable {name}={text!r} is not an "
                         "integer") from None


def _first(env, *names):
    for name in names:
        value = _int(env, name)
        if value is not None:
            return value
    return None


def first_host(nodelist):
    """The first host of a Slurm node list: "gpu[03-05,09],cpu1" -> "gpu03"."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        raise ValueError(f"cannot read the Slurm node list {nodelist!r}")
    prefix, ranges = match.groups()
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def detect(env=None) -> Launch:
    env = os.environ if env is None else env
    store = env.get("GLOOCY_STORE") or None
    if _int(env, "GLOOCY_RANK") is not None or _int(env, "GLOOCY_SIZE") is not None:
        return Launch(
            "gloocy-run" if env.get("GLOOCY_LAUNCHER") == "gloocy-run" else "GLOOCY_*",
            _int(env, "GLOOCY_RANK"), _int(env, "GLOOCY_SIZE"),
            _int(env, "GLOOCY_LOCAL_RANK"), _int(env, "GLOOCY_LOCAL_SIZE"),
            store, env.get("GLOOCY_LAUNCHER") != "gloocy-run",
            env.get("GLOOCY_JOB_ID"))
    if _int(env, "RANK") is not None and _int(env, "WORLD_SIZE") is not None:
        # torchrun (or any torch.distributed env:// launch). Under torchrun
        # its agent's own store holds MASTER_PORT: rank 0 serves ours on any
        # port and publishes it there.
        address = hostport(env.get("MASTER_ADDR", "127.0.0.1"),
                            _int(env, "MASTER_PORT") or DEFAULT_PORT)
        run_id = env.get("TORCHELASTIC_RUN_ID")
        served, agent = store is None, None
        if served and run_id:
            agent = address
        elif served:
            store = "tcp://" + address
        job = run_id and f"{run_id}.{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        return Launch(
            "torchrun", _int(env, "RANK"), _int(env, "WORLD_SIZE"),
            _int(env, "LOCAL_RANK"), _int(env, "LOCAL_WORLD_SIZE"),
            store, served, job, agent)
    if _int(env, "SLURM_PROCID") is not None and _int(env, "SLURM_NTASKS") is not None:
        job = f"slurm-{env.get('SLURM_JOB_ID', '0')}.{env.get('SLURM_STEP_ID', '0')}"
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_NODELIST")
        if store is None and nodes:
            # A port every task computes alike, different for each step.
            port = _int(env, "GLOOCY_STORE_PORT") or (
                20000 + ((_int(env, "SLURM_JOB_ID") or 0) * 7
                         + (_int(env, "SLURM_STEP_ID") or 0)) % 20000)
            store = "tcp://" + hostport(first_host(nodes), port)
            served = True
        else:
            served = False
        tasks = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or ""
        local_size = int(tasks.split("(")[0].split(",")[0]) if tasks[:1].isdigit() else None
        return Launch("slurm", _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS"),
                      _int(env, "SLURM_LOCALID"), local_size, store, served, job)
    rank = _first(env, "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")
    size = _first(env, "PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
    if rank is not None and size is not None:
        # An MPI launcher: it says who we are but not where rank 0 listens;
        # without GLOOCY_STORE, init() bootstraps through mpi4py.
        return Launch("mpi", rank, size,
                      _first(env, "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK"),
                      _first(env, "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"),
                      store, store is not None,
                      env.get("PMI_JOBID") or env.get("OMPI_MCA_ess_base_jobid"))
    return Launch("none", store=store)
