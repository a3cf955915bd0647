"""Random derived datatypes (nested vectors, indexed blocks, subarrays,
structs of mixed element types, resized types) over random bytes: Pack,
Unpack, and a send between two ranks, against an oracle written here.

A type is drawn as a recipe (a tree of tuples). `segments` turns a recipe
into its typemap independently of gloocy: the byte ranges its elements take,
in typemap order, and its extent. What gloocy must move is then plain NumPy
slicing: the packed form of `count` items is the concatenation of those
ranges item after item; unpacking writes them back and leaves every other
byte alone.
"""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from gloocy import MPI

# (datatype name, bytes): the element types recipes are made of
ELEMENTS = [("INT8_T", 1), ("INT16_T", 2), ("INT32_T", 4), ("DOUBLE", 8),
            ("FLOAT", 4)]
SETTINGS = dict(deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])


# -- the oracle: a recipe's typemap -------------------------------------------------

def segments(recipe):
    """(list of (byte offset, bytes) of the elements in typemap order,
    extent) of one item of `recipe`; every recipe here has lower bound 0
    and its data inside [0, extent)."""
    kind = recipe[0]
    if kind == "element":
        size = dict(ELEMENTS)[recipe[1]]
        return [(0, size)], size
    if kind == "resized" and recipe[2][0] == "struct":
        return struct_segments(recipe[2][1]), recipe[1]
    child, extent = segments(recipe[-1])

    def copies(starts):
        return [(at + off, n) for at in starts for off, n in child]

    if kind == "contiguous":
        count = recipe[1]
        return copies([i * extent for i in range(count)]), count * extent
    if kind in ("vector", "hvector"):
        _, count, blocklength, stride, _ = recipe
        step = stride * extent if kind == "vector" else stride
        starts = [j * step + k * extent for j in range(count)
                  for k in range(blocklength)]
        return copies(starts), (count - 1) * step + blocklength * extent
    if kind == "indexed":
        _, blocklengths, displs, _ = recipe
        starts = [(d + k) * extent for b, d in zip(blocklengths, displs)
                  for k in range(b)]
        return copies(starts), max(starts) + extent
    if kind == "subarray":
        _, sizes, subsizes, starts, order, _ = recipe
        where = np.arange(int(np.prod(sizes))).reshape(sizes, order=order)
        picked = where[tuple(slice(s, s + n) for s, n in zip(starts, subsizes))]
        return (copies([int(i) * extent for i in picked.ravel(order=order)]),
                int(np.prod(sizes)) * extent)
    if kind == "resized":
        return child, recipe[1]
    raise AssertionError(kind)


def struct_segments(fields):
    """The typemap of a struct of (blocklength, byte displacement, recipe)."""
    out = []
    for blocklength, displ, recipe in fields:
        child, extent = segments(recipe)
        out += [(displ + k * extent + off, n) for k in range(blocklength)
                for off, n in child]
    return out


layout = segments


def selected(buf, recipe, count):
    """The bytes `count` items of `recipe` select in `buf`, in order."""
    segs, extent = layout(recipe)
    return np.concatenate([buf[i * extent + off:i * extent + off + n]
                           for i in range(count) for off, n in segs]
                          or [np.zeros(0, np.uint8)])


def untouched_mask(size, recipe, count):
    """True where `count` items of `recipe` do not write."""
    segs, extent = layout(recipe)
    mask = np.ones(size, bool)
    for i in range(count):
        for off, n in segs:
            mask[i * extent + off:i * extent + off + n] = False
    return mask


# -- recipes -> gloocy datatypes -------------------------------------------------------

def build(recipe):
    """The gloocy datatype of a recipe (uncommitted; free it and its parts
    with free_all)."""
    kind = recipe[0]
    if kind == "element":
        return getattr(MPI, recipe[1])
    if kind == "resized" and recipe[2][0] == "struct":
        fields = recipe[2][1]
        parts = [build(r) for _, _, r in fields]
        struct = MPI.Datatype.Create_struct([b for b, _, _ in fields],
                                            [d for _, d, _ in fields], parts)
        return struct.Create_resized(0, recipe[1])
    child = build(recipe[-1])
    if kind == "contiguous":
        return child.Create_contiguous(recipe[1])
    if kind == "vector":
        return child.Create_vector(*recipe[1:4])
    if kind == "hvector":
        return child.Create_hvector(*recipe[1:4])
    if kind == "indexed":
        return child.Create_indexed(recipe[1], recipe[2])
    if kind == "subarray":
        order = MPI.ORDER_C if recipe[4] == "C" else MPI.ORDER_F
        return child.Create_subarray(recipe[1], recipe[2], recipe[3], order)
    if kind == "resized":
        return child.Create_resized(0, recipe[1])
    raise AssertionError(kind)


