"""Split_type's MPI-4 split types on one host (every rank shares memory):
closed forms of which ranks get a communicator and of what size."""

import pytest

from gloocy.constants import (COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED,
                              COMM_TYPE_RESOURCE_GUIDED, COMM_TYPE_SHARED,
                              UNDEFINED)
from gloocy.info import Info


def r_split_types(comm):
    out = []
    cases = [(COMM_TYPE_SHARED, None), (COMM_TYPE_HW_GUIDED, "mpi_shared_memory"),
             (COMM_TYPE_RESOURCE_GUIDED, "mpi_shared_memory"),
             (COMM_TYPE_HW_GUIDED, "no-such-resource"), (COMM_TYPE_HW_GUIDED, None),
             (COMM_TYPE_HW_UNGUIDED, None)]
    for split_type, resource in cases:
        info = Info.Create()
        if resource:
            info.Set("mpi_hw_resource_type", resource)
        # the last rank opts out
        mine = UNDEFINED if comm.rank == comm.size - 1 else split_type
        new = comm.Split_type(mine, key=-comm.rank, info=info)
        out.append((new.Get_size(), new.Get_rank()) if new else None)
        if new:
            new.Free()
    try:
        comm.Split_type(99)
    except Exception as e:
        out.append(type(e).__name__ + ": " + str(e))
    return out


@pytest.mark.parametrize("size", [1, 3])
def test_split_types_on_one_host(world, size):
    for rank, got in enumerate(world(size).run(r_split_types)):
        members = size - 1                      # all but the last
        shared = None if rank == size - 1 else (members, members - 1 - rank)
        assert got[:6] == [shared, shared, shared, None, None, None], rank
        assert "split_type: 99" in got[6]


def r_intercomm_split_types(comm, a):
    """Split_type on an intercommunicator between group a and the rest:
    (local size, local rank, remote size) of each new one, or None."""
    mine = a if comm.rank in a else [r for r in range(comm.size) if r not in a]
    theirs = [r for r in range(comm.size) if r not in mine]
    local = comm.Split(0 if comm.rank in a else 1, mine.index(comm.rank))
    ic = local.Create_intercomm(0, comm, theirs[0])
    out = []
    cases = [(COMM_TYPE_SHARED, None), (COMM_TYPE_HW_GUIDED, "mpi_shared_memory"),
             (COMM_TYPE_RESOURCE_GUIDED, "mpi_shared_memory"),
             (COMM_TYPE_HW_GUIDED, "no-such-resource"), (COMM_TYPE_HW_GUIDED, None),
             (COMM_TYPE_HW_UNGUIDED, None), (UNDEFINED, None)]
    for split_type, resource in cases:
        info = Info.Create()
        if resource:
            info.Set("mpi_hw_resource_type", resource)
        # the first world rank opts out
        mine_type = UNDEFINED if comm.rank == 0 else split_type
        new = ic.Split_type(mine_type, key=-ic.rank, info=info)
        out.append((new.Get_size(), new.Get_rank(), new.Get_remote_size(),
                    new.allgather(comm.rank)) if new else None)
        if new:
            new.Free()
    try:
        ic.Split_type(99)
    except Exception as e:
        out.append(type(e).__name__ + ": " + str(e))
    ic.Free()
    local.Free()
    return out


@pytest.mark.parametrize("size,a", [(3, [0]), (3, [0, 1]), (4, [0, 2]), (4, [1, 2, 3])])
def test_intercomm_split_types_on_one_host(world, size, a):
    b = [r for r in range(size) if r not in a]
    for p, got in enumerate(world(size).run(r_intercomm_split_types, a)):
        mine, theirs = (a, b) if p in a else (b, a)
        # rank 0 opts out; the rest of each group is ranked by descending
        # local rank; a group left empty leaves the other with COMM_NULL
        ours = [q for q in mine if q != 0][::-1]
        other = [q for q in theirs if q != 0][::-1]
        shared = (None if p == 0 or not other
                  else (len(ours), ours.index(p), len(other), other))
        assert got[:7] == [shared, shared, shared, None, None, None, None], p
        assert "split_type: 99" in got[7]
