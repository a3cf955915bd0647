"""Type stubs for gloocy.datatypes (Cython): mpi4py's Datatype over a
Typemap (the layout the message layer reads in C), the predefined types,
typecodes."""

from typing import Any, Final, Sequence

from numpy import dtype, ndarray
from typing_extensions import Self

__all__: list[str]

ORDER_C: Final[int]
ORDER_F: Final[int]
ORDER_FORTRAN: Final[int]
MAX_ELEMENTS: Final[int]


class Typemap:
    """What a datatype handle points at: elements of one predefined type at
    byte offsets, with MPI's bounds."""

    elem: Typemap
    offsets: ndarray            # spelled out from the run when there is one
    run_first: int              # a run: element i at run_first + i * run_step
    run_step: int
    np: dtype | None
    itemsize: int
    elem_size: int
    n: int
    lb: int
    ub: int
    true_lb: int
    true_ub: int
    data_lb: int
    data_ub: int
    contiguous: bool
    core: int
    dense: int
    committed: bool
    name: str
    code: str | None
    attr: str | None

    def __init__(self, elem: Typemap, offsets: ndarray | range, lb: int,
                 ub: int, true_lb: int, true_ub: int, name: str = ...,
                 code: str | None = ..., align: int = ...) -> None: ...
    def placement(self) -> ndarray | range: ...
    def copies_run(self, count: int) -> range | None: ...


class Datatype:
    """An MPI datatype (mpi4py's MPI.Datatype)."""

    @property
    def _h(self) -> Typemap | None: ...
    def __new__(cls, datatype: Datatype | None = None) -> Self: ...
    @classmethod
    def _wrap(cls, handle: Typemap) -> Self: ...
    def __eq__(self, other: object) -> bool: ...
    def __ne__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def Get_size(self) -> int: ...
    def Get_extent(self) -> tuple[int, int]: ...
    def Get_true_extent(self) -> tuple[int, int]: ...
    @property
    def size(self) -> int: ...
    @property
    def extent(self) -> int: ...
    @property
    def lb(self) -> int: ...
    @property
    def ub(self) -> int: ...
    @property
    def true_extent(self) -> int: ...
    @property
    def true_lb(self) -> int: ...
    @property
    def true_ub(self) -> int: ...
    @property
    def is_predefined(self) -> bool: ...
    def Get_name(self) -> str: ...
    def Set_name(self, name: str) -> None: ...
    @property
    def name(self) -> str: ...
    @name.setter
    def name(self, value: str) -> None: ...
    @staticmethod
    def fromcode(code: str) -> Datatype: ...
    def tocode(self) -> str: ...
    def Commit(self) -> Self: ...
    @property
    def is_committed(self) -> bool: ...
    def Free(self) -> None: ...
    def Dup(self) -> Self: ...
    def Create_dup(self) -> Self: ...
    def Create_contiguous(self, count: int) -> Self: ...
    def Create_vector(self, count: int, blocklength: int, stride: int) -> Self: ...
    def Create_hvector(self, count: int, blocklength: int, stride: int) -> Self: ...
    def Create_indexed(self, blocklengths: Sequence[int],
                       displacements: Sequence[int]) -> Self: ...
    def Create_hindexed(self, blocklengths: Sequence[int],
                        displacements: Sequence[int]) -> Self: ...
    def Create_indexed_block(self, blocklength: int,
                             displacements: Sequence[int]) -> Self: ...
    def Create_hindexed_block(self, blocklength: int,
                              displacements: Sequence[int]) -> Self: ...
    @classmethod
    def Create_struct(cls, blocklengths: Sequence[int],
                      displacements: Sequence[int],
                      datatypes: Sequence[Datatype]) -> Self: ...
    def Create_resized(self, lb: int, extent: int) -> Self: ...
    def Resized(self, lb: int, extent: int) -> Self: ...
    def Create_subarray(self, sizes: Sequence[int], subsizes: Sequence[int],
                        starts: Sequence[int], order: int = ...) -> Self: ...
    @property
    def np_dtype(self) -> dtype: ...
    @property
    def n_elements(self) -> int: ...
    @property
    def is_contiguous(self) -> bool: ...
    def span(self, count: int) -> tuple[int, int]: ...
    def pack(self, mem: ndarray, count: int, start: int = 0) -> ndarray: ...
    def unpack(self, packed: ndarray, mem: ndarray, count: int,
               start: int = 0) -> None: ...


