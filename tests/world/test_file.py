"""MPI-IO on real rank processes (world sizes 1-3): one file written by
every rank through views (subarray blocks, vector columns), the shared
file pointer (concurrent Write_shared, Write_ordered and Read_ordered) and
split collectives, checked against the bytes on disk as NumPy reads them
and against closed forms; a collective Open that fails fails on every
rank. Files live in the test's tmp_path (the ranks run on this host);
nothing is left there but what the test itself reads."""

import os

import numpy as np
import pytest

from gloocy import MPI
from gloocy.communicator import Intracomm

SIZES = [1, 2, 3]
ROWS, COLS = 3, 4
RECORDS, RECORD = 20, 16          # Write_shared: records per rank, int32s per record


def global_array(size):
    """The ROWS*size x COLS int32 array the ranks write, rank r's rows
    holding 1000 r + their index."""
    return np.concatenate([np.arange(ROWS * COLS, dtype=np.int32).reshape(ROWS, COLS)
                           + 1000 * r for r in range(size)])


# -- rank-side functions --------------------------------------------------------------

def r_blocks_and_columns(comm, path):
    comm = Intracomm(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    fh = MPI.File.Open(comm, path, MPI.MODE_RDWR | MPI.MODE_CREATE)
    rows = MPI.INT.Create_subarray([ROWS * size, COLS], [ROWS, COLS], [ROWS * rank, 0]).Commit()
    fh.Set_view(0, MPI.INT, rows)
    status = MPI.Status()
    fh.Write_all(global_array(size)[ROWS * rank:ROWS * (rank + 1)], status)
    written = status.Get_count(MPI.INT)
    rows.Free()
    fh.Sync()
    comm.Barrier()
    column = MPI.INT.Create_vector(ROWS * size, 1, COLS).Commit()
    fh.Set_view(4 * (rank % COLS), MPI.INT, column)
    column.Free()                 # the view keeps its own
    got = np.full(ROWS * size, -1, np.int32)
    fh.Read_at_all_begin(0, got)
    fh.Read_at_all_end(got, status)
    fh.Close()
    return written, status.Get_count(MPI.INT), got.tolist()


def r_shared_records(comm, path):
    """Every rank appends RECORDS records at the shared pointer at once."""
    comm = Intracomm(comm)
    rank = comm.Get_rank()
    fh = MPI.File.Open(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE)
    fh.Set_view(0, MPI.INT)
    for i in range(RECORDS):
        record = np.full(RECORD, 1000 * rank + i, np.int32)
        if i % 2:
            fh.Write_shared(record)
        else:
            fh.Iwrite_shared(record).Wait()
    comm.Barrier()
    position = fh.Get_position_shared()
    fh.Close()
    return position


def r_ordered(comm, path):
    """Ordered writes of rank + 1 doubles, twice, then the same read back in
    order; the shared pointer after each step."""
    comm = Intracomm(comm)
    rank = comm.Get_rank()
    fh = MPI.File.Open(comm, path, MPI.MODE_RDWR | MPI.MODE_CREATE)
    fh.Set_view(16, MPI.DOUBLE)
    positions = []
    for step in range(2):
        fh.Write_ordered(np.full(rank + 1, 10.0 * step + rank, np.float64))
        positions.append(fh.Get_position_shared())
    fh.Write_ordered_begin(np.array([-1.0 - rank]))
    fh.Write_ordered_end(np.array([-1.0 - rank]))
    positions.append(fh.Get_position_shared())
    fh.Seek_shared(0)
    back = []
    for step in range(2):
        out = np.zeros(rank + 1)
        fh.Read_ordered(out)
        back.append(out.tolist())
    fh.Close()
    return positions, back


def r_ordered_with_a_bad_buffer(comm, path):
    """Rank 1 passes 3 bytes where whole ints are needed: every rank's
    Write_ordered fails at once; the next one works."""
    comm = Intracomm(comm)
    rank = comm.Get_rank()
    fh = MPI.File.Open(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE)
    fh.Set_view(0, MPI.INT)
    bad = b"abc" if rank == 1 else np.full(2, rank, np.int32)
    try:
        fh.Write_ordered(bad)
        first = None
    except MPI.Exception as e:
        first = (e.Get_error_class(), "rank 1" in str(e) or rank == 1)
    fh.Write_ordered(np.full(1, 7 + rank, np.int32))
    fh.Close()
    return first


def r_atomic_strided_writes(comm, path):
    """In atomic mode every rank writes and reads the same strided region
    (one access = many pwrite calls) over and over: no read sees two
    ranks' data mixed; the reads that did are counted."""
    comm = Intracomm(comm)
    rank = comm.Get_rank()
    fh = MPI.File.Open(comm, path, MPI.MODE_RDWR | MPI.MODE_CREATE)
    strided = MPI.INT.Create_vector(64, 4, 8).Commit()
    fh.Set_view(0, MPI.INT, strided)
    strided.Free()
    fh.Set_atomicity(True)
    mixed = 0
    mine = np.full(4 * 64 * 4, rank, np.int32)      # four copies of the filetype
    got = np.empty_like(mine)
    for _ in range(25):
        fh.Write_at(0, mine)
        fh.Read_at(0, got)
        mixed += int((got != got[0]).any())
    fh.Close()
    return mixed


def r_open_excl(comm, path):
    comm = Intracomm(comm)
    try:
        MPI.File.Open(comm, path, MPI.MODE_WRONLY | MPI.MODE_CREATE | MPI.MODE_EXCL)
    except MPI.Exception as e:
        return e.Get_error_class()
    return None


def r_delete_on_close(comm, path):
    comm = Intracomm(comm)
    amode = MPI.MODE_RDWR | MPI.MODE_CREATE | MPI.MODE_DELETE_ON_CLOSE
    fh = MPI.File.Open(comm, path, amode)
    fh.Write_shared(np.array([comm.Get_rank()], np.int64))
    comm.Barrier()
    size = fh.Get_size()
    fh.Close()
    return size


# -- the tests --------------------------------------------------------------------------

@pytest.mark.parametrize("size", SIZES)
def test_subarray_blocks_then_vector_columns(world, size, tmp_path):
    path = str(tmp_path / "grid")
    results = world(size).run(r_blocks_and_columns, path)
    want = global_array(size)
    assert np.array_equal(np.fromfile(path, np.int32).reshape(want.shape), want)
    for rank, (written, read, column) in enumerate(results):
        assert (written, read) == (ROWS * COLS, ROWS * size)
        assert column == want[:, rank % COLS].tolist()
    assert os.listdir(tmp_path) == ["grid"]          # no side file left


@pytest.mark.parametrize("size", SIZES)
def test_concurrent_shared_pointer_writes_keep_every_record_whole(world, size, tmp_path):
    path = str(tmp_path / "records")
    positions = world(size).run(r_shared_records, path)
    assert positions == [size * RECORDS * RECORD] * size
    records = np.fromfile(path, np.int32).reshape(-1, RECORD)
    assert (records == records[:, :1]).all(), "a record was interleaved"
    assert sorted(records[:, 0].tolist()) == sorted(
        1000 * r + i for r in range(size) for i in range(RECORDS))
    assert os.listdir(tmp_path) == ["records"]


@pytest.mark.parametrize("size", SIZES)
def test_ordered_writes_and_reads_are_in_rank_order(world, size, tmp_path):
    path = str(tmp_path / "ordered")
    results = world(size).run(r_ordered, path)
    per_step = size * (size + 1) // 2
    on_disk = np.fromfile(path, np.float64)
    assert on_disk[:2].tolist() == [0, 0]                      # before disp
    want = [10.0 * step + r for step in range(2) for r in range(size)
            for _ in range(r + 1)] + [-1.0 - r for r in range(size)]
    assert on_disk[2:].tolist() == want
    for rank, (positions, back) in enumerate(results):
        assert positions == [per_step, 2 * per_step, 2 * per_step + size]
        assert back == [[10.0 * step + rank] * (rank + 1) for step in range(2)]


@pytest.mark.parametrize("size", [2, 3])
def test_an_ordered_call_failing_on_one_rank_fails_on_all(world, size, tmp_path):
    path = str(tmp_path / "ordered")
    assert world(size).run(r_ordered_with_a_bad_buffer, path, timeout=30) == \
        [(MPI.ERR_IO, True)] * size
    assert np.fromfile(path, np.int32).tolist() == [7 + r for r in range(size)]


@pytest.mark.parametrize("size", [2, 3])
def test_atomic_mode_keeps_strided_accesses_whole(world, size, tmp_path):
    path = str(tmp_path / "atomic")
    assert world(size).run(r_atomic_strided_writes, path) == [0] * size
    # the view's ints: 4 copies (extent 63 * 8 + 4 ints) of 64 blocks of 4
    where = (np.arange(4)[:, None, None] * (63 * 8 + 4)
             + np.arange(64)[None, :, None] * 8 + np.arange(4)).ravel()
    region = np.fromfile(path, np.int32)[where]
    assert (region == region[0]).all() and 0 <= region[0] < size


@pytest.mark.parametrize("size", SIZES)
def test_open_excl_fails_on_every_rank(world, size, tmp_path):
    path = tmp_path / "exists"
    path.write_bytes(b"x")
    assert world(size).run(r_open_excl, str(path)) == [MPI.ERR_FILE_EXISTS] * size
    assert path.read_bytes() == b"x"


@pytest.mark.parametrize("size", SIZES)
def test_delete_on_close_leaves_nothing(world, size, tmp_path):
    sizes = world(size).run(r_delete_on_close, str(tmp_path / "scratch"))
    assert sizes == [8 * size] * size
    assert os.listdir(tmp_path) == []
