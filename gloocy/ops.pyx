# cython: language_level=3
"""Reduction operations.

Each op is usable two ways: its `code` selects the Cython kernel for buffer
reductions, and calling it combines two Python objects (for the lower-case,
pickle-based methods), as mpi4py's ops do. User ops are folded in Python,
in rank order. REPLACE and NO_OP only combine objects (in MPI they are for
one-sided communication).
"""

import operator
import weakref

import numpy as np

from gloocy import _core, bufspec
from gloocy import handles as _handles
from gloocy._core import OP_CODES
from gloocy.errors import ArgumentError, OpError, ERR_OP

__all__ = ["Op", "SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR",
           "LAND", "LOR", "LXOR", "MAXLOC", "MINLOC", "REPLACE", "NO_OP",
           "OP_NULL", "AVG"]

_USER = OP_CODES["user"]
MAX_USER_OPS = 32                 # Op.Create'd ops alive at once (as mpi4py)
_CREATED = weakref.WeakValueDictionary()   # id -> those alive
_NONE = 0                         # OP_NONE: no operation


cdef class Op:
    """A reduction operation: predefined (a kernel in the core) or a user's
    function (see `Op.Create`, `Op.create` and `Op.from_c`). Fields:
    ops.pxd. Python subclasses work everywhere an Op does."""

    def __cinit__(self, name=None, *args, **kwargs):
        # Op.__new__(cls, op) copies op (a subclass's __new__ may call it
        # so, as in mpi4py); __init__ does the rest
        if isinstance(name, Op):
            self._copy(name)

    cdef _copy(self, Op other):
        self.name, self.code, self.commute = (other.name, other.code,
                                              other.commute)
        self._combine, self._fold = other._combine, other._fold
        self.c_function, self.c_context = other.c_function, other.c_context
        self.predefined = other.predefined   # as mpi4py: Op(SUM) too
        self._created = other._created       # (not so from a handle: fromhandle)

    def __init__(self, name=None, combine=None, *, code=None, commute=True,
                 fold=None, c_function=0, c_context=0, predefined=False):
        """Op(): a null op (== OP_NULL); Op(op): a copy of op."""
        if name is None or isinstance(name, Op):
            self._copy(OP_NULL if name is None else name)
            return
        if not isinstance(name, str) or (combine is None and code is None
                                         and fold is None and not c_function):
            raise TypeError(f"expected an Op, got {name!r}")
        self.name = name
        self.code = OP_CODES[name] if code is None else code
        self._combine = combine       # (x, y) -> x <op> y, on objects
        self._fold = fold             # (invec, inoutvec, datatype): in place
        self.commute = commute
        self.c_function = c_function
        self.c_context = c_context
        self.predefined = predefined

    @classmethod
    def Create(cls, function, commute=False):
        """mpi4py's user op: function(inbuf, inoutbuf, datatype) sets
        inoutbuf = inbuf <op> inoutbuf on raw byte buffers; on Python
        objects it is called as function(x, y, None) and returns the result."""
        if not callable(function):
            raise TypeError(f"function: expected a callable, got {function!r}")

        def fold(invec, inoutvec, datatype):
            # bytearrays, as mpi4py's buffers: `b[:] = other_buffer` works
            # whatever other_buffer's item type (copied back after)
            out = memoryview(inoutvec).cast("B")
            acc = bytearray(out)
            function(bytearray(memoryview(invec).cast("B")), acc, datatype)
            out[:] = acc
        if len(_CREATED) >= MAX_USER_OPS:
            raise RuntimeError(f"cannot create more than {MAX_USER_OPS} user-defined "
                               "reduction operations at once (Free some)")
        op = cls(getattr(function, "__name__", "user"),
                 lambda x, y: function(x, y, None), code=_USER,
                 commute=bool(commute), fold=fold)
        (<Op>op)._created = (function, bool(commute))
        _CREATED[id(op)] = op
        return op

    @classmethod
    def create(cls, function, *, commute=True):
        """A user op from `function(invec, inoutvec)`, which must set
        inoutvec[:] = invec <op> inoutvec on NumPy arrays. Ranks' values are
        combined in rank order."""
        if not callable(function):
            raise TypeError(f"function: expected a callable, got {function!r}")
        return cls(getattr(function, "__name__", "user"), function,
                   code=_USER, commute=bool(commute),
                   fold=lambda a, b, datatype: function(a, b))

    @classmethod
    def from_c(cls, function, context=0, *, commute=True):
        """A user op implemented in C: `function` is the address (int) of
        void f(void *acc, const void *src, int64_t count, void *context)
        computing acc[i] = acc[i] <op> src[i], e.g. from ctypes or cffi."""
        address = int(function)
        if address == 0:
            raise ValueError("function: NULL function pointer")
        return cls(f"c_op@{address:#x}", None, code=_USER,
                   commute=bool(commute), c_function=address,
                   c_context=int(context))

    @property
    def is_user(self):
        """Folded in Python (no kernel in the core)."""
        return self.code == _USER

    def Is_commutative(self):
        return self.commute

    @property
    def is_commutative(self):
        return self.commute

    @property
    def is_predefined(self):
        return self.predefined

    def Free(self):
        """Forget a user op: it is OP_NULL afterwards."""
        if self.predefined:
            raise ArgumentError(f"op: cannot free predefined {self.name}", ERR_OP)
        self.code, self._combine, self._fold = _NONE, None, None
        self.c_function = 0
        self._created = None
        _CREATED.pop(id(self), None)

    # -- mpi4py's object model: integer handles, free (gloocy.handles) --------

    cdef object _key(self):
        if not self:
            return None
        return ("Op", self.name, self.code, self.c_function, id(self._combine),
                id(self._fold))

    @property
    def handle(self):
        return _handles.handle_of(self._key(), self)

    def toint(self):
        return self.handle

    py2f = toint

    @classmethod
    def fromhandle(cls, handle):
        if int(handle) == 0:
            return cls()
        cdef Op op = cls(_handles.object_of(handle, Op))
        op._created = None          # as mpi4py: an op from a handle does not pickle
        return op

    fromint = f2py = fromhandle

    def free(self):
        """Free a user's op; a copy of a predefined one becomes OP_NULL;
        the predefined ones stay."""
        if not self:
            return
        if self.predefined:
            if self is not _PREDEFINED.get(self.name):
                self._copy(OP_NULL)
            return
        _handles.forget(self._key())
        self.Free()

    def check_buffers(self):
        """OpError unless this op can reduce buffers."""
        if self.code == _NONE:
            raise OpError(f"op: {self.name} does not reduce buffers")
        return self

    def fold(self, invec, inoutvec, datatype=None):
        """inoutvec = invec <op> inoutvec, in place, on NumPy arrays."""
        if self.c_function:       # it computes acc = acc <op> src
            acc = invec.copy()
            _core.apply_c_op(self.c_function, self.c_context,
                             inoutvec.view(np.uint8).reshape(-1),
                             acc.view(np.uint8).reshape(-1), inoutvec.size)
            inoutvec[...] = acc
        elif self._fold is not None:
            self._fold(invec, inoutvec, datatype)
        else:
            _core.reduce_into(invec, inoutvec, self.code)

    def Reduce_local(self, inbuf, inoutbuf):
        """inoutbuf = inbuf <op> inoutbuf, elementwise, on this process."""
        src = bufspec.message(inbuf, name="inbuf", readonly=True)
        acc = bufspec.message(inoutbuf, name="inoutbuf")
        if src.datatype != acc.datatype:
            raise ValueError(f"inbuf is {src.datatype.name} but inoutbuf "
                             f"is {acc.datatype.name}: the datatypes differ")
        if src.count != acc.count or src.nbytes != acc.nbytes:
            raise ValueError(f"inbuf has {src.count} elements but inoutbuf "
                             f"has {acc.count}")
        self.check_buffers().fold(src.data, acc.data, acc.datatype)
        acc.unpack()

    def __call__(self, a, b):
        """Combine two objects, e.g. SUM(1, 2) == 3."""
        if self._combine is None:
            raise ArgumentError(f"op: {self.name} cannot combine objects", ERR_OP)
        return self._combine(a, b)

    def __bool__(self):
        return not (self.code == _NONE and self._combine is None)

    def __eq__(self, other):
        if not isinstance(other, Op):
            return NotImplemented
        return _same(self, other)

    def __ne__(self, other):
        if not isinstance(other, Op):
            return NotImplemented
        return not _same(self, other)

    __hash__ = None               # as mpi4py's handles

    def __repr__(self):
        return f"gloocy.{self.name}" if self.predefined else f"<Op {self.name}>"

    def __reduce__(self):
        if not self.predefined:
            # as mpi4py: an Op.Create'd op pickles as its function (which
            # must pickle), others (create, from_c) cannot travel
            if self._created is None or not self:
                raise ValueError("cannot pickle user-defined reduction "
                                 f"operation {self.name}")
            return type(self).Create, self._created
        if self is _PREDEFINED.get(self.name):
            return self.name      # pickles as the module-level singleton
        return type(self), (_PREDEFINED[self.name],)  # a subclass: Sub(SUM)


