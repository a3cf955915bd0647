# How a datatype was made, as MPI tells it: the envelope (how many
# arguments of each kind), the contents (the arguments themselves) and
# mpi4py's decode() (the constructor's keyword arguments). A Typemap's
# `recipe` is (combiner, integers, counts, element Typemaps); None for a
# named type. Counts, displacements and strides are large counts (MPI-4's
# MPI_Type_get_contents_c, as MPICH reports them to mpi4py); addresses are
# never used.

# mpi4py's values (MPICH's)
COMBINER_NAMED = 1
COMBINER_DUP = 2
COMBINER_CONTIGUOUS = 3
COMBINER_VECTOR = 4
COMBINER_HVECTOR = 6
COMBINER_INDEXED = 7
COMBINER_HINDEXED = 9
COMBINER_INDEXED_BLOCK = 10
COMBINER_STRUCT = 12
COMBINER_SUBARRAY = 13
COMBINER_DARRAY = 14
COMBINER_F90_REAL = 15
COMBINER_F90_COMPLEX = 16
COMBINER_F90_INTEGER = 17
COMBINER_RESIZED = 18
COMBINER_HINDEXED_BLOCK = 19
COMBINER_VALUE_INDEX = 20

TYPECLASS_REAL = 1
TYPECLASS_INTEGER = 2
TYPECLASS_COMPLEX = 3
TYPECLASS_LOGICAL = 4

_COMBINER_NAMES = {v: k[len("COMBINER_"):] for k, v in list(globals().items())
                   if k.startswith("COMBINER_")}
__all__ += [k for k in list(globals()) if k.startswith(("COMBINER_",
                                                        "TYPECLASS_"))]


cdef object _made(Datatype t, int combiner, list integers, list counts,
                  list types):
    """t, remembering how it was made."""
    t._h.recipe = (combiner, integers, [int(c) for c in counts], types)
    return t


cdef object _recipe(Datatype self):
    cdef Typemap h = _handle(self)
    return (COMBINER_NAMED, [], [], []) if h.recipe is None else h.recipe


cdef object _as_datatype(Typemap h):
    """A handle on h: a named type's own object, else a new one (MPI's
    Get_contents returns handles the caller frees)."""
    if h.attr:
        return _BY_NAME[h.attr]
    return Datatype._wrap(h)


def _get_envelope(Datatype self):
    """(integers, addresses, large counts, datatypes, combiner): how many
    arguments of each kind made this type."""
    combiner, integers, counts, types = _recipe(self)
    return (len(integers), 0, len(counts), len(types), combiner)


def _get_contents(Datatype self):
    """(integers, addresses, large counts, datatypes) that made this type."""
    _, integers, counts, types = _recipe(self)
    return (list(integers), [], list(counts),
            [_as_datatype(h) for h in types])


def _decode(Datatype self):
    """(old type, combiner name, keyword arguments of its constructor)."""
    combiner, ints, c, types = _recipe(self)
    name = _COMBINER_NAMES[combiner]
    if combiner == COMBINER_NAMED:
        return self, name, {}
    old = _as_datatype(types[0]) if len(types) == 1 else _BY_NAME["DATATYPE_NULL"]
    if combiner == COMBINER_CONTIGUOUS:
        params = {"count": c[0]}
    elif combiner in (COMBINER_VECTOR, COMBINER_HVECTOR):
        params = {"count": c[0], "blocklength": c[1], "stride": c[2]}
    elif combiner in (COMBINER_INDEXED, COMBINER_HINDEXED):
        params = {"blocklengths": c[1:1 + c[0]],
                  "displacements": c[1 + c[0]:]}
    elif combiner in (COMBINER_INDEXED_BLOCK, COMBINER_HINDEXED_BLOCK):
        params = {"blocklength": c[1], "displacements": c[2:]}
    elif combiner == COMBINER_STRUCT:
        params = {"blocklengths": c[1:1 + c[0]],
                  "displacements": c[1 + c[0]:],
                  "datatypes": [_as_datatype(h) for h in types]}
    elif combiner == COMBINER_SUBARRAY:
        n = ints[0]
        params = {"sizes": c[:n], "subsizes": c[n:2 * n],
                  "starts": c[2 * n:], "order": ints[1]}
    elif combiner == COMBINER_DARRAY:
        n = ints[2]
        params = {"size": ints[0], "rank": ints[1], "gsizes": c,
                  "distribs": ints[3:3 + n], "dargs": ints[3 + n:3 + 2 * n],
                  "psizes": ints[3 + 2 * n:3 + 3 * n], "order": ints[-1]}
    elif combiner == COMBINER_RESIZED:
        params = {"lb": c[0], "extent": c[1]}
    elif combiner == COMBINER_VALUE_INDEX:
        params = {"value": _as_datatype(types[0]),
                  "index": _as_datatype(types[1])}
    elif combiner == COMBINER_F90_INTEGER:
        params = {"r": ints[0]}
    elif combiner in (COMBINER_F90_REAL, COMBINER_F90_COMPLEX):
        params = {"p": ints[0], "r": ints[1]}
    else:               # DUP
        params = {}
    return old, name, params