def from_typecode(code: str) -> Datatype: ...
def typecode(datatype: Datatype) -> str | None: ...
def typealign(datatype: Datatype) -> int | None: ...

_typedict: dict[str, Datatype]
_typedict_c: dict[str, Datatype]
_typedict_f: dict[str, Datatype]

DATATYPE_NULL: Final[Datatype]
LOGICAL1: Final[Datatype]
LOGICAL2: Final[Datatype]
LOGICAL4: Final[Datatype]
LOGICAL8: Final[Datatype]
LOGICAL16: Final[Datatype]
INTEGER16: Final[Datatype]
REAL2: Final[Datatype]
COMPLEX4: Final[Datatype]
PACKED: Final[Datatype]
BYTE: Final[Datatype]
AINT: Final[Datatype]
OFFSET: Final[Datatype]
COUNT: Final[Datatype]
CHAR: Final[Datatype]
WCHAR: Final[Datatype]
SIGNED_CHAR: Final[Datatype]
SHORT: Final[Datatype]
SIGNED_SHORT: Final[Datatype]
INT: Final[Datatype]
SIGNED_INT: Final[Datatype]
LONG: Final[Datatype]
SIGNED_LONG: Final[Datatype]
LONG_LONG: Final[Datatype]
SIGNED_LONG_LONG: Final[Datatype]
UNSIGNED_CHAR: Final[Datatype]
UNSIGNED_SHORT: Final[Datatype]
UNSIGNED: Final[Datatype]
UNSIGNED_INT: Final[Datatype]
UNSIGNED_LONG: Final[Datatype]
UNSIGNED_LONG_LONG: Final[Datatype]
FLOAT: Final[Datatype]
FLOAT32_T: Final[Datatype]
DOUBLE: Final[Datatype]
FLOAT64_T: Final[Datatype]
LONG_DOUBLE: Final[Datatype]
C_BOOL: Final[Datatype]
BOOL: Final[Datatype]
INT8_T: Final[Datatype]
SINT8_T: Final[Datatype]
INT16_T: Final[Datatype]
SINT16_T: Final[Datatype]
INT32_T: Final[Datatype]
SINT32_T: Final[Datatype]
INT64_T: Final[Datatype]
SINT64_T: Final[Datatype]
UINT8_T: Final[Datatype]
UINT16_T: Final[Datatype]
UINT32_T: Final[Datatype]
UINT64_T: Final[Datatype]
FLOAT16_T: Final[Datatype]
BFLOAT16_T: Final[Datatype]
C_COMPLEX: Final[Datatype]
C_FLOAT_COMPLEX: Final[Datatype]
C_DOUBLE_COMPLEX: Final[Datatype]
C_LONG_DOUBLE_COMPLEX: Final[Datatype]
CXX_BOOL: Final[Datatype]
CXX_FLOAT_COMPLEX: Final[Datatype]
CXX_DOUBLE_COMPLEX: Final[Datatype]
CXX_LONG_DOUBLE_COMPLEX: Final[Datatype]
SHORT_INT: Final[Datatype]
INT_INT: Final[Datatype]
TWOINT: Final[Datatype]
LONG_INT: Final[Datatype]
FLOAT_INT: Final[Datatype]
DOUBLE_INT: Final[Datatype]
LONG_DOUBLE_INT: Final[Datatype]
CHARACTER: Final[Datatype]
LOGICAL: Final[Datatype]
F_BOOL: Final[Datatype]
INTEGER: Final[Datatype]
F_INT: Final[Datatype]
REAL: Final[Datatype]
F_FLOAT: Final[Datatype]
DOUBLE_PRECISION: Final[Datatype]
F_DOUBLE: Final[Datatype]
COMPLEX: Final[Datatype]
F_COMPLEX: Final[Datatype]
F_FLOAT_COMPLEX: Final[Datatype]
DOUBLE_COMPLEX: Final[Datatype]
F_DOUBLE_COMPLEX: Final[Datatype]
INTEGER1: Final[Datatype]
INTEGER2: Final[Datatype]
INTEGER4: Final[Datatype]
INTEGER8: Final[Datatype]
REAL4: Final[Datatype]
REAL8: Final[Datatype]
REAL16: Final[Datatype]
COMPLEX8: Final[Datatype]
COMPLEX16: Final[Datatype]
COMPLEX32: Final[Datatype]