cdef bint _same(Op a, Op b):
    if not a or not b:
        return not a and not b
    return a is b or (      # a copy, Op(op), is the same op
        a.name == b.name and a.code == b.code
        and a.c_function == b.c_function
        and a._combine is b._combine and a._fold is b._fold)


def _max(x, y):
    return y if y > x else x


def _min(x, y):
    return y if y < x else x


def _maxloc(x, y):
    """(value, index) pairs: the larger value, the lower index on a tie."""
    (u, i), (v, j) = x, y
    if u != v:
        return (u, i) if u > v else (v, j)
    return (v, j) if j < i else (u, i)


def _minloc(x, y):
    (u, i), (v, j) = x, y
    if u != v:
        return (u, i) if u < v else (v, j)
    return (v, j) if j < i else (u, i)


def _predefined(name, combine, **kwargs):
    return Op(name, combine, predefined=True, **kwargs)


SUM = _predefined("SUM", operator.add)
PROD = _predefined("PROD", operator.mul)
MIN = _predefined("MIN", _min)
MAX = _predefined("MAX", _max)
BAND = _predefined("BAND", operator.and_)
BOR = _predefined("BOR", operator.or_)
BXOR = _predefined("BXOR", operator.xor)
LAND = _predefined("LAND", lambda x, y: bool(x) & bool(y))
LOR = _predefined("LOR", lambda x, y: bool(x) | bool(y))
LXOR = _predefined("LXOR", lambda x, y: bool(x) ^ bool(y))
MAXLOC = _predefined("MAXLOC", _maxloc)
MINLOC = _predefined("MINLOC", _minloc)
REPLACE = _predefined("REPLACE", lambda x, y: y, code=_NONE, commute=False)
NO_OP = _predefined("NO_OP", lambda x, y: x, code=_NONE, commute=False)
OP_NULL = _predefined("OP_NULL", None, code=_NONE)
# AVG: SUM, then each result divided by the number of ranks (Gloo lacks it).
AVG = _predefined("AVG", operator.add, code=OP_CODES["SUM"])

cdef dict _PREDEFINED = {op.name: op for op in (
    SUM, PROD, MIN, MAX, BAND, BOR, BXOR, LAND, LOR, LXOR, MAXLOC, MINLOC,
    REPLACE, NO_OP, OP_NULL, AVG)}
