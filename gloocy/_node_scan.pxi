# Scan and exscan through the node segment: a step carries a slot of
# every rank's input; rank r folds slots 0..r (exscan: 0..r-1) left to
# right into its output. Rank 0 reads nothing but its own input, so it
# writes and goes on (node_step_out; the next step's node_ready waits).


cdef int node_scan(Context ctx, Coll *c, const char *x, int64_t count,
                   char *out, bint exclusive) except -1 nogil:
    """out on rank r = x of ranks 0..r folded in rank order (exclusive:
    0..r-1, rank 0's out untouched). x and out may be the same buffer."""
    cdef int r = ctx.node.rank, j, last = ctx.node.rank - (1 if exclusive else 0)
    cdef int64_t isz = c.itemsize
    cdef int64_t per_step = max(ctx.node.chunk // isz, 1)
    cdef int64_t done = 0, e
    while done < count:
        node_ready(ctx, c)
        e = min(count - done, per_step)
        memcpy(ctx.node.slot(r), x + done * isz, e * isz)
        if r == 0:
            if not exclusive and out != x:
                memmove(out + done * isz, x + done * isz, e * isz)
            node_step_out(ctx, c)
        else:
            node_step_in(ctx, c)
            memcpy(out + done * isz, ctx.node.slot(0), e * isz)
            for j in range(1, last + 1):
                c.fn(out + done * isz, ctx.node.slot(j), e)
            ctx.node.step += 1
        done += e
    return 0
