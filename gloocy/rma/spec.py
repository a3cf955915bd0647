"""What an RMA call moves, parsed as mpi4py parses it: the origin (and
result, compare) buffer specifications through gloocy's message layer
(gloocy.bufspec), and the target specification

    None | disp | [disp] | [disp, count] | [disp, count, datatype]

(a list or a tuple; what is left out is the origin's count and datatype,
disp 0). Everything is checked here, before any byte is sent: argument
errors are ValueError/TypeError or MPI.Exception (ArgumentError) naming
the argument.

A target is described to the target process by (disp, count, datatype):
gloocy's datatypes pickle with their layout, so a derived target datatype
means the same thing there.
"""

import operator

from gloocy import bufspec
from gloocy.constants import PROC_NULL
from gloocy.datatypes import BYTE, Datatype
from gloocy.errors import (ERR_DISP, ERR_OP, ERR_RMA_RANGE, ERR_TYPE,
                           ArgumentError)
from gloocy.ops import NO_OP, REPLACE, Op

__all__ = ["Access", "access", "single", "accumulate_op", "check_range"]


class Access:
    """One RMA call's origin message and target (disp, count, datatype)."""

    __slots__ = ("origin", "disp", "count", "datatype")

    def __init__(self, origin, disp, count, datatype):
        self.origin = origin              # a bufspec.Message, None for PROC_NULL
        self.disp, self.count, self.datatype = disp, count, datatype

    @property
    def target(self):
        return self.disp, self.count, self.datatype


def _index(value, what):
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"target: {what} must be an integer, got {value!r}") from None


def _proc_null_type(origin):
    """mpi4py's datatype of a PROC_NULL origin: the spec's last item when it
    is a datatype, else BYTE (the buffer itself is not looked at)."""
    if isinstance(origin, (list, tuple)) and origin and isinstance(origin[-1], Datatype):
        return origin[-1]
    return BYTE


def access(origin, rank, target, *, readonly, name="origin"):
    """The Access of a Put/Get/Accumulate: `readonly` for an origin that is
    only read (Put, Accumulate)."""
    if rank == PROC_NULL:
        message, count, datatype = None, 0, _proc_null_type(origin)
    else:
        message = bufspec.message(origin, name=name, readonly=readonly)
        count, datatype = message.count, message.datatype
    disp = 0
    if target is None:
        pass
    elif isinstance(target, (list, tuple)):
        if len(target) > 3:
            raise ValueError("target: expected [disp, count, datatype] (3 items "
                             f"at most), got {len(target)} items")
        if len(target) >= 1:
            disp = _index(target[0], "disp")
        if len(target) >= 2:
            count = _index(target[1], "count")
        if len(target) >= 3:
            datatype = bufspec._datatype(target[2], "target")
            if datatype is None or not datatype:
                raise ArgumentError("target: the datatype is DATATYPE_NULL", ERR_TYPE)
    else:
        try:
            disp = operator.index(target)
        except TypeError:
            raise ValueError("target: expected an integer displacement or "
                             f"[disp, count, datatype], got {target!r}") from None
    if rank == PROC_NULL:
        return Access(None, disp, count, datatype)
    if count < 0:
        raise ValueError(f"target: negative count {count}")
    if disp < 0:
        raise ArgumentError(f"target: negative displacement {disp}", ERR_DISP)
    result = Access(message, disp, count, datatype)
    _check_signature(result)
    return result


def _check_signature(acc):
    """The origin's bytes must be the target's (MPI: matching type
    signatures)."""
    have = acc.origin.nbytes
    want = acc.count * acc.datatype.size
    if have != want:
        raise ArgumentError(f"target: {acc.count} items of {acc.datatype!r} are "
                            f"{want} bytes but the origin has {have}", ERR_TYPE)


def _element(datatype):
    """The predefined datatype a datatype is built from."""
    return datatype._h.elem


def same_elements(acc, what="target"):
    """Accumulate's rule: origin and target are built from one predefined
    datatype (LONG and INT64_T are two, as in MPICH)."""
    if _element(acc.origin.datatype) is not _element(acc.datatype):
        raise ArgumentError(f"{what}: the origin's elements are "
                            f"{acc.origin.datatype!r} but the target's are "
                            f"{acc.datatype!r}: accumulate needs one element "
                            "type", ERR_TYPE)


def result_message(result, rank, acc, name="result"):
    """The result buffer of Get_accumulate: as many elements as the target."""
    if rank == PROC_NULL:
        return None
    message = bufspec.message(result, name=name, readonly=False)
    want = acc.count * acc.datatype.size
    if message.nbytes != want:
        raise ArgumentError(f"{name}: {message.nbytes} bytes, but the target's "
                            f"{acc.count} items of {acc.datatype!r} are {want}",
                            ERR_TYPE)
    return message


def single(spec, rank, name, readonly):
    """One element (Fetch_and_op, Compare_and_swap): (Message, datatype)."""
    message = bufspec.message(spec, name=name, readonly=readonly)
    if message.count != 1:
        raise ValueError(f"{name}: expecting a single element, got {message.count}")
    return message


def accumulate_op(op):
    """A predefined Op (MPI allows no other in accumulate operations)."""
    if not isinstance(op, Op):
        raise TypeError(f"op: expected an Op, got {op!r}")
    if not op.is_predefined or not op:
        raise ArgumentError(f"op: {op.name or 'OP_NULL'} is not a predefined "
                            "operation (RMA accumulates take SUM, MAX..., "
                            "REPLACE, NO_OP)", ERR_OP)
    return op


def check_op_type(op, dtype):
    """TypeError now for a meaningless (op, element type) pair."""
    if op == REPLACE or op == NO_OP:
        return
    import numpy as np
    scratch = np.zeros(1, dtype)
    op.fold(scratch.copy(), scratch)


def check_range(disp, count, datatype, size, unit, rank):
    """The bytes that `count` items of `datatype` at `disp` touch must lie
    in rank's window of `size` bytes (disp counted in `unit`s)."""
    start = disp * unit
    first, end = datatype.span(count)
    if count and (start + first < 0 or start + end > size):
        raise ArgumentError(f"target: {count} items of {datatype!r} at displacement "
                            f"{disp} (x{unit} bytes) need bytes {start + first}.."
                            f"{start + end} of rank {rank}'s window, which has "
                            f"{size}", ERR_RMA_RANGE)
    return start
