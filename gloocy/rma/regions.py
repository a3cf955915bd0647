"""A window's memory at its own process, and what RMA operations do to it.

Every operation on one window's memory runs under that window's lock, so
each Put, Get, Accumulate, Get_accumulate, Fetch_and_op and
Compare_and_swap is applied whole, as one step: MPI's per-element
atomicity of the accumulate operations, and more.

The memory is one 1-D uint8 NumPy array (Create, Allocate,
Allocate_shared), or for a dynamic window the regions Attach gave, found
by absolute address. A target is (disp, count, datatype); its bytes start
at disp * disp_unit (dynamic windows: at address disp).
"""

import threading

import numpy as np

from gloocy.errors import ERR_RMA_ATTACH, ERR_RMA_RANGE, ArgumentError
from gloocy.ops import NO_OP, REPLACE

__all__ = ["Memory"]


class Memory:
    """The local memory of one window."""

    def __init__(self, array, unit, dynamic=False):
        self.array = _EMPTY if array is None else array   # uint8 array
        self.unit = unit                  # disp_unit
        self.dynamic = dynamic
        self.attached = {}                # dynamic: address -> uint8 array
        self.lock = threading.Lock()      # one operation at a time

    # -- dynamic windows -----------------------------------------------------

    def attach(self, address, array):
        with self.lock:
            for base, region in self.attached.items():
                if address < base + region.size and base < address + array.size:
                    raise ArgumentError(f"Attach: bytes {address:#x}..+{array.size} "
                                        f"overlap a region attached before",
                                        ERR_RMA_ATTACH)
            self.attached[address] = array

    def detach(self, address):
        with self.lock:
            if self.attached.pop(address, None) is None:
                raise ArgumentError(f"Detach: no region attached at {address:#x}",
                                    ERR_RMA_ATTACH)

    # -- where a target lies ---------------------------------------------------

    def _locate(self, disp, count, datatype):
        """(uint8 array, byte start) of a target, range checked."""
        first, end = datatype.span(count)
        if not self.dynamic:
            mem, start = self.array, disp * self.unit
        else:
            mem, start = _EMPTY, 0
            if count and end > first:
                for base, region in self.attached.items():
                    if base <= disp + first and disp + end <= base + region.size:
                        mem, start = region, disp - base
                        break
                else:
                    raise ArgumentError(f"target: bytes {disp + first:#x}..{disp + end:#x} "
                                        "lie in no region attached to this dynamic "
                                        "window", ERR_RMA_RANGE)
        if count and (start + first < 0 or start + end > mem.size):
            raise ArgumentError(f"target: {count} items of {datatype!r} at "
                                f"displacement {disp} need bytes {start + first}.."
                                f"{start + end} of a window of {mem.size}",
                                ERR_RMA_RANGE)
        return mem, start

    # -- the operations --------------------------------------------------------

    def put(self, disp, count, datatype, data):
        with self.lock:
            mem, start = self._locate(disp, count, datatype)
            if count:
                datatype.unpack(_as(data, datatype), mem, count, start)

    def get(self, disp, count, datatype):
        """A copy of the target's elements."""
        with self.lock:
            mem, start = self._locate(disp, count, datatype)
            if not count:
                return np.zeros(0, datatype.np_dtype)
            return datatype.pack(mem, count, start).copy()

    def accumulate(self, disp, count, datatype, op, data, fetch):
        """target = origin <op> target, elementwise; with `fetch`, a copy of
        the target's elements before."""
        with self.lock:
            mem, start = self._locate(disp, count, datatype)
            if not count:
                return np.zeros(0, datatype.np_dtype) if fetch else None
            target = datatype.pack(mem, count, start)
            old = target.copy() if fetch else None
            if op == NO_OP:
                return old
            data = _as(data, datatype)
            if op == REPLACE:
                target[...] = data
            else:
                op.fold(data, target, datatype)
            if not datatype.is_contiguous:
                datatype.unpack(target, mem, count, start)
            return old

    def compare_and_swap(self, disp, datatype, value, compare):
        """The target element before; replaced by `value` when its bytes
        were `compare`'s."""
        with self.lock:
            mem, start = self._locate(disp, 1, datatype)
            target = datatype.pack(mem, 1, start)
            old = target.copy()
            if old.tobytes() == _as(compare, datatype).tobytes():
                target[...] = _as(value, datatype)
                if not datatype.is_contiguous:
                    datatype.unpack(target, mem, 1, start)
            return old


_EMPTY = np.zeros(0, np.uint8)


def _as(data, datatype):
    """data's bytes as elements of the datatype's type (origin and target
    have the same bytes; their element types may differ in Put/Get)."""
    dtype = datatype.np_dtype
    if data.dtype != dtype:
        data = np.ascontiguousarray(data).view(np.uint8).view(dtype)
    return data
