"""Alltoallw (a datatype per block, byte displacements), its nonblocking and
persistent forms, on real processes at sizes 1-4. Each rank sends rank j
j + 1 items of type KINDS[j % 3]; the test process writes, with NumPy and
explicit byte offsets, what every rank's receive buffer must hold."""

import numpy as np
import pytest

from gloocy import datatypes

SPACING = 96                # bytes between blocks in both buffers
ROOM = 4 * SPACING + 64


def kinds():
    """(datatype, element numpy type, byte offsets of an item's elements,
    extent) per kind: int32, float64, every other int32 of three."""
    vector = datatypes.INT32_T.Create_vector(2, 1, 2).Commit()
    return [(datatypes.INT32_T, np.int32, [0], 4),
            (datatypes.DOUBLE, np.float64, [0], 8),
            (vector, np.int32, [0, 8], 12)]


def value(src, dst, k):
    return src * 1000 + dst * 10 + k


def layout(buf, kind, count, start, values):
    """Write `values` (one per element) into uint8 `buf` as `kind` would."""
    _, np_type, offsets, extent = kind
    size = np.dtype(np_type).itemsize
    at = 0
    for item in range(count):
        for off in offsets:
            pos = start + item * extent + off
            buf[pos:pos + size] = np.array([values[at]], np_type).view(np.uint8)
            at += 1


def send_buffer(rank, size):
    buf = np.zeros(ROOM, np.uint8)
    every = kinds()
    for j in range(size):
        kind = every[j % 3]
        n = (j + 1) * len(kind[2])
        layout(buf, kind, j + 1, SPACING * j, [value(rank, j, k) for k in range(n)])
    return buf


def expected(rank, size):
    buf = np.zeros(ROOM, np.uint8)
    kind = kinds()[rank % 3]
    for i in range(size):
        n = (rank + 1) * len(kind[2])
        layout(buf, kind, rank + 1, SPACING * i, [value(i, rank, k) for k in range(n)])
    return buf


def r_alltoallw(comm, form):
    size, rank = comm.size, comm.rank
    every = kinds()
    send = send_buffer(rank, size)
    recv = np.zeros(ROOM, np.uint8)
    sendspec = [send, ([j + 1 for j in range(size)], [SPACING * j for j in range(size)]),
                [every[j % 3][0] for j in range(size)]]
    recvspec = [recv, [rank + 1] * size, [SPACING * i for i in range(size)],
                [every[rank % 3][0]] * size]
    if form == "blocking":
        comm.Alltoallw(sendspec, recvspec)
    elif form == "nonblocking":
        comm.Ialltoallw(sendspec, recvspec).Wait()
    else:
        request = comm.Alltoallw_init(sendspec, recvspec)
        for _ in range(2):              # a second Start moves the same data
            recv[:] = 0
            request.Start()
            request.Wait()
        request.Free()
    return recv


@pytest.mark.parametrize("form", ["blocking", "nonblocking", "persistent"])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_alltoallw_against_numpy(world, size, form):
    results = world(size).run(r_alltoallw, form)
    for rank, got in enumerate(results):
        np.testing.assert_array_equal(got, expected(rank, size), err_msg=f"rank {rank}")


def r_bad(comm):
    out = []
    for spec in ([np.zeros(8, np.uint8), [1] * comm.size, [0] * comm.size,
                  [datatypes.INT32_T]],                                   # too few types
                 [np.zeros(8, np.uint8), [4] * comm.size, [0] * comm.size,
                  [datatypes.DOUBLE] * comm.size]):                       # past the end
        try:
            comm.Alltoallw(spec, spec)
        except ValueError as e:
            out.append(str(e))
    return out


def test_alltoallw_bad_specs_name_the_argument(world):
    for msgs in world(2).run(r_bad):
        assert len(msgs) == 2
        assert all("recvbuf" in m for m in msgs), msgs
