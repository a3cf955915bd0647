"""MPI-IO in one process (gloocy.MPI's COMM_SELF): file views against the
bytes a datatype's typemap names, as packing finds them (an independent
path: bufspec's gather, not the view's runs), data representations
against NumPy's byte orders, and the error classes of bad calls."""

import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gloocy import MPI
from gloocy.mpiio import access as file_access
from gloocy.mpiio.view import View

RW = MPI.MODE_RDWR | MPI.MODE_CREATE


def filetypes():
    """name -> a committed filetype (made fresh: the caller frees it)."""
    i4 = MPI.INT
    return {
        "vector": lambda: i4.Create_vector(3, 2, 5),
        "hvector": lambda: MPI.SHORT.Create_hvector(4, 1, 6),
        "indexed": lambda: i4.Create_indexed([2, 1, 3], [0, 4, 7]),
        "struct with gaps": lambda: MPI.Datatype.Create_struct(
            [1, 2], [0, 12], [MPI.DOUBLE, i4]),
        "subarray C": lambda: i4.Create_subarray([4, 6], [2, 3], [1, 2]),
        "subarray F": lambda: i4.Create_subarray([4, 6], [2, 3], [1, 2],
                                                 order=MPI.ORDER_F),
        "resized with lb": lambda: i4.Create_indexed([1, 1], [1, 3]).Create_resized(4, 24),
        "darray cyclic": lambda: i4.Create_darray(
            3, 1, [9, 2], [MPI.DISTRIBUTE_CYCLIC, MPI.DISTRIBUTE_NONE],
            [2, MPI.DISTRIBUTE_DFLT_DARG], [3, 1]),
    }


def addresses(filetype):
    """The byte offsets (from the start of one copy) of the filetype's data
    bytes, in typemap order: packing a buffer whose bytes spell their own
    addresses, one byte plane at a time."""
    n = filetype.Get_extent()[1]        # one item (the types here lie within it)
    where = np.zeros(filetype.Get_size(), np.int64)
    for plane in range(3):
        spelled = ((np.arange(n) >> (8 * plane)) & 255).astype(np.uint8)
        out = np.zeros(filetype.Get_size(), np.uint8)
        filetype.Pack(spelled, out, 0, MPI.COMM_SELF)
        where |= out.astype(np.int64) << (8 * plane)
    return where


def tiled(filetype, disp, count):
    """File offsets of the first `count` data bytes of the view."""
    one = addresses(filetype)
    copies = -(-count // one.size)
    extent = filetype.Get_extent()[1]
    return (disp + (np.arange(copies)[:, None] * extent + one).ravel())[:count]


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "data")


def pattern(n):
    return ((np.arange(n) * 7 + 3) % 251).astype(np.uint8)


@pytest.mark.parametrize("chunk", [None, 3], ids=["one call", "3-byte calls"])
@pytest.mark.parametrize("name", list(filetypes()))
def test_reads_and_writes_touch_the_typemap_bytes(name, chunk, path, monkeypatch):
    if chunk:                   # every pread/pwrite loop goes round
        monkeypatch.setattr(file_access, "_CHUNK", chunk)
    ft = filetypes()[name]().Commit()
    disp, count = 12, 3 * ft.Get_size() + 4          # three copies and a bit
    where = tiled(ft, disp, count)
    # a read gets the view's bytes of a known file
    content = pattern(int(where.max()) + 64)
    content.tofile(path)
    fh = MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_RDWR)
    fh.Set_view(disp, MPI.BYTE, ft)
    got = np.zeros(count, np.uint8)
    status = MPI.Status()
    fh.Read_all(got, status)
    assert status.Get_count() == count
    assert np.array_equal(got, content[where])
    assert fh.Get_position() == count
    assert [fh.Get_byte_offset(k) for k in (0, 5, count - 1)] == where[[0, 5, -1]].tolist()
    # a write puts bytes there and nowhere else
    fh.Set_size(0)
    data = pattern(count + 9)[9:]
    fh.Write_at(0, data)
    fh.Close()
    ft.Free()
    on_disk = np.fromfile(path, np.uint8)
    want = np.zeros(int(where.max()) + 1, np.uint8)
    want[where] = data
    assert np.array_equal(on_disk, want)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(list(filetypes())), disp=st.integers(0, 40),
       pos=st.integers(0, 300), n=st.integers(0, 300))
