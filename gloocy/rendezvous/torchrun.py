"""Meeting under torchrun: its agent's store tells where gloocy's store is.

torchrun's agent serves torch's own TCPStore at MASTER_ADDR:MASTER_PORT.
Rank 0 serves gloocy's store on a port the kernel picks and leaves that
store's URL in the agent's store; the other ranks read it there. (Any
guessed port, e.g. MASTER_PORT + 1, may already be held by some other
socket on that host, even one in TIME_WAIT.) Only this one key goes
through torch, which torchrun guarantees is installed.
"""

from __future__ import annotations

import collections
import datetime

from ..errors import RendezvousError
from .address import advertised_address
from .store import hostport

__all__ = ["AgentStore", "meeting_point"]

# init() may build the world more than once in a process; every rank does
# so equally often, so the n-th world of each rank uses the n-th key.
_worlds: collections.Counter = collections.Counter()


class AgentStore:
    """A client of torchrun's agent store, for the one key gloocy needs."""

    def __init__(self, address: str, job: str, rank: int, timeout: float) -> None:
        host, port = _split(address)
        try:
            import torch.distributed as dist
        except ImportError:
            raise RendezvousError(
                f"torchrun's variables are set but torch cannot be imported to "
                f"reach its agent's store at {address}; set GLOOCY_STORE") from None
        self.address, self.timeout = address, timeout
        self.key = f"gloocy/{job}/{_worlds[job, rank]}/store"
        _worlds[job, rank] += 1
        try:
            self._store = dist.TCPStore(
                host, port, is_master=False, wait_for_workers=False,
                timeout=datetime.timedelta(seconds=timeout))
        except (RuntimeError, ValueError) as e:
            raise RendezvousError(
                f"torchrun's agent store at {address} is unreachable: {e}") from None

    def publish(self, url: str) -> None:
        self._store.set(self.key, url)

    def lookup(self) -> str:
        try:
            return self._store.get(self.key).decode()
        except RuntimeError as e:       # torch's DistStoreError on a timeout
            raise RendezvousError(
                f"rank 0 did not publish gloocy's store in torchrun's agent "
                f"store at {self.address} within {self.timeout:g} s: {e}") from None


def meeting_point(address: str, rank: int, job: str, timeout: float,
                  host: str | None = None):
    """(store URL, announce) for gloocy.connect(): rank 0 serves on a free
    port of its own address and announces the URL; the others look it up."""
    agent = AgentStore(address, job, rank, timeout)
    if rank != 0:
        return agent.lookup(), None
    here = host or advertised_address(_split(address)[0])
    return "tcp://" + hostport(here, 0), agent.publish


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)
