# Included by datatypes.pyx: the predefined datatypes (MPI's names, their
# NumPy element dtypes and typecodes, as mpi4py on MPICH has them) and the
# typecode tables.

# -- the predefined types ----------------------------------------------------

def _pair(value):
    """The C struct {value; int} of MAXLOC/MINLOC."""
    return np.dtype([("v", value), ("i", "i4")], align=True)


# attribute names (aliases share the handle), MPI name, element dtype, typecode
_TABLE = [
    ("PACKED", "MPI_PACKED", "u1", "B"),
    ("BYTE", "MPI_BYTE", "u1", "B"),
    ("AINT", "MPI_AINT", "p", "p"),
    ("OFFSET", "MPI_OFFSET", "i8", "p"),
    ("COUNT", "MPI_COUNT", "i8", "p"),
    ("CHAR", "MPI_CHAR", "S1", "c"),
    ("WCHAR", "MPI_WCHAR", "U1", "U"),
    ("SIGNED_CHAR", "MPI_SIGNED_CHAR", "b", "b"),
    ("SHORT SIGNED_SHORT", "MPI_SHORT", "h", "h"),
    ("INT SIGNED_INT", "MPI_INT", "i", "i"),
    ("LONG SIGNED_LONG", "MPI_LONG", "l", "l"),
    ("LONG_LONG SIGNED_LONG_LONG", "MPI_LONG_LONG_INT", "q", "q"),
    ("UNSIGNED_CHAR", "MPI_UNSIGNED_CHAR", "B", "B"),
    ("UNSIGNED_SHORT", "MPI_UNSIGNED_SHORT", "H", "H"),
    ("UNSIGNED UNSIGNED_INT", "MPI_UNSIGNED", "I", "I"),
    ("UNSIGNED_LONG", "MPI_UNSIGNED_LONG", "L", "L"),
    ("UNSIGNED_LONG_LONG", "MPI_UNSIGNED_LONG_LONG", "Q", "Q"),
    ("FLOAT FLOAT32_T", "MPI_FLOAT", "f", "f"),
    ("DOUBLE FLOAT64_T", "MPI_DOUBLE", "d", "d"),
    ("LONG_DOUBLE", "MPI_LONG_DOUBLE", "g", "g"),
    ("C_BOOL BOOL", "MPI_C_BOOL", "?", "b1"),
    ("INT8_T SINT8_T", "MPI_INT8_T", "i1", "i1"),
    ("INT16_T SINT16_T", "MPI_INT16_T", "i2", "i2"),
    ("INT32_T SINT32_T", "MPI_INT32_T", "i4", "i4"),
    ("INT64_T SINT64_T", "MPI_INT64_T", "i8", "i8"),
    ("UINT8_T", "MPI_UINT8_T", "u1", "u1"),
    ("UINT16_T", "MPI_UINT16_T", "u2", "u2"),
    ("UINT32_T", "MPI_UINT32_T", "u4", "u4"),
    ("UINT64_T", "MPI_UINT64_T", "u8", "u8"),
    ("FLOAT16_T", "MPIX_C_FLOAT16", "e", "e"),
    # MPICH has no bfloat16 (there it is DATATYPE_NULL); gloocy's core has.
    ("BFLOAT16_T", "MPIX_BFLOAT16", None, None),
    ("C_COMPLEX C_FLOAT_COMPLEX", "MPI_C_COMPLEX", "F", "F"),
    ("C_DOUBLE_COMPLEX", "MPI_C_DOUBLE_COMPLEX", "D", "D"),
    ("C_LONG_DOUBLE_COMPLEX", "MPI_C_LONG_DOUBLE_COMPLEX", "G", "G"),
    ("CXX_BOOL", "MPI_CXX_BOOL", "?", "?"),
    ("CXX_FLOAT_COMPLEX", "MPI_CXX_FLOAT_COMPLEX", "F", "F"),
    ("CXX_DOUBLE_COMPLEX", "MPI_CXX_DOUBLE_COMPLEX", "D", "D"),
    ("CXX_LONG_DOUBLE_COMPLEX", "MPI_CXX_LONG_DOUBLE_COMPLEX", "G", "G"),
    ("SHORT_INT", "MPI_SHORT_INT", _pair("h"), None),
    ("INT_INT TWOINT", "MPI_2INT", _pair("i"), None),
    ("LONG_INT", "MPI_LONG_INT", _pair("l"), None),
    ("FLOAT_INT", "MPI_FLOAT_INT", _pair("f"), None),
    ("DOUBLE_INT", "MPI_DOUBLE_INT", _pair("d"), None),
    ("LONG_DOUBLE_INT", "MPI_LONG_DOUBLE_INT", _pair("g"), None),
    # Fortran
    ("CHARACTER", "MPI_CHARACTER", "S1", "c"),
    ("LOGICAL F_BOOL", "MPI_LOGICAL", "i4", "i"),
    ("INTEGER F_INT", "MPI_INTEGER", "i4", "i"),
    ("REAL F_FLOAT", "MPI_REAL", "f4", "f"),
    ("DOUBLE_PRECISION F_DOUBLE", "MPI_DOUBLE_PRECISION", "f8", "d"),
    ("COMPLEX F_COMPLEX F_FLOAT_COMPLEX", "MPI_COMPLEX", "c8", "F"),
    ("DOUBLE_COMPLEX F_DOUBLE_COMPLEX", "MPI_DOUBLE_COMPLEX", "c16", "D"),
    ("INTEGER1", "MPI_INTEGER1", "i1", "i1"),
    ("INTEGER2", "MPI_INTEGER2", "i2", "i2"),
    ("INTEGER4", "MPI_INTEGER4", "i4", "i4"),
    ("INTEGER8", "MPI_INTEGER8", "i8", "i8"),
    ("REAL4", "MPI_REAL4", "f4", "f4"),
    ("REAL8", "MPI_REAL8", "f8", "f8"),
    ("REAL16", "MPI_REAL16", "g", "f16"),
    ("COMPLEX8", "MPI_COMPLEX8", "c8", "c8"),
    ("COMPLEX16", "MPI_COMPLEX16", "c16", "c16"),
    ("COMPLEX32", "MPI_COMPLEX32", "G", "c32"),
]