def test_segments_are_the_view_bytes_in_order(name, disp, pos, n):
    ft = filetypes()[name]().Commit()
    offs, lens = View(disp, MPI.BYTE, ft, "native").segments(pos, n)
    want = tiled(ft, disp, pos + n)[pos:]
    ft.Free()
    spelled = (np.concatenate([np.arange(o, o + k) for o, k in zip(offs, lens)])
               if offs.size else np.zeros(0, np.int64))
    assert np.array_equal(spelled, want)
    assert (lens > 0).all() and (offs[1:] > offs[:-1] + lens[:-1]).all()


def test_short_int_pairs_leave_their_padding_alone(path):
    pairs = np.zeros(3, np.dtype([("v", "<i2"), ("i", "<i4")], align=True))
    pairs["v"], pairs["i"] = [1, 2, 3], [10, 20, 30]
    fh = MPI.File.Open(MPI.COMM_SELF, path, RW | MPI.MODE_DELETE_ON_CLOSE)
    fh.Write([pairs, MPI.SHORT_INT])
    raw = np.fromfile(path, np.uint8)
    assert raw.size == 18                      # 6 bytes each, as MPI's size
    packed = np.frombuffer(raw.tobytes(), np.dtype([("v", "<i2"), ("i", "<i4")]))
    assert packed["v"].tolist() == [1, 2, 3] and packed["i"].tolist() == [10, 20, 30]
    back = np.zeros(3, pairs.dtype)
    fh.Read_at(0, [back, MPI.SHORT_INT])
    assert back.tolist() == pairs.tolist()
    fh.Close()
    assert not os.path.exists(path)


def test_external32_is_big_endian(path):
    fh = MPI.File.Open(MPI.COMM_SELF, path, RW)
    fh.Set_view(0, MPI.INT, MPI.INT, "external32")
    assert fh.Get_view()[3] == "external32"
    values = np.array([1, -2, 70000], np.int32)
    fh.Write(values)
    fh.Close()
    assert np.fromfile(path, ">i4").tolist() == values.tolist()
    fh = MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_RDONLY)
    fh.Set_view(0, MPI.INT, MPI.INT, "external32")
    back = np.zeros(3, np.int32)
    fh.Read(back)
    fh.Close()
    assert back.tolist() == values.tolist()


def test_pointers_seek_end_and_short_reads(path):
    np.arange(10, dtype=np.float64).tofile(path)
    fh = MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_RDWR | MPI.MODE_APPEND)
    assert fh.Get_position() == 80 and fh.Get_position_shared() == 80
    fh.Set_view(8, MPI.DOUBLE)
    fh.Seek(0, MPI.SEEK_END)
    assert fh.Get_position() == 9
    fh.Seek(-2, MPI.SEEK_CUR)
    out, status = np.full(4, -1.0), MPI.Status()
    fh.Read(out, status)
    assert status.Get_count(MPI.DOUBLE) == 2 and out.tolist() == [8, 9, -1, -1]
    assert fh.Get_position() == 9
    fh.Seek_shared(3)
    fh.Read_shared(out[:2])
    assert out[:2].tolist() == [4, 5] and fh.Get_position_shared() == 5
    fh.Iwrite_shared(np.array([-5.0])).Wait(status)
    assert status.Get_count(MPI.DOUBLE) == 1
    fh.Close()
    assert np.fromfile(path, np.float64)[6] == -5


def test_offsets_past_4_gib(path, monkeypatch):
    monkeypatch.setattr(file_access, "_CHUNK", 5)
    far = 5 * 2**30 + 3                     # a sparse file
    fh = MPI.File.Open(MPI.COMM_SELF, path, RW | MPI.MODE_DELETE_ON_CLOSE)
    data = np.arange(7, dtype=np.int16)
    fh.Write_at(far, data)
    assert fh.Get_size() == far + data.nbytes
    fh.Set_view(far - 2, MPI.SHORT)
    back, status = np.full(8, -1, np.int16), MPI.Status()
    fh.Read_at(1, back, status)
    assert status.Get_count(MPI.SHORT) == 7 and back.tolist() == data.tolist() + [-1]
    assert fh.Get_byte_offset(2**32) == far - 2 + 2**33
    fh.Close()


