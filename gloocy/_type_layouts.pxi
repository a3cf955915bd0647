# Included by datatypes.pyx: how the constructors turn their arguments into
# a typemap (the byte offsets of its elements, in typemap order, and its
# bounds): argument checks, block starts, DARRAY's distributions, and
# _derive, which also keeps types of mixed elements as their bytes.

def _index(value, what):
    """An int from anything with __index__ (TypeError else, as mpi4py)."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what}: expected an integer, got {value!r}") from None


def _count(value, what):
    n = _index(value, what)
    if n < 0:
        raise _mpi_error(f"{what}: negative count {n}", ERR_COUNT)
    return n


def _ints(values, what):
    return [_index(v, what) for v in values]


def _same_length(a, b, what):
    if len(a) != len(b):
        raise ValueError(f"{what}: expected {len(a)} items, got {len(b)}")


MAX_ELEMENTS = 1 << 26     # offsets spelled out per element (not a run)


def _check_elements(n):
    if n > MAX_ELEMENTS:
        raise NotImplementedError(
            f"a derived datatype of {n} elements (more than {MAX_ELEMENTS}) "
            "that are not one evenly spaced run: gloocy keeps one offset per "
            "element of such layouts; describe the data with a larger "
            "element type")


def _copies(cls, Typemap h, int64_t count):
    """`count` copies of h one extent apart from byte 0 (CONTIGUOUS, and a
    vector without gaps) as one run, in O(1) memory however large count
    is; None when they do not make one run."""
    run = h.copies_run(count)
    if run is None:
        return None
    cdef int64_t shift = (count - 1) * (h.ub - h.lb)
    cdef int64_t low = min(0, shift), high = max(0, shift)
    return cls._wrap(Typemap(h.elem, run, h.lb + low, h.ub + high,
                             h.true_lb + low, h.true_ub + high,
                             align=h.align))


def _block_starts(displs, blocklengths, extent):
    """Byte starts of the copies: blocklengths[i] consecutive copies (spaced
    by `extent`) starting at byte displs[i]."""
    lengths = np.asarray(blocklengths, np.int64).reshape(-1)
    first = np.cumsum(lengths) - lengths
    within = np.arange(lengths.sum(), dtype=np.int64) - np.repeat(first, lengths)
    return np.repeat(np.asarray(displs, np.int64), lengths) + within * extent


def _distributed(int64_t g, int d, int64_t a, int64_t p, int64_t c):
    """The indices along one dimension of g that process coordinate c of p
    holds: DISTRIBUTE_NONE (all), BLOCK (one block of `a`, ceil(g / p) by
    default) or CYCLIC (blocks of `a`, 1 by default, dealt round-robin)."""
    if d == DISTRIBUTE_NONE:
        if p != 1:
            raise _mpi_error(f"DISTRIBUTE_NONE over {p} processes", ERR_ARG)
        return np.arange(g, dtype=np.int64)
    if d == DISTRIBUTE_BLOCK:
        if a == DISTRIBUTE_DFLT_DARG:
            a = -(-g // p)
        if a <= 0 or a * p < g:
            raise _mpi_error(f"DISTRIBUTE_BLOCK: blocks of {a} over {p} "
                             f"processes do not cover {g}", ERR_ARG)
        return np.arange(min(g, c * a), min(g, (c + 1) * a), dtype=np.int64)
    if d == DISTRIBUTE_CYCLIC:
        if a == DISTRIBUTE_DFLT_DARG:
            a = 1
        if a <= 0:
            raise _mpi_error(f"DISTRIBUTE_CYCLIC: block size {a}", ERR_ARG)
        starts = np.arange(c * a, g, p * a, dtype=np.int64)
        index = (starts[:, None] + np.arange(a)).ravel()
        return index[index < g]
    raise _mpi_error(f"distribs: {d} is not a DISTRIBUTE_* constant", ERR_ARG)


def _derive(cls, pieces, bint struct=False):
    """The type made of `pieces`: (Typemap, byte starts of its copies)."""
    used = [(h, starts) for h, starts in pieces if starts.size]
    full = [(h, starts) for h, starts in used if h.n]
    elems = {id(h.elem): h.elem for h, _ in full}
    elem = next(iter(elems.values()), pieces[0][0].elem if pieces
                else (<Datatype>_BY_NAME["BYTE"])._h)
    if not used:
        return cls._wrap(Typemap(elem, np.zeros(0, np.int64), 0, 0, 0, 0))
    mixed = len(elems) > 1
    if mixed:           # the bytes MPI moves, element by element
        offsets = np.concatenate([
            ((s[:, None] + h.offsets).reshape(-1, 1)
             + _data_bytes(h.elem)).ravel() for h, s in full])
        _check_elements(offsets.size)
        elem = _MIXED
    else:
        offsets = np.concatenate([(s[:, None] + h.offsets).ravel()
                                  for h, s in full] or [np.zeros(0, np.int64)])
    lb = min([int(s.min()) + h.lb for h, s in used])
    ub = max([int(s.max()) + h.ub for h, s in used])
    true_lb = min([int(s.min()) + h.true_lb for h, s in full], default=0)
    true_ub = max([int(s.max()) + h.true_ub for h, s in full], default=0)
    align = max([h.align for h, _ in full], default=1)
    if struct and mixed and (ub - lb) % align:
        ub += align - (ub - lb) % align
    return cls._wrap(Typemap(elem, offsets, lb, ub, true_lb, true_ub,
                             align=align))


cdef object _data_bytes(Typemap elem):
    """Byte offsets, within one element, of the bytes MPI moves: all of
    them but a (value, index) pair's padding."""
    if elem is _MIXED:
        return _ONE_BYTE
    fields = elem.np.fields if elem.np is not None else None
    if not fields:
        return np.arange(elem.elem_size, dtype=np.int64)
    return np.concatenate([np.arange(at, at + f.itemsize, dtype=np.int64)
                           for f, at in fields.values()])