# Names MPICH leaves null: distinct objects, all equal to DATATYPE_NULL.
_NULL_NAMES = ["DATATYPE_NULL", "LOGICAL1", "LOGICAL2", "LOGICAL4",
               "LOGICAL8", "LOGICAL16", "INTEGER16", "REAL2", "COMPLEX4"]

_BY_NAME = {}                # every name above and in _TABLE -> its Datatype

for _name in _NULL_NAMES:
    _BY_NAME[_name] = Datatype()

for _attrs, _mpi_name, _np, _code in _TABLE:
    _attrs = _attrs.split()
    if _np is None:
        _h = _predefined(_attrs[0], _mpi_name, None, _code)
    elif isinstance(_np, np.dtype):     # pair: MPI counts no padding
        _h = _predefined(_attrs[0], _mpi_name, _np, _code,
                         size=_np["v"].itemsize + 4,
                         true_ub=_np.fields["i"][1] + 4)
    else:
        _h = _predefined(_attrs[0], _mpi_name, np.dtype(_np), _code)
    _dt = Datatype._wrap(_h)
    for _name in _attrs:
        _BY_NAME[_name] = _dt

globals().update(_BY_NAME)

# The element of types that mix element types: one byte, as MPI_CHAR (the
# core moves it and refuses to reduce it), but a handle of its own.
_MIXED = _predefined("_MIXED", "MPI_CHAR", np.dtype("S1"), None)
_BY_NAME["_MIXED"] = Datatype._wrap(_MIXED)

__all__ += _NULL_NAMES + [a for row in _TABLE for a in row[0].split()]
del _attrs, _mpi_name, _np, _code, _h, _dt, _name

# -- typecodes (the format characters of the buffer protocol and NumPy) -------

