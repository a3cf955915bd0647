"""Reduction operations.

Each op is usable two ways: its `code` selects the Cython kernel for buffer
reductions, and calling it combines two Python objects (for the lower-case,
pickle-based methods), as mpi4py's ops do.
"""

import operator

from gloocy._core import OP_CODES

__all__ = ["Op", "SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR",
           "LAND", "LOR", "LXOR", "MAXLOC", "MINLOC", "AVG"]


class Op:
    """A reduction operation: predefined (a kernel in the core) or a user's
    function (see `Op.create` and `Op.from_c`)."""

    __slots__ = ("name", "code", "_combine", "commute", "c_function",
                 "c_context")

    def __init__(self, name, combine, *, code=None, commute=True,
                 c_function=0, c_context=0):
        self.name = name
        self.code = OP_CODES[name] if code is None else code
        self._combine = combine
        self.commute = commute
        self.c_function = c_function
        self.c_context = c_context

    @classmethod
    def create(cls, function, *, commute=True):
        """A user op from `function(invec, inoutvec)`, which must set
        inoutvec[:] = invec <op> inoutvec on NumPy arrays. Ranks' values are
        combined in rank order."""
        if not callable(function):
            raise TypeError(f"function: expected a callable, got {function!r}")

        def combine(a, b):
            return function(a, b)
        return cls(getattr(function, "__name__", "user"), combine,
                   code=OP_CODES["user"], commute=bool(commute))

    @classmethod
    def from_c(cls, function, context=0, *, commute=True):
        """A user op implemented in C: `function` is the address (int) of
        void f(void *acc, const void *src, int64_t count, void *context)
        computing acc[i] = acc[i] <op> src[i], e.g. from ctypes or cffi."""
        address = int(function)
        if address == 0:
            raise ValueError("function: NULL function pointer")
        return cls(f"c_op@{address:#x}", None, code=OP_CODES["user"],
                   commute=bool(commute), c_function=address,
                   c_context=int(context))

    @property
    def is_user(self):
        return self.code == OP_CODES["user"]

    def __call__(self, a, b):
        """Combine two objects, e.g. SUM(1, 2) == 3."""
        if self._combine is None:
            raise TypeError(f"{self.name} combines buffers, not objects")
        return self._combine(a, b)

    def __repr__(self):
        return f"gloocy.{self.name}" if not self.is_user else f"<Op {self.name}>"

    def __reduce__(self):
        if self.is_user:
            raise TypeError("user-defined ops cannot be pickled")
        return self.name          # pickles as the module-level singleton


def _maxloc(a, b):
    """(value, index) pairs: the larger value, the lower index on a tie."""
    if a[0] != b[0]:
        return a if a[0] > b[0] else b
    return a if a[1] <= b[1] else b


def _minloc(a, b):
    if a[0] != b[0]:
        return a if a[0] < b[0] else b
    return a if a[1] <= b[1] else b


SUM = Op("SUM", operator.add)
PROD = Op("PROD", operator.mul)
MIN = Op("MIN", min)
MAX = Op("MAX", max)
BAND = Op("BAND", operator.and_)
BOR = Op("BOR", operator.or_)
BXOR = Op("BXOR", operator.xor)
LAND = Op("LAND", lambda a, b: a and b)
LOR = Op("LOR", lambda a, b: a or b)
LXOR = Op("LXOR", lambda a, b: bool(a) != bool(b))
MAXLOC = Op("MAXLOC", _maxloc)
MINLOC = Op("MINLOC", _minloc)
# AVG: SUM, then each result divided by the number of ranks (Gloo lacks it).
AVG = Op("AVG", operator.add, code=OP_CODES["SUM"])