# -- typechar and typestr (NumPy's spelling, as mpi4py gives them) -------------

cdef str _typechar(Typemap h):
    if h.code is None:
        return "" if h.np is None and h.attr else "V"
    return h.code if len(h.code) == 1 else np.dtype(h.code).char


cdef str _typestr(Typemap h):
    if h.code is None:
        return "" if h.np is None and h.attr else f"V{h.ub - h.lb}"
    dt = h.elem.np
    if dt.kind == "U":
        return f"U{dt.itemsize // 4}"
    return dt.str[1:]


# -- Fortran 90 parameterized types and Match_size ------------------------------

cdef dict _F90 = {}         # (combiner, p, r) -> its Datatype (one per kind)


cdef object _f90(int combiner, list args, str base):
    key = (combiner, *args)
    t = _F90.get(key)
    if t is None:
        h = (<Datatype>_BY_NAME[base])._h
        dup = Typemap(h.elem, h.placement(), h.lb, h.ub, h.true_lb,
                      h.true_ub, h.name, h.code, h.align)
        dup.committed = True
        dup.recipe = (combiner, args, [], [])
        t = _F90[key] = Datatype._wrap(dup)
    return t


def _f90_kind(what, p, r, kinds):
    """The first (p, r) limit that holds both, as Fortran's selected kinds."""
    p, r = _index(p, "p"), _index(r, "r")
    for max_p, max_r, name in kinds:
        if p <= max_p and r <= max_r:
            return name
    raise _mpi_error(f"no {what} type has precision {p} and range {r}",
                     ERR_ARG)


_INTEGER_KINDS = [(0, 2, "INTEGER1"), (0, 4, "INTEGER2"), (0, 9, "INTEGER4"),
                  (0, 18, "INTEGER8")]
_REAL_KINDS = [(6, 37, "REAL4"), (15, 307, "REAL8"), (33, 4931, "REAL16")]
_COMPLEX_KINDS = [(6, 37, "COMPLEX8"), (15, 307, "COMPLEX16"),
                  (33, 4931, "COMPLEX32")]

_MATCH = {TYPECLASS_INTEGER: ("INTEGER", {1: "INTEGER1", 2: "INTEGER2",
                                          4: "INTEGER4", 8: "INTEGER8"}),
          TYPECLASS_REAL: ("REAL", {4: "REAL4", 8: "REAL8", 16: "REAL16"}),
          TYPECLASS_COMPLEX: ("COMPLEX", {8: "COMPLEX8", 16: "COMPLEX16",
                                          32: "COMPLEX32"}),
          TYPECLASS_LOGICAL: ("LOGICAL", {4: "LOGICAL"})}

_VALUE_INDEX = {"MPI_SHORT": "SHORT_INT", "MPI_INT": "INT_INT",
                "MPI_LONG": "LONG_INT", "MPI_FLOAT": "FLOAT_INT",
                "MPI_DOUBLE": "DOUBLE_INT", "MPI_LONG_DOUBLE": "LONG_DOUBLE_INT"}
