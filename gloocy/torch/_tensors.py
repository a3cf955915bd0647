"""torch tensors as gloocy message buffers, and torch's reduce ops as
gloocy's.

A contiguous CPU tensor is passed by its own memory (``numpy()`` shares
it); bfloat16, which NumPy lacks, travels as its 16-bit pattern with
gloocy's BFLOAT16 datatype. A non-contiguous tensor (or a view with a
negative or conjugate bit) is staged through a contiguous copy that is
written back when the operation completes, as gloo does.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .. import _core, ops as _ops
from ..datatypes import BFLOAT16_T, from_typecode

__all__ = ["Staged", "spec", "reduce_op", "one_tensor", "RAW", "raw_entry"]

_Red = dist.ReduceOp.RedOpType
_OPS = {
    _Red.SUM: _ops.SUM, _Red.PRODUCT: _ops.PROD, _Red.MIN: _ops.MIN,
    _Red.MAX: _ops.MAX, _Red.BAND: _ops.BAND, _Red.BOR: _ops.BOR,
    _Red.BXOR: _ops.BXOR, _Red.AVG: _ops.AVG,
}
# Booleans have no arithmetic in MPI: sum and max are "any", product and
# min are "all" (what torch's own bool reductions give).
_BOOL_OPS = {_Red.SUM: _ops.LOR, _Red.MAX: _ops.LOR, _Red.BOR: _ops.LOR,
             _Red.PRODUCT: _ops.LAND, _Red.MIN: _ops.LAND, _Red.BAND: _ops.LAND,
             _Red.BXOR: _ops.LXOR}


def check_tensor(t, name):
    """A clear error for what gloocy cannot send (before any byte moves)."""
    if type(t) is torch.Tensor and t.is_cpu and t.layout is torch.strided:
        return      # the common case, in few attribute looks
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"gloocy: {name} must be a torch.Tensor, not {type(t).__name__}")
    if t.device.type != "cpu":
        # (not "cpu:gloocy,cuda:nccl": torch lets a ProcessGroup written in
        # Python, as this one is, serve every device of its group)
        raise RuntimeError(
            f"gloocy: {name} is on device {t.device}; the gloocy backend moves "
            f"CPU tensors only (it has no {t.device.type} transport): copy it "
            f"with .cpu(), or send it on a group of another backend "
            f"(dist.new_group(backend=...))")
    if t.layout != torch.strided:
        raise RuntimeError(f"gloocy: {name} has layout {t.layout}; only dense "
                           "(strided) tensors can be sent")


class Staged:
    """Contiguous stand-ins for tensors; the copies back happen in finish()."""

    __slots__ = ("_back",)

    def __init__(self):
        self._back = []

    def contiguous(self, t, name, output=True):
        check_tensor(t, name)
        if t.is_contiguous() and not (t.is_neg() or t.is_conj()):
            return t
        # (a view with a negative or conjugate bit has memory holding
        # other values than it shows: staged as those values)
        c = t.contiguous().resolve_neg().resolve_conj()
        if output:
            self._back.append((t, c))
        return c

    def finish(self):
        for t, c in self._back:
            t.copy_(c)
        self._back = []


_DATATYPES = {torch.bfloat16: BFLOAT16_T}     # torch dtype -> gloocy Datatype


def _array(t):
    if t.requires_grad:
        t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    dtype = t.dtype
    if dtype is torch.bfloat16:
        return t.view(torch.int16).numpy(), BFLOAT16_T
    try:
        a = t.numpy()
    except TypeError:
        raise TypeError(f"gloocy: tensors of dtype {dtype} have no gloocy "
                        "datatype") from None
    datatype = _DATATYPES.get(dtype)
    if datatype is None:
        datatype = _DATATYPES[dtype] = from_typecode(a.dtype.char)
    return a, datatype


def spec(t, counts=None):
    """The message of contiguous tensor `t` (its whole memory, or the
    (counts, displacements) given in elements)."""
    a, datatype = _array(t)
    if a.ndim != 1:
        a = a.reshape(-1)
    if counts is None:
        return [a, datatype]
    return [a, counts, datatype]


_RESOLVED = {}      # (RedOpType value, dtype) -> (gloocy op, None)


def reduce_op(op, dtype):
    """gloocy's op for torch's ReduceOp (or RedOpType) on `dtype`; PREMUL_SUM
    gives (SUM, factor) and the caller scales its input first."""
    kind = getattr(op, "op", op)
    key = (kind.value, dtype)       # an int hashes faster than the enum
    hit = _RESOLVED.get(key)
    if hit is not None:
        return hit
    code, factor = _resolve(op, kind, dtype)
    if factor is None:
        _RESOLVED[key] = (code, None)
    return code, factor


def _resolve(op, kind, dtype):
    if dtype == torch.bool:
        if kind not in _BOOL_OPS:
            raise ValueError(f"gloocy: ReduceOp.{kind.name} does not apply to bool tensors")
        return _BOOL_OPS[kind], None
    if kind == _Red.PREMUL_SUM:
        factor = getattr(op, "factor", None)
        if factor is None:
            raise ValueError("gloocy: ReduceOp.PREMUL_SUM without its factor")
        if not (dtype.is_floating_point or dtype.is_complex):
            raise ValueError(f"gloocy: ReduceOp.PREMUL_SUM needs a floating "
                             f"tensor, not {dtype}")
        return _ops.SUM, factor
    if kind == _Red.AVG and not (dtype.is_floating_point or dtype.is_complex):
        raise ValueError(f"gloocy: ReduceOp.AVG needs a floating tensor, not {dtype}")
    if kind in (_Red.BAND, _Red.BOR, _Red.BXOR) and (dtype.is_floating_point or dtype.is_complex):
        raise ValueError(f"gloocy: ReduceOp.{kind.name} needs an integer tensor, not {dtype}")
    try:
        return _OPS[kind], None
    except KeyError:
        raise ValueError(f"gloocy: ReduceOp {kind} is not supported") from None


# -- the raw path of allreduce ---------------------------------------------------
# A contiguous CPU tensor is reduced on its data_ptr(); what the call needs
# of its dtype and op is looked up once per (dtype, op). hash() of a torch
# ReduceOp is its RedOpType's value (its own code avoids the slower .op);
# checked here (PREMUL_SUM's, whatever its factor, must be none of the
# others'), and RAW stays empty (every call taking the general path) if a
# torch defines it otherwise.
RAW = {}        # (torch dtype, hash(ReduceOp)) -> (dtype code, itemsize, op code) or ()


def _hashes_are_kinds():
    premul = getattr(dist, "_make_nccl_premul_sum", None)
    kinds = {kind.value for kind in _OPS}
    return premul is not None and all(
        hash(dist.ReduceOp(kind)) == kind.value for kind in _OPS) and all(
        hash(premul(factor)) not in kinds for factor in (0.0, 0.5, 2.0))


_HASHES_ARE_KINDS = _hashes_are_kinds()


def raw_entry(dtype, op):
    """What the raw allreduce needs for `dtype` under `op`: (gloocy dtype
    code, itemsize, op code), or () when the general path must run (AVG,
    PREMUL_SUM, complex, a dtype or op gloocy refuses: that path scales,
    divides or names the error)."""
    key = (dtype, hash(op))
    entry = RAW.get(key)
    if entry is None:
        entry = ()
        if _HASHES_ARE_KINDS and not dtype.is_complex:
            try:
                code, factor = reduce_op(op, dtype)
            except ValueError:
                code, factor = None, None
            name = str(dtype).rpartition(".")[2]
            if code is not None and factor is None and code is not _ops.AVG \
                    and name in _core.DTYPE_CODES:
                entry = (_core.DTYPE_CODES[name], dtype.itemsize, code.code)
        RAW[key] = entry
    return entry


def one_tensor(tensors, name):
    """The single tensor of a CPU call's tensor list (gloocy has one device
    per rank; lists of several are a multi-GPU API)."""
    if len(tensors) != 1:
        raise ValueError(f"gloocy: {name} must hold exactly one tensor on CPU, "
                         f"got {len(tensors)}")
    return tensors[0]


def adjacent(tensors):
    """The one flat tensor the given tensors are consecutive slices of, or
    None (then they are gathered into or scattered from a staging copy)."""
    if not tensors:
        return None
    first = tensors[0]
    n = first.numel()
    if not all(t.is_contiguous() and t.dtype == first.dtype and t.numel() == n
               and t.device.type == "cpu" for t in tensors):
        return None
    step = n * first.element_size()
    base = first.data_ptr()
    storage = first.untyped_storage().data_ptr()
    if any(t.data_ptr() != base + i * step
           or t.untyped_storage().data_ptr() != storage
           for i, t in enumerate(tensors)):
        return None
    if n == 0:
        return None
    return first.detach().new_empty(0).set_(
        first.untyped_storage(), first.storage_offset(), (n * len(tensors),))
