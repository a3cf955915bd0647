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
        info = Info()
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
