"""Idup on real processes: the new communicator is null until its request
completes, then has the same ranks, its own messages and the attributes the
keys' copy callbacks give."""

import numpy as np
import pytest


def r_idup(comm):
    key = type(comm).Create_keyval(copy_fn=lambda o, k, v: v + 1)
    comm.Set_attr(key, 10)
    new, request = comm.Idup()
    x = np.full(3, comm.rank + 1.0)
    comm.Allreduce(np.ones(1), np.empty(1))     # the parent works meanwhile
    request.Wait()
    y = np.empty(3)
    new.Allreduce(x, y)
    got = (new.Get_rank(), new.Get_size(), y.tolist(), new.Get_attr(key),
           new != comm)
    new.Free()
    type(comm).Free_keyval(key)
    return got


@pytest.mark.parametrize("size", [1, 2, 3])
def test_idup_gives_a_working_copy(world, size):
    total = size * (size + 1) / 2
    for rank, got in enumerate(world(size).run(r_idup)):
        assert got == (rank, size, [total] * 3, 11, True)
