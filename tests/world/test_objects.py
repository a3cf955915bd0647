"""The pickle layer (lower-case methods) on real processes, world sizes 1-5,
over shared memory, TCP and a mix: objects below, at and above the size that
fits one slot (so one collective or two), mixed across ranks in one call,
and a bcast whose NumPy arrays travel out of band.

Every object is a closed-form function of (rank, size, case), so the test
process builds what each rank must get and compares."""

import numpy as np
import pytest

import gloocy

TRANSPORTS = ("shm", "tcp", "mix")
SIZES = [1, 2, 3, 5]
# Pickled lengths around the one-slot limit (a str of n chars pickles to
# about n + 15 bytes), and far beyond it.
LENGTHS = [0, 200, 232, 233, 240, 250, 5000, 300_000]


def obj(rank, n, case):
    """Rank `rank`'s object of about n bytes in `case`."""
    return {"rank": rank, "case": case, "text": chr(97 + rank % 26) * n}


def r_allgather_lengths(comm, lengths):
    """allgather, allreduce (list concatenation), scan and exscan with rank
    r's object of length lengths[(r + i) % len] in call i: every call mixes
    ranks that fit one slot with ranks that do not."""
    out = []
    for i in range(len(lengths)):
        mine = obj(comm.rank, lengths[(comm.rank + i) % len(lengths)], i)
        out.append(comm.allgather(mine))
        out.append(comm.allreduce([mine]))
        out.append(comm.scan([mine]))
        out.append(comm.exscan([mine]))
    return out


def expect_allgather(rank, size, lengths):
    out = []
    for i in range(len(lengths)):
        every = [obj(r, lengths[(r + i) % len(lengths)], i) for r in range(size)]
        out += [every, every, every[:rank + 1],
                every[:rank] if rank else None]
    return out


@pytest.mark.parametrize("size", SIZES)
def test_allgather_family_around_one_slot(world, size):
    results = world(size).run(r_allgather_lengths, LENGTHS)
    for rank, got in enumerate(results):
        assert got == expect_allgather(rank, size, LENGTHS), rank


def r_bcast(comm, root, n):
    return comm.bcast(obj(comm.rank, n, "bcast") if comm.rank == root
                      else None, root)


@pytest.mark.parametrize("size", SIZES)
def test_bcast_around_one_slot(world, size):
    w = world(size)
    for n in LENGTHS:
        root = n % size
        assert w.run(r_bcast, root, n) == [obj(root, n, "bcast")] * size


def arrays(root):
    """An object holding large and small arrays (large ones go out of
    band), a non-contiguous view and plain values."""
    big = np.arange(200_000, dtype=np.float64) * (root + 1)
    return {"big": big, "ints": np.arange(7, dtype=np.int32) - root,
            "strided": big[::3], "f": np.asfortranarray(
                np.arange(12.0).reshape(3, 4) + root),
            "empty": np.zeros(0, np.int16), "list": [root, "x" * 300]}


def r_bcast_arrays(comm, root):
    mine = arrays(root) if comm.rank == root else None
    got = comm.bcast(mine, root)
    # Each rank owns what it got: writable, not the root's own arrays.
    writable = all(a.flags.writeable for a in got.values()
                   if isinstance(a, np.ndarray))
    shares = mine is not None and np.shares_memory(got["big"], mine["big"])
    got["big"][0] = -1                         # must not reach anyone else
    comm.Barrier()
    return got, writable, shares


@pytest.mark.parametrize("size", SIZES)
def test_bcast_numpy_out_of_band(world, size):
    root = size - 1
    for rank, (got, writable, shares) in enumerate(
            world(size).run(r_bcast_arrays, root)):
        want = arrays(root)
        want["big"] = want["big"].copy()       # "strided" is a view of it
        want["big"][0] = -1
        assert set(got) == set(want)
        for key, value in want.items():
            if isinstance(value, np.ndarray):
                assert got[key].dtype == value.dtype, key
                assert got[key].shape == value.shape, key
                np.testing.assert_array_equal(got[key], value, err_msg=key)
            else:
                assert got[key] == value, key
        assert writable and not shares, rank


def r_mismatch_after_big_bcast(comm):
    """A big-object bcast leaves nothing behind: the next calls agree."""
    got = comm.bcast(arrays(0) if comm.rank == 0 else None, 0)
    return comm.allreduce(comm.rank), float(got["big"].sum())


@pytest.mark.parametrize("size", [2, 3])
def test_world_is_clean_after_out_of_band_bcast(world, size):
    total = float(arrays(0)["big"].sum())
    assert world(size).run(r_mismatch_after_big_bcast) == [
        (size * (size - 1) // 2, total)] * size


def test_unpicklable_object_raises_before_anything_is_sent():
    comm = gloocy.init()           # a world of one
    with pytest.raises(Exception) as info:
        comm.bcast(lambda: 0)
    assert "pickle" in str(info.value).lower() or "lambda" in str(info.value)
    assert comm.bcast({"still": "works"}) == {"still": "works"}
