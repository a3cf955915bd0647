"""NumPy dtypes <-> gloocy Datatypes (mpi4py.util.dtlib's functions).

``from_numpy_dtype``: a new type (the caller frees it): a Dup of the
predefined type of the typecode; a sub-array dtype
(``np.dtype((np.float64, (3, 4)))``) becomes a SUBARRAY of the whole array;
a structured dtype a STRUCT of its fields at their offsets, resized to its
itemsize (aligned or packed, nested: as NumPy lays it out).

``to_numpy_dtype``: the way back, for predefined types (MAXLOC/MINLOC pairs
are aligned structs), Fortran 90 kinds, Dups, and derived types whose
typemap NumPy can say: CONTIGUOUS and whole-array SUBARRAYs become
sub-array dtypes; VECTOR, HVECTOR, the INDEXED family and STRUCT become
structs of one field per block (field "f<i>", a sub-array of the block's
items) at the blocks' byte offsets, of itemsize the type's extent (its
upper bound when the blocks reach past the extent); RESIZED of a struct
(lower bound 0) gives its fields that itemsize. The struct
is NumPy-aligned when every element lies at a multiple of its alignment,
as with a C struct. Anything else (a part of an array, a darray, a negative
lower bound) is a ValueError.
"""

import numpy as np

from gloocy import datatypes as _datatypes

__all__ = ["from_numpy_dtype", "to_numpy_dtype"]

_Datatype = _datatypes.Datatype


# -- NumPy -> MPI ----------------------------------------------------------------

def from_numpy_dtype(dtype):
    """The Datatype of a NumPy dtype (or anything np.dtype accepts)."""
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise ValueError(f"{dtype}: Python objects have no datatype")
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return from_numpy_dtype(base).Create_subarray(
            list(shape), list(shape), [0] * len(shape), _datatypes.ORDER_C)
    if dtype.fields is not None:
        names = dtype.names
        parts = [from_numpy_dtype(dtype.fields[n][0]) for n in names]
        try:
            struct = _Datatype.Create_struct(
                [1] * len(names), [dtype.fields[n][1] for n in names], parts)
            return struct.Create_resized(0, dtype.itemsize)
        finally:
            for part in parts:
                if not part.is_predefined:
                    part.Free()
    if dtype.byteorder not in "=|" and dtype.byteorder != np.dtype(dtype.char).byteorder:
        raise ValueError(f"{dtype}: only the native byte order has a datatype")
    try:
        named = _datatypes.from_typecode(dtype.char)
    except KeyError:
        raise ValueError(f"{dtype}: no datatype has this typecode") from None
    return named.Dup()      # a type of the caller's own, to Free (as mpi4py)


# -- MPI -> NumPy ----------------------------------------------------------------

def to_numpy_dtype(datatype):
    """The NumPy dtype of a Datatype; ValueError when NumPy cannot say its
    typemap (see the module's text)."""
    if not isinstance(datatype, _Datatype):
        raise TypeError(f"expected a Datatype, got {datatype!r}")
    if not datatype:
        raise ValueError("DATATYPE_NULL has no NumPy dtype")
    code = _datatypes.typecode(datatype)
    if code is not None:
        return np.dtype(code)
    if datatype.is_named:           # MAXLOC/MINLOC pairs, and opaque names
        pair = datatype.np_dtype
        if pair.names is None or datatype.n_elements != 1:
            raise ValueError(f"{datatype.Get_name()} has no NumPy dtype")
        return np.dtype([(f"f{i}", pair.fields[name][0])
                         for i, name in enumerate(pair.names)], align=True)
    # (decode() gives handles on the types it was made of, not copies to
    # free as in MPI)
    return _derived(datatype, *datatype.decode())


