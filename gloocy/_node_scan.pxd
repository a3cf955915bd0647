# Scan and exscan through the node segment (_node_scan.pxi).
cdef int node_scan(Context ctx, Coll *c, const char *x, int64_t count,
                   char *out, bint exclusive) except -1 nogil