def code(call):
    with pytest.raises(MPI.Exception) as e:
        call()
    return e.value.Get_error_class()


def test_error_classes(path):
    assert code(lambda: MPI.File.Open(MPI.COMM_SELF, path)) == MPI.ERR_NO_SUCH_FILE
    assert code(lambda: MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_RDONLY | MPI.MODE_CREATE)) \
        == MPI.ERR_AMODE
    assert code(lambda: MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_CREATE)) == MPI.ERR_AMODE
    fh = MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_WRONLY | MPI.MODE_CREATE)
    assert code(lambda: MPI.File.Open(MPI.COMM_SELF, path, RW | MPI.MODE_EXCL)) \
        == MPI.ERR_FILE_EXISTS
    assert code(lambda: fh.Read(bytearray(4))) == MPI.ERR_ACCESS
    assert code(lambda: fh.Write_at(-1, b"x")) == MPI.ERR_ARG
    assert code(lambda: fh.Seek(-1)) == MPI.ERR_ARG
    uncommitted = MPI.INT.Create_vector(2, 1, 2)
    assert code(lambda: fh.Set_view(0, MPI.INT, uncommitted)) == MPI.ERR_TYPE
    uncommitted.Free()
    assert code(lambda: fh.Set_view(0, MPI.DOUBLE, MPI.INT)) == MPI.ERR_TYPE
    assert code(lambda: fh.Set_view(0, MPI.BYTE, MPI.BYTE, "no-such-rep")) \
        == MPI.ERR_UNSUPPORTED_DATAREP
    fh.Set_view(0, MPI.INT)
    assert code(lambda: fh.Write(b"abc")) == MPI.ERR_IO        # not whole etypes
    assert code(lambda: fh.Write_all_end(b"")) == MPI.ERR_IO   # no begin
    copy = MPI.File(fh)
    fh.Close()
    assert fh == MPI.FILE_NULL and copy != MPI.FILE_NULL
    assert code(lambda: copy.Get_size()) == MPI.ERR_FILE
    ro = MPI.File.Open(MPI.COMM_SELF, path, MPI.MODE_RDONLY)
    assert code(lambda: ro.Write(b"x")) == MPI.ERR_READ_ONLY
    assert code(lambda: ro.Set_size(0)) == MPI.ERR_READ_ONLY
    ro.Close()
    MPI.File.Delete(path)
    assert code(lambda: MPI.File.Delete(path)) == MPI.ERR_NO_SUCH_FILE


def test_register_datarep_names_once():
    MPI.Register_datarep("gloocy-test-native", None, None, lambda t: t.Get_extent()[1])
    assert code(lambda: MPI.Register_datarep(
        "gloocy-test-native", None, None, lambda t: 1)) == MPI.ERR_DUP_DATAREP
    assert code(lambda: MPI.Register_datarep(
        "native", None, None, lambda t: 1)) == MPI.ERR_DUP_DATAREP


def test_a_users_datarep_converts_with_its_functions(path):
    calls = []

    def swap(src, dst, datatype, count):
        calls.append((datatype, count))
        size = datatype.Get_size()
        a = np.frombuffer(src, np.uint8)[:count * size].reshape(count, size)
        np.frombuffer(dst, np.uint8)[:count * size] = a[:, ::-1].ravel()

    MPI.Register_datarep(
        "gloocy-test-swap",
        read_fn=lambda ubuf, t, count, fbuf, pos: swap(fbuf, ubuf, t, count),
        write_fn=lambda ubuf, t, count, fbuf, pos: swap(ubuf, fbuf, t, count),
        extent_fn=lambda t: t.Get_extent()[1])
    values = np.array([[1, 2], [-3, 70000]], np.int32)
    fh = MPI.File.Open(MPI.COMM_SELF, path, RW | MPI.MODE_DELETE_ON_CLOSE)
    fh.Set_view(4, MPI.INT, MPI.INT, "gloocy-test-swap")
    fh.Write(values)
    assert np.fromfile(path, ">i4").tolist() == [0, 1, 2, -3, 70000]
    back = np.zeros(2, np.int32)
    fh.Read_at(2, back)
    assert back.tolist() == [-3, 70000]
    assert calls == [(MPI.INT, 4), (MPI.INT, 2)]
    fh.Close()
