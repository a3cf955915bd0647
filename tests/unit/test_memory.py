"""MPI.buffer (MPI.memory): views of other objects' bytes, fresh memory and
raw addresses, checked against the objects they view."""

import array

import numpy as np
import pytest

from gloocy import MPI


def test_views_write_through_to_the_object():
    obj = array.array("i", [1, 2, 3])
    buf = MPI.buffer.frombuffer(obj)
    assert (buf.address, buf.nbytes) == (obj.buffer_info()[0], 12)
    assert buf.obj is obj and not buf.readonly and len(buf) == 12
    buf[0:4] = array.array("i", [70])
    buf[-4] = 9
    assert obj.tolist() == [70, 2, 9]
    assert buf[4:8].tobytes() == array.array("i", [2]).tobytes()
    assert np.frombuffer(buf, np.int32).tolist() == [70, 2, 9]
    assert buf.cast("i", (3,)).tolist() == [70, 2, 9]


def test_read_only_views_refuse_writes():
    for buf in (MPI.buffer(b"abc"), MPI.buffer.frombuffer(b"abc", True),
                MPI.buffer(bytearray(b"abc")).toreadonly()):
        assert buf.readonly and memoryview(buf).readonly
        with pytest.raises(TypeError):
            buf[0] = 1
    with pytest.raises(BufferError):
        MPI.buffer.frombuffer(b"abc", readonly=False)
    with pytest.raises(BufferError):
        MPI.Attach_buffer(MPI.buffer(b"abc"))


def test_allocate_fromaddress_release():
    mem = MPI.Alloc_mem(32)
    assert type(mem) is MPI.buffer and mem.nbytes == 32 and mem.address
    raw = MPI.buffer.fromaddress(mem.address, 32)
    raw[3:6] = b"xyz"
    assert mem[3:6].tobytes() == b"xyz" and mem[3] == ord("x")
    MPI.Free_mem(mem)
    assert (mem.address, mem.nbytes, len(mem)) == (0, 0, 0)
    with pytest.raises(ValueError):
        MPI.buffer.fromaddress(0, 4)
    with pytest.raises(ValueError):
        MPI.buffer.allocate(-1)


def test_bad_indices_and_sizes():
    buf = MPI.buffer.allocate(8)
    with pytest.raises(IndexError):
        buf[8]
    with pytest.raises(IndexError):
        buf[::2]
    with pytest.raises(TypeError):
        buf[None]
    with pytest.raises(ValueError):
        buf[0:2] = b"abc"
    with pytest.raises(NotImplementedError):
        del buf[0]
    for bad in (None, 0, [], ()):
        with pytest.raises(TypeError):
            MPI.buffer(bad)
    assert MPI.memory is MPI.buffer


def test_sendrecv_with_a_bad_recvbuf_sends_nothing():
    """The receive buffer is checked before the send starts: the failed
    call leaves no message behind for the next receive to take."""
    comm = MPI.COMM_SELF
    with pytest.raises(TypeError):
        comm.Sendrecv(np.arange(3.0), 0, 5, object(), 0, 5)
    got = np.zeros(2, np.int32)
    comm.Sendrecv(np.array([7, 8], np.int32), 0, 5, got, 0, 5)
    assert got.tolist() == [7, 8]


def test_isendrecv_with_a_bad_buffer_leaves_nothing_behind():
    comm = MPI.COMM_SELF
    with pytest.raises(TypeError):
        comm.Isendrecv(np.arange(3.0), 0, 6, object(), 0, 6)
    with pytest.raises(TypeError):
        comm.Isendrecv(object(), 0, 6, np.zeros(3), 0, 6)
    got = np.zeros(2, np.int32)
    comm.Isendrecv(np.array([3, 4], np.int32), 0, 6, got, 0, 6).Wait()
    assert got.tolist() == [3, 4]
    assert not comm.Iprobe(0, 6)