def _named(table):
    """A typecode table of names, with the Datatypes they name."""
    return {code: _BY_NAME[name] for code, name in table.items()}


_typedict_c = _named({
    "?": "C_BOOL", "b": "SIGNED_CHAR", "h": "SHORT", "i": "INT",
    "l": "LONG", "q": "LONG_LONG", "B": "UNSIGNED_CHAR",
    "H": "UNSIGNED_SHORT", "I": "UNSIGNED", "L": "UNSIGNED_LONG",
    "Q": "UNSIGNED_LONG_LONG", "f": "FLOAT", "d": "DOUBLE",
    "g": "LONG_DOUBLE", "F": "C_FLOAT_COMPLEX", "D": "C_DOUBLE_COMPLEX",
    "G": "C_LONG_DOUBLE_COMPLEX", "b1": "C_BOOL", "i1": "INT8_T",
    "i2": "INT16_T", "i4": "INT32_T", "i8": "INT64_T", "u1": "UINT8_T",
    "u2": "UINT16_T", "u4": "UINT32_T", "u8": "UINT64_T",
    "f2": "FLOAT16_T", "f4": "FLOAT", "c8": "C_FLOAT_COMPLEX",
    "f8": "DOUBLE", "c16": "C_DOUBLE_COMPLEX", "f16": "LONG_DOUBLE",
    "c32": "C_LONG_DOUBLE_COMPLEX",
})

_typedict_f = _named({
    "l": "LOGICAL", "i": "INTEGER", "r": "REAL", "s": "REAL",
    "d": "DOUBLE_PRECISION", "c": "COMPLEX", "z": "DOUBLE_COMPLEX",
    "i1": "INTEGER1", "i2": "INTEGER2", "i4": "INTEGER4", "i8": "INTEGER8",
    "r4": "REAL4", "r8": "REAL8", "r16": "REAL16", "c8": "COMPLEX8",
    "c16": "COMPLEX16", "c32": "COMPLEX32",
})

# Everything a buffer format may say: struct-module codes, NumPy type
# strings, Python's "Z" complex prefix, chars/strings, datetimes as int64.
_typedict = dict(_typedict_c)
_typedict.update(_named({
    "e": "FLOAT16_T", "Zf": "C_FLOAT_COMPLEX", "Zd": "C_DOUBLE_COMPLEX",
    "Zg": "C_LONG_DOUBLE_COMPLEX",
    "n": "COUNT", "N": "UNSIGNED_LONG", "p": "AINT", "P": "UNSIGNED_LONG",
    "c": "CHAR", "a": "CHAR", "S": "CHAR", "S1": "CHAR", "s": "CHAR",
    "1s": "CHAR", "U": "WCHAR", "U1": "WCHAR", "w": "WCHAR", "1w": "WCHAR",
    "u": "UINT16_T", "1u": "UINT16_T",
    "M": "INT64_T", "M8": "INT64_T", "m": "INT64_T", "m8": "INT64_T",
}))


def from_typecode(code):
    """The predefined datatype of a typecode; KeyError when there is none
    (TypeError when `code` is unhashable, as in mpi4py)."""
    try:
        return _typedict[code]
    except KeyError:
        raise KeyError(f"no datatype has the typecode {code!r}") from None


def typecode(datatype):
    """The typecode of a predefined datatype (or of a Dup of one), else None."""
    if not isinstance(datatype, Datatype):
        raise TypeError(f"expected a Datatype, got {datatype!r}")
    h = (<Datatype>datatype)._h
    return None if h is None else h.code


def typealign(datatype):
    """The alignment in bytes of a predefined datatype (or of a Dup of one,
    a Fortran 90 kind, a MAXLOC/MINLOC pair), else None (mpi4py's
    MPI._typealign, which its util.dtlib reads)."""
    if not isinstance(datatype, Datatype):
        raise TypeError(f"expected a Datatype, got {datatype!r}")
    h = (<Datatype>datatype)._h
    if h is None:
        return None
    if h.code is None and not (h.attr and h.elem.np is not None
                               and h.elem.np.fields):
        return None
    return h.align
