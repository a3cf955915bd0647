# New communicators from old ones: the members agree on a communicator id
# none of them has used, then derive a Context over the same connections.

# Communicator ids: agreed ones stay below SHADOW; ids every rank derives
# alone from its communicator's have the SHADOW bit (a topology's
# neighbour context: its id | SHADOW | NEIGHBORS); transient ones
# (Create_group) have the top bit.
cdef uint32_t SHADOW = 0x40000000
cdef uint32_t TRANSIENT = 0x80000000


cdef uint32_t _new_id(Context ctx, timeout) except? 0:
    """An id for a new communicator that no rank of ctx has used."""
    cdef int64_t mine = ctx.links.next_id
    ctx.allreduce(None, memory_buf(&mine, 8, DT_INT64, 8, "comm id"),
                  MAX_CODE, timeout, None)
    return mine


cdef object _start_new_id(Context ctx, adopt):
    """_new_id as a nonblocking collective (Idup): its request; adopt(id)
    runs once the id is agreed. The id offered is reserved at once, so
    that a Dup started after it agrees on a higher one."""
    box = np.array([ctx.links.next_id], np.int64)
    ctx.links.next_id += 1
    h = ctx.iallreduce(None, box, MAX_CODE)
    return nbc_request(h, box, lambda: adopt(int(box[0])))


cdef tuple _split(Context ctx, color, key, timeout):
    """(members in new rank order, agreed id) of our `color`'s communicator
    (None for UNDEFINED): ranked by (key, old rank). Collective."""
    mine = np.array([color, key, ctx.next_comm_id], np.int64)
    table = np.empty((ctx.size, 3), np.int64)
    ctx.allgatherv(mine, table, [mine.nbytes] * ctx.size, None, timeout, None)
    if color == UNDEFINED:
        return None
    # (in NumPy: with thousands of ranks a loop over the table in Python,
    # in every rank at once, would be the call's cost)
    same = np.flatnonzero(table[:, 0] == color)
    members = same[np.argsort(table[same, 1], kind="stable")].tolist()
    # Unused by every member: the largest next id of all.
    return members, int(table[:, 2].max())


cdef list _members_of(tuple procs, group):
    """Our ranks of the processes of `group`, in its order."""
    if not isinstance(group, Group):
        raise TypeError(f"group: expected a Group, got {group!r}")
    where = {p: r for r, p in enumerate(procs)}
    try:
        return [where[p] for p in group._procs]
    except KeyError:
        raise ArgumentError("group: has processes outside this "
                            "communicator", ERR_GROUP) from None


cdef uint32_t _group_id(Context ctx, list members, tag, timeout) except? 0:
    """An id agreed by `members` alone (Create_group): over a transient
    context whose id (never handed out otherwise) all of them can compute;
    `tag` keeps concurrent calls apart."""
    transient = TRANSIENT | (zlib.crc32(repr(
        (ctx.comm_id, tag, members)).encode()) & 0x7FFFFFFF)
    scratch = ctx.derive(members, transient)
    try:
        return _new_id(scratch, timeout)
    finally:
        scratch.close()