def _derived(datatype, base, combiner, params):
    if combiner == "DUP":
        return to_numpy_dtype(base)
    if combiner == "CONTIGUOUS":
        return np.dtype((_dense(base), (params["count"],)))
    if combiner == "SUBARRAY":
        sizes, subsizes, starts = (params["sizes"], params["subsizes"],
                                   params["starts"])
        if list(subsizes) != list(sizes) or any(starts):
            raise ValueError("a SUBARRAY of part of its array has no NumPy "
                             "dtype")
        shape = sizes if params["order"] == _datatypes.ORDER_C else sizes[::-1]
        return np.dtype((_dense(base), tuple(shape)))
    if datatype.lb < 0:
        raise ValueError(f"a {combiner} type of lower bound {datatype.lb} "
                         "has no NumPy dtype")
    if combiner == "RESIZED":
        inner = to_numpy_dtype(base)
        if not inner.names:     # as mpi4py: a plain item resized is no dtype
            raise ValueError(f"{inner} resized to bounds ({datatype.lb}, "
                             f"{datatype.ub}) has no NumPy dtype")
        return _struct([(inner.fields[n][0], inner.fields[n][1])
                        for n in inner.names], datatype)
    blocks = _blocks(base, combiner, params)
    return _struct([(np.dtype((to_numpy_dtype(t), (n,))) if n != 1
                     else to_numpy_dtype(t), at) for t, n, at in blocks],
                   datatype)


def _dense(base):
    """The dtype of base, whose items must lie one after another."""
    inner = to_numpy_dtype(base)
    if base.lb != 0 or base.extent != inner.itemsize:
        raise ValueError(f"copies of a type of bounds ({base.lb}, "
                         f"{base.ub}) are not a NumPy sub-array of {inner}")
    return inner


def _blocks(base, combiner, params):
    """[(datatype, items, byte offset)] of the blocks of a vector, indexed
    or struct type."""
    extent = base.extent if base else 0      # (STRUCT: DATATYPE_NULL)
    if combiner in ("VECTOR", "HVECTOR"):
        step = params["stride"] * (extent if combiner == "VECTOR" else 1)
        return [(base, params["blocklength"], i * step)
                for i in range(params["count"])]
    if combiner in ("INDEXED", "HINDEXED", "INDEXED_BLOCK", "HINDEXED_BLOCK"):
        unit = extent if combiner in ("INDEXED", "INDEXED_BLOCK") else 1
        displs = params["displacements"]
        lengths = params.get("blocklengths") or [params["blocklength"]] * len(displs)
        return [(base, n, d * unit) for n, d in zip(lengths, displs)]
    if combiner == "STRUCT":
        return list(zip(params["datatypes"], params["blocklengths"],
                        params["displacements"]))
    raise ValueError(f"a {combiner} datatype has no NumPy dtype")


def _struct(fields, datatype):
    """A structured dtype of (dtype, offset) fields named f0, f1... for
    `datatype`: its itemsize is the extent (how far apart items are) when
    the fields fit in it, else the upper bound; aligned when every element
    is (NumPy refuses an aligned struct otherwise)."""
    itemsize = datatype.extent
    if any(at + f.itemsize > itemsize for f, at in fields):
        itemsize = datatype.ub
    spec = {"names": [f"f{i}" for i in range(len(fields))],
            "formats": [f for f, _ in fields],
            "offsets": [at for _, at in fields], "itemsize": itemsize}
    if all(_aligned(f, at) for f, at in fields):
        try:
            return np.dtype(spec, align=True)
        except ValueError:      # an itemsize that is not a multiple
            pass
    return np.dtype(spec)


def _aligned(dtype, at):
    """Whether every element of a `dtype` placed at byte `at` lies at a
    multiple of its own alignment."""
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return all(_aligned(base, at + i * base.itemsize)
                   for i in range(min(int(np.prod(shape)), 2)))
    if dtype.names:
        return all(_aligned(dtype.fields[n][0], at + dtype.fields[n][1])
                   for n in dtype.names)
    return at % dtype.alignment == 0
