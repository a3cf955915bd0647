"""Type stubs for gloocy.ops (Cython): reduction operations."""

from typing import Any, Callable, Final

from numpy import ndarray

from gloocy.datatypes import Datatype

__all__: list[str]


class Op:
    """A reduction operation: predefined (a kernel in the core) or a user's
    function."""

    code: int
    commute: bool
    predefined: bool
    name: str
    c_function: int
    c_context: int

    def __init__(self, name: str | Op | None = None,
                 combine: Callable[[Any, Any], Any] | None = None, *,
                 code: int | None = None, commute: bool = True,
                 fold: Callable[[ndarray, ndarray, Datatype | None], None]
                 | None = None,
                 c_function: int = 0, c_context: int = 0,
                 predefined: bool = False) -> None: ...
    @classmethod
    def Create(cls, function: Callable[[Any, Any, Datatype | None], Any],
               commute: bool = False) -> Op: ...
    @classmethod
    def create(cls, function: Callable[[ndarray, ndarray], None], *,
               commute: bool = True) -> Op: ...
    @classmethod
    def from_c(cls, function: int, context: int = 0, *,
               commute: bool = True) -> Op: ...
    @property
    def is_user(self) -> bool: ...
    def Is_commutative(self) -> bool: ...
    @property
    def is_commutative(self) -> bool: ...
    @property
    def is_predefined(self) -> bool: ...
    def Free(self) -> None: ...
    def check_buffers(self) -> Op: ...
    def fold(self, invec: ndarray, inoutvec: ndarray,
             datatype: Datatype | None = None) -> None: ...
    def Reduce_local(self, inbuf: Any, inoutbuf: Any) -> None: ...
    def __call__(self, a: Any, b: Any) -> Any: ...
    def __bool__(self) -> bool: ...
    def __eq__(self, other: object) -> bool: ...
    def __ne__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...


SUM: Final[Op]
PROD: Final[Op]
MIN: Final[Op]
MAX: Final[Op]
BAND: Final[Op]
BOR: Final[Op]
BXOR: Final[Op]
LAND: Final[Op]
LOR: Final[Op]
LXOR: Final[Op]
MAXLOC: Final[Op]
MINLOC: Final[Op]
REPLACE: Final[Op]
NO_OP: Final[Op]
OP_NULL: Final[Op]
AVG: Final[Op]
