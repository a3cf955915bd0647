"""Reduction operations.

Each op is usable two ways: its `code` selects the Cython kernel for buffer
reductions, and calling it combines two Python objects (for the lower-case,
pickle-based methods), as mpi4py's ops do.
"""

import operator

from gloocy._core import OP_CODES

__all__ = ["Op", "SUM", "PROD", "MIN", "MAX", "BAND", "BOR", "BXOR",
           "LAND", "LOR", "LXOR"]


class Op:
    """A predefined reduction operation."""

    __slots__ = ("name", "code", "_combine")

    def __init__(self, name, combine):
        self.name = name
        self.code = OP_CODES[name]
        self._combine = combine

    def __call__(self, a, b):
        """Combine two objects, e.g. SUM(1, 2) == 3."""
        return self._combine(a, b)

    def __repr__(self):
        return f"gloocy.{self.name}"

    def __reduce__(self):
        return self.name          # pickles as the module-level singleton


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
