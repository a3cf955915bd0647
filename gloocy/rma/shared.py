"""The memory of an Allocate_shared window: one shared-memory segment that
every rank of the window maps, holding the ranks' parts end to end in rank
order (MPI's contiguous layout), so that Shared_query's buffers are loads
and stores away.

The segment is a file in /dev/shm made by the window's rank 0 and removed
as soon as every rank has mapped it: nothing is left behind, even if a
rank dies later. The mapping goes when the last view of it does.
"""

import mmap
import os
import secrets

import numpy as np

from gloocy.errors import ERR_RMA_SHARED, GloocyError
from gloocy.transport.shm import host_identity

__all__ = ["Segment"]

SHM_DIR = "/dev/shm"


class Segment:
    """A shared segment of sum(sizes) bytes; part r is rank r's memory.
    Collective over `comm` (a private duplicate of the window's)."""

    def __init__(self, comm, sizes):
        self.sizes = list(sizes)
        self.offsets = np.concatenate(([0], np.cumsum(self.sizes, dtype=np.int64)))
        hosts = comm.allgather(host_identity())
        if len(set(hosts)) > 1:
            where = ", ".join(f"rank {r} on {h.split('/')[0]}" for r, h in enumerate(hosts))
            raise GloocyError("Allocate_shared: the ranks of comm are not all on "
                              f"one host ({where}); split comm with "
                              "Split_type(COMM_TYPE_SHARED) first", ERR_RMA_SHARED)
        total = int(self.offsets[-1])
        self.array = np.zeros(0, np.uint8)
        if total:
            self.array = _map_shared(comm, total)

    def part(self, rank):
        """Rank's memory (a uint8 view of the segment)."""
        return self.array[self.offsets[rank]:self.offsets[rank + 1]]


def _map_shared(comm, total):
    """A uint8 array over `total` bytes every rank of comm maps."""
    path, error = None, None
    if comm.Get_rank() == 0:
        path = os.path.join(SHM_DIR, f"gloocy-win-{os.getpid()}-{secrets.token_hex(6)}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, total)
            finally:
                os.close(fd)
        except OSError as e:
            error = f"rank 0 could not make {path} ({total} bytes): {e}"
    path, error = comm.bcast((path, error), root=0)
    mapped = None
    if error is None:
        try:
            fd = os.open(path, os.O_RDWR)
            try:
                mapped = mmap.mmap(fd, total)
            finally:
                os.close(fd)
        except OSError as e:
            error = f"rank {comm.Get_rank()} could not map {path}: {e}"
    errors = comm.allgather(error)
    if comm.Get_rank() == 0 and path is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    failed = [e for e in errors if e]
    if failed:
        raise GloocyError("Allocate_shared: " + "; ".join(failed), ERR_RMA_SHARED)
    return np.frombuffer(mapped, np.uint8)
