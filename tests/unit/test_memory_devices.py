"""MPI.buffer over memory a producer calls a device's (DLPack device other
than the CPU, a CUDA array interface), and CUDA interfaces of opaque items;
mpi4py on MPICH is the oracle where it can be run in this process."""

import warnings

import numpy as np
import pytest

from gloocy import MPI as GM

try:
    from mpi4py import MPI
except ImportError:
    MPI = None


class CudaInterface:
    """A __cuda_array_interface__ over host memory (as numba can export)."""

    def __init__(self, array, **changes):
        self.array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str,
            "data": (array.ctypes.data, False), "strides": None,
            "version": 3, **changes}


class DLPackOnly:
    """DLPack and nothing else, on the device given."""

    def __init__(self, array, device):
        self.array, self.device = array, device

    def __dlpack__(self, **kwargs):
        kwargs.pop("stream", None)      # (host memory: no stream)
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.device


def _host_access(buf):
    """Which of the ways to reach a buffer's bytes from Python work."""
    out = []
    for name, touch in (("cast", lambda: buf.cast("i")),
                        ("tobytes", lambda: buf.tobytes()),
                        ("item", lambda: buf[0]),
                        ("memoryview", lambda: memoryview(buf))):
        try:
            touch()
            out.append(name)
        except BufferError:
            pass
    return out


@pytest.mark.parametrize("make", [
    lambda M, a: M.buffer.frombuffer(CudaInterface(a)),
    lambda M, a: M.buffer.frombuffer(DLPackOnly(a, (2, 0))),
    lambda M, a: M.buffer.frombuffer(DLPackOnly(a, (1, 0))),
    lambda M, a: M.buffer.frombuffer(a),
])
def test_device_memory_is_not_readable_through_a_buffer(make):
    a = np.arange(4, dtype=np.int32)
    ours = make(GM, a)
    assert (ours.address, ours.nbytes) == (a.ctypes.data, a.nbytes)
    if MPI is None:
        pytest.skip("no oracle: mpi4py")
    assert _host_access(ours) == _host_access(make(MPI, a))


def test_opaque_cuda_items_travel_as_bytes_and_descr_warns():
    data = np.arange(15.0)
    into = np.zeros(15)
    target = CudaInterface(into, shape=(5,), typestr="|V24",
                           descr=[("", "<f8")] * 3)
    with pytest.warns(RuntimeWarning, match="descr"):
        GM.COMM_SELF.Sendrecv(data, 0, 0, target, 0, 0)
    np.testing.assert_array_equal(into, data)
    with warnings.catch_warnings():     # a descr that says the typestr: quiet
        warnings.simplefilter("error")
        GM.COMM_SELF.Sendrecv(data, 0, 0, CudaInterface(
            into, descr=[("", into.dtype.str)]), 0, 0)
