"""Subclasses of Intercomm made the mpi4py way, on real processes: a
class whose __new__ calls ``MPI.Comm.__new__(cls, comm)`` mixed into
``MPI.Intercomm`` (as mpi4py's util.pkl5 defines its communicators), and
gloocy.util.pkl5's Intercomm. Each wraps an intercommunicator between the
lower and the upper half of the world and runs object collectives and
point-to-point across it; every value is a closed form of world ranks."""

import pytest

from gloocy import MPI
from gloocy.util import pkl5


class MyComm(MPI.Comm):
    """mpi4py's idiom: the base class allocates a subclass."""

    def __new__(cls, comm=None):
        return MPI.Comm.__new__(cls, comm)


class MyIntercomm(MyComm, MPI.Intercomm):
    pass


def r_across(comm, kind):
    low = comm.rank < comm.size // 2
    local = comm.Split(0 if low else 1, comm.rank)
    ic = local.Create_intercomm(0, comm, comm.size // 2 if low else 0)
    local.Free()
    wrapped = {"mpi4py idiom": MyIntercomm, "gloocy pkl5": pkl5.Intercomm}[kind](ic)
    try:
        assert isinstance(wrapped, MPI.Intercomm) and wrapped == ic
        group = 0 if low else 1
        got = {"sizes": (wrapped.Get_size(), wrapped.Get_remote_size()),
               "allgather": wrapped.allgather(("rank", comm.rank)),
               "alltoall": wrapped.alltoall(
                   [comm.rank * 100 + j for j in range(wrapped.Get_remote_size())])}
        # the lower group's rank 0 broadcasts to the upper group
        if low:
            root = MPI.ROOT if wrapped.Get_rank() == 0 else MPI.PROC_NULL
            got["bcast"] = wrapped.bcast({"from": comm.rank}, root=root)
        else:
            got["bcast"] = wrapped.bcast(None, root=0)
        # rank i of each group sends rank i of the other, when it exists
        peer = wrapped.Get_rank()
        if peer < wrapped.Get_remote_size():
            got["sendrecv"] = wrapped.sendrecv(("hi", comm.rank, group),
                                               dest=peer, source=peer)
        return got
    finally:
        wrapped.Free()              # (a second handle on ic: frees both)


@pytest.mark.parametrize("kind", ["mpi4py idiom", "gloocy pkl5"])
@pytest.mark.parametrize("size", [2, 3])
def test_intercomm_subclasses_work_across_groups(world, size, kind):
    results = world(size).run(r_across, kind)
    half = size // 2
    lower, upper = list(range(half)), list(range(half, size))
    for rank, got in enumerate(results):
        mine, theirs = (lower, upper) if rank < half else (upper, lower)
        me = mine.index(rank)
        assert got["sizes"] == (len(mine), len(theirs))
        assert got["allgather"] == [("rank", r) for r in theirs]
        assert got["alltoall"] == [r * 100 + me for r in theirs]
        assert got["bcast"] == (None if rank < half else {"from": 0})
        if me < len(theirs):
            assert got["sendrecv"] == ("hi", theirs[me], 1 if rank < half else 0)