@st.composite
def recipes(draw, depth=2):
    """A random recipe whose items do not overlap themselves (so unpacking
    is well defined) and whose data lie in [0, extent)."""
    if depth == 0 or draw(st.integers(0, 4)) == 0:
        return ("element", draw(st.sampled_from([n for n, _ in ELEMENTS])))
    kind = draw(st.sampled_from(["contiguous", "vector", "hvector", "indexed",
                                 "subarray", "struct", "resized"]))
    if kind == "struct":          # fields one after another, with gaps,
        # resized to an extent of its own (lower bound 0)
        fields, at = [], 0
        for _ in range(draw(st.integers(1, 3))):
            child = draw(recipes(depth=depth - 1))
            blocklength = draw(st.integers(1, 2))
            at += draw(st.integers(0, 5))
            fields.append((blocklength, at, child))
            at += blocklength * layout(child)[1]
        extent = at + draw(st.integers(0, 7))
        return ("resized", max(extent, 1), ("struct", fields))
    child = draw(recipes(depth=depth - 1))
    extent = layout(child)[1]
    if kind == "contiguous":
        return ("contiguous", draw(st.integers(1, 4)), child)
    if kind == "vector":
        count, blocklength = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        return ("vector", count, blocklength,
                blocklength + draw(st.integers(0, 3)), child)
    if kind == "hvector":
        count, blocklength = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        return ("hvector", count, blocklength,
                blocklength * extent + draw(st.integers(0, 9)), child)
    if kind == "indexed":
        blocklengths, displs, at = [], [], 0    # the first block at 0
        for i in range(draw(st.integers(1, 3))):
            at += draw(st.integers(0, 3)) if i else 0
            blocklengths.append(draw(st.integers(1, 3)))
            displs.append(at)
            at += blocklengths[-1]
        if draw(st.booleans()):   # blocks in any order
            order = draw(st.permutations(range(len(displs))))
            blocklengths = [blocklengths[i] for i in order]
            displs = [displs[i] for i in order]
        return ("indexed", blocklengths, displs, child)
    if kind == "subarray":
        ndim = draw(st.integers(1, 3))
        sizes = [draw(st.integers(1, 4)) for _ in range(ndim)]
        subsizes = [draw(st.integers(1, n)) for n in sizes]
        starts = [draw(st.integers(0, n - s)) for n, s in zip(sizes, subsizes)]
        return ("subarray", sizes, subsizes, starts,
                draw(st.sampled_from("CF")), child)
    return ("resized", extent + draw(st.integers(0, 9)), child)


def free_all(datatype):
    """Free a derived datatype (its parts are freed by the caller's scope:
    gloocy keeps what a type needs alive by reference)."""
    if not datatype.is_predefined:
        datatype.Free()


def random_bytes(seed, n):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


# -- Pack and Unpack, in this process ------------------------------------------------

@settings(max_examples=40, **SETTINGS)
@given(recipes(), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_pack_unpack_move_the_bytes_the_layout_selects(recipe, count, seed):
    datatype = build(recipe).Commit()
    segs, extent = layout(recipe)
    assert datatype.Get_extent() == (0, extent), recipe
    assert datatype.Get_size() == sum(n for _, n in segs), recipe
    buf = random_bytes(seed, count * extent)
    want = selected(buf, recipe, count)
    assert datatype.Pack_size(count, MPI.COMM_SELF) == want.size

    packed = bytearray(want.size + 3)
    end = datatype.Pack(buf, packed, 3, MPI.COMM_SELF)
    assert end == 3 + want.size
    np.testing.assert_array_equal(np.frombuffer(packed, np.uint8)[3:], want,
                                  err_msg=repr(recipe))

    back = np.full(buf.size, 0xEE, np.uint8)
    assert datatype.Unpack(packed, 3, back, MPI.COMM_SELF) == end
    np.testing.assert_array_equal(selected(back, recipe, count), want)
    keep = untouched_mask(buf.size, recipe, count)
    assert (back[keep] == 0xEE).all(), recipe
    free_all(datatype)


# -- a send between two ranks --------------------------------------------------------

def r_send_layout(comm, recipe, count, seed):
    """Rank 0 sends `count` items of the recipe's type from random bytes,
    twice; rank 1 receives them once as the same type into bytes 0xEE and
    once as plain bytes (the packed form)."""
    datatype = build(recipe).Commit()
    segs, extent = layout(recipe)
    size = sum(n for _, n in segs) * count
    try:
        if comm.rank == 0:
            buf = random_bytes(seed, count * extent)
            comm.Send([buf, count, datatype], 1, tag=5)
            comm.Send([buf, count, datatype], 1, tag=6)
            return None
        if comm.rank == 1:
            into = np.full(count * extent, 0xEE, np.uint8)
            comm.Recv([into, count, datatype], 0, tag=5)
            flat = np.zeros(size, np.uint8)
            comm.Recv([flat, MPI.BYTE], 0, tag=6)
            return into, flat
        return None
    finally:
        free_all(datatype)


@settings(max_examples=12, **SETTINGS)
@given(recipes(), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_send_and_receive_derived_types_between_ranks(world, recipe, count,
                                                      seed):
    into, flat = world(2).run(r_send_layout, recipe, count, seed)[1]
    sent = random_bytes(seed, into.size)
    want = selected(sent, recipe, count)
    np.testing.assert_array_equal(flat, want, err_msg=repr(recipe))
    np.testing.assert_array_equal(selected(into, recipe, count), want)
    assert (into[untouched_mask(into.size, recipe, count)] == 0xEE).all()
