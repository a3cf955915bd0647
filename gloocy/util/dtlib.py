"""NumPy dtypes <-> gloocy Datatypes (mpi4py.util.dtlib's functions).

Predefined types map both ways by typecode; a dtype with a shape
(``np.dtype((np.float64, (3, 4)))``) becomes a contiguous Datatype of its
element type; a structured dtype becomes a struct Datatype resized to the
dtype's itemsize, as far as gloocy's datatypes can hold it (one element
type today: a mix raises NotImplementedError).
"""

import numpy as np

from gloocy import datatypes as _datatypes

__all__ = ["from_numpy_dtype", "to_numpy_dtype"]


def from_numpy_dtype(dtype):
    """The Datatype of a NumPy dtype (or anything np.dtype accepts)."""
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise ValueError(f"{dtype}: Python objects have no datatype")
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return from_numpy_dtype(base).Create_contiguous(int(np.prod(shape)))
    if dtype.fields is not None:
        names = dtype.names
        types = [from_numpy_dtype(dtype.fields[n][0]) for n in names]
        offsets = [dtype.fields[n][1] for n in names]
        struct = _datatypes.Datatype.Create_struct([1] * len(types), offsets, types)
        return struct.Create_resized(0, dtype.itemsize)
    if dtype.byteorder not in "=|" and dtype.byteorder != np.dtype(dtype.char).byteorder:
        raise ValueError(f"{dtype}: only the native byte order has a datatype")
    try:
        return _datatypes.from_typecode(dtype.char)
    except KeyError:
        raise ValueError(f"{dtype}: no datatype has this typecode") from None


def to_numpy_dtype(datatype):
    """The NumPy dtype of a predefined Datatype (derived ones: not yet,
    NotImplementedError)."""
    code = _datatypes.typecode(datatype)
    if code is None:
        raise NotImplementedError(f"{datatype!r}: gloocy cannot describe a "
                                  "derived datatype as a dtype yet")
    return np.dtype(code)
