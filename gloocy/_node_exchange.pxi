# Node collectives that move blocks between ranks through the node segment
# (see _node.pxi for the segment, its steps and how ranks wait): alltoallv,
# gatherv, scatterv, reduce_scatter and reduce, and the automatic choice
# between them and the pair algorithms.
#
# Where a rank knows only its own block sizes (alltoallv, gatherv,
# scatterv), a slot starts with a head: the bytes the rank sends in all and
# the block sizes it sees (the ones it sends or receives). After the first
# step every rank has read every head, so all agree on how many steps the
# call takes and each finds its piece in the others' streams; the heads are
# also checked against each other, so that every rank names the same pair
# of ranks when their sizes disagree. What a rank sends is one stream (its
# blocks for the others, end to end, in rank order); step s carries bytes
# [s*room, (s+1)*room) of every stream, room being a slot less its head.

cdef enum:
    # Smallest room (slot bytes after the head) worth a node exchange; a
    # world so large that its heads leave less uses the pair algorithms.
    NODE_MIN_ROOM = 1024


cdef enum:
    # Results from this many bytes (on one rank) are written past the
    # caches (streaming stores, _copy.h): at N = 2 and 4, 16-64 MiB, that
    # cut allgather's and alltoall's time by 13-22% (bench/results/
    # n2-n4-2026-12-05-h16b/); at 4 MiB the result still stays in cache.
    NODE_STREAM_MIN = 8 << 20


def stream_min_bytes():
    """GLOOCY_STREAM_MIN_BYTES, else NODE_STREAM_MIN (read as a rank joins
    its node segment, not at import: a program may set it first). A rank's
    own choice: how it copies changes nothing the others see."""
    import os
    text = os.environ.get("GLOOCY_STREAM_MIN_BYTES", "")
    try:
        n = int(text) if text else NODE_STREAM_MIN
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"GLOOCY_STREAM_MIN_BYTES={text!r}: must be a byte count")
    return n


cdef void copy_block(char *dst, const char *src, int64_t n,
                     bint stream) noexcept nogil:
    if stream and (src + n <= dst or dst + n <= src):
        gloocy_copy_stream(dst, src, <size_t>n)
    else:
        memmove(dst, src, <size_t>n)


cdef int node_choice(Context ctx, int algo, int64_t nbytes,
                     int64_t auto_min) noexcept:
    """ALGO_SHM if the call goes through the node segment: forced, or
    automatic and at least `auto_min` bytes (which every rank must know
    alike; -1: never automatic). Else `algo` (a forced "shm" where there
    is no segment: the automatic pair choice)."""
    if ctx.node is None or ctx.node.stride - _head_bytes(_A2A_WORDS(ctx.size)) < NODE_MIN_ROOM:
        return ALGO_AUTO if algo == ALGO_SHM else algo
    if algo == ALGO_SHM or (algo == ALGO_AUTO and 0 <= auto_min <= nbytes):
        return ALGO_SHM
    return algo


cdef inline int64_t _head_bytes(int n) noexcept nogil:
    """A slot's head: its stream's length and n block sizes, in 64-byte
    lines (alltoallv's holds 2 x size sizes)."""
    return (8 * (n + 1) + 63) // 64 * 64


cdef inline void _put(char *room, int64_t lo, int64_t hi, int64_t at,
                      const char *src, int64_t n) noexcept nogil:
    """The part in [lo, hi) of the piece of a stream at [at, at + n), read
    from src, into `room` (which holds stream bytes [lo, hi))."""
    cdef int64_t a = max(at, lo), b = min(at + n, hi)
    if b > a:
        memcpy(room + (a - lo), src + (a - at), b - a)


cdef inline void _get(char *dst, int64_t at, int64_t n, const char *room,
                      int64_t lo, int64_t hi, bint stream=False) noexcept nogil:
    """The reverse of _put: the piece's part in [lo, hi) from `room` to dst."""
    cdef int64_t a = max(at, lo), b = min(at + n, hi)
    if b > a:
        copy_block(dst + (a - at), room + (a - lo), b - a, stream)


cdef inline int _A2A_WORDS(int n) noexcept nogil:
    """Sizes in an alltoallv head (see node_alltoallv), less the first."""
    return 3 * n + 3


cdef inline int64_t *_head(Node nd, int r) noexcept nogil:
    return <int64_t *>nd.slot(r)


cdef int64_t _longest(Node nd) noexcept nogil:
    """The longest stream of this step's heads."""
    cdef int64_t longest = 0
    cdef int j
    for j in range(nd.size):
        longest = max(longest, _head(nd, j)[0])
    return longest


cdef enum:
    # bits of the last word of an alltoallv head (see node_alltoallv)
    A2A_WILLING = 1       # the rank allows single copies (GLOOCY_CMA)
    A2A_DIRECT = 2        # its first step carries none of its stream: the
                          # others read it all by single copy


cdef int node_alltoallv(Context ctx, Coll *c, const char *send,
                        const int64_t *soffs, const int64_t *ssizes, char *recv,
                        const int64_t *roffs, const int64_t *rsizes) except -1 nogil:
    """Block j of our send buffer goes to rank j, rank j's block for us
    lands at recv + roffs[j]. Heads carry the sizes each rank sends and
    the sizes it expects, so every rank checks every pair; and where its
    blocks are (pid, send buffer, offsets), so that a call longer than a
    step can read the rest straight from the senders (_cma.pxi).

    A rank whose own stream will be read by single copy (from the
    segment's alltoall_cma_min: then the longest stream is too, and every
    rank chooses single copies) leaves it out of the first step
    (A2A_DIRECT): each byte moves once, and no slot line written by one
    CPU is read by another, which cost most when the CPUs share no cache
    (see NODE_ALLTOALL_CMA_MIN). Such a rank copies its own block after
    its reads, while the others finish theirs (below the streaming size:
    at N = 2, 1-4 MiB, 0-5% faster against MPICH in the same jobs than
    before them; at 16 MiB, streamed, 5% slower). If single copies are not made after
    all (a rank unwilling, or refused), every rank starts again through
    the slots from the first byte."""
    cdef int n = ctx.node.size, r = ctx.node.rank, j, i
    cdef int64_t head = _head_bytes(_A2A_WORDS(n)), room = ctx.node.stride - head
    cdef int64_t total = 0, longest = 0, lo = 0, at
    cdef int64_t *h
    cdef int64_t *theirs = <int64_t *>ctx.scratch(2 * n * sizeof(int64_t))
    cdef int64_t *carried = theirs + n   # bytes of rank j's stream its first step held
    cdef char *slot
    cdef int64_t result = 0
    cdef bint stream, direct = False, restart, late = False
    for j in range(n):
        result += rsizes[j]
        if j != r:
            total += ssizes[j]
    stream = result >= ctx.node.stream_min
    while True:
        node_ready(ctx, c)
        slot = ctx.node.slot(r)
        if lo == 0:
            direct = (ctx.node.cma > 0 and ctx.node.cma_willing and total > 0
                      and total >= ctx.node.alltoall_cma_min)
            late = direct and not stream
            # Head: [our stream's length, what we send each rank, what we
            # expect from each rank, where in `send` each block starts,
            # our pid, `send`, A2A_WILLING | A2A_DIRECT].
            h = <int64_t *>slot
            h[0] = total
            memcpy(h + 1, ssizes, n * sizeof(int64_t))
            memcpy(h + 1 + n, rsizes, n * sizeof(int64_t))
            memcpy(h + 1 + 2 * n, soffs, n * sizeof(int64_t))
            h[1 + 3 * n] = getpid()
            h[2 + 3 * n] = <int64_t><intptr_t>send
            h[3 + 3 * n] = (A2A_WILLING if ctx.node.cma_willing else 0) | (
                A2A_DIRECT if direct else 0)
        at = 0
        if not (lo == 0 and direct):
            for j in range(n):
                if j != r:
                    _put(slot + head, lo, lo + room, at, send + soffs[j], ssizes[j])
                    at += ssizes[j]
        if lo == 0:
            # Our own block moves while the others fill their slots (at N
            # = 2, 256 KiB: the slots' one step took 19.5 us with it
            # before, MPICH 17.8), or after our single copies (`late`).
            node_arrive(ctx, phase_a(ctx.node), c)
            if not late:
                copy_block(recv + roffs[r], send + soffs[r], rsizes[r], stream)
            node_wait(ctx, c, phase_a(ctx.node))
            node_check_fingerprints(ctx, c)
        else:
            node_step_in(ctx, c)
        if lo == 0:
            longest = _longest(ctx.node)
            _check_pairs(ctx, c)
            restart = False
            for j in range(n):          # where rank j's block for us starts
                h = _head(ctx.node, j)
                carried[j] = 0 if h[3 + 3 * n] & A2A_DIRECT else room
                restart |= carried[j] == 0
                theirs[j] = 0
                for i in range(r):
                    if i != j:
                        theirs[j] += h[1 + i]
        for j in range(n):
            if j != r and (lo > 0 or carried[j] > 0):
                _get(recv + roffs[j], theirs[j], rsizes[j], ctx.node.slot(j) + head,
                     lo, lo + room, stream)
        if (lo == 0 and longest > 0 and longest >= ctx.node.alltoall_cma_min
                and ctx.node.cma > 0):
            # The rest by single copy (every rank decides alike: the heads).
            if not _all_willing(ctx.node, 3 + 3 * n):
                ctx.node.cma = -1
            else:
                h = _head(ctx.node, 0)
                if cma_alltoallv(ctx, c, h + 1 + 3 * n, h + 2 + 3 * n,
                                 h + 1 + 2 * n, ctx.node.stride // 8, recv, roffs, rsizes,
                                 theirs, carried, recv + roffs[r], send + soffs[r],
                                 rsizes[r] if late else 0):
                    return 0
                # refused (every rank saw it): the slots, from the first
                # byte if a stream was left out of the first step
                lo = 0 if restart else lo + room
                continue
        ctx.node.step += 1
        lo = 0 if lo == 0 and restart else lo + room
        if lo >= longest:
            return 0


cdef bint _all_willing(Node nd, int word) noexcept nogil:
    """Every head's `word` is nonzero: every rank allows single copies (an
    alltoallv's word sets A2A_DIRECT only beside A2A_WILLING)."""
    cdef int j
    for j in range(nd.size):
        if not _head(nd, j)[word]:
            return False
    return True


cdef int _check_pairs(Context ctx, Coll *c) except -1 nogil:
    """Every (sender, receiver) pair agrees on the block between them (the
    heads of node_alltoallv); else the first pair that does not, on every
    rank."""
    cdef int n = ctx.node.size, s, d
    cdef int64_t sent, expected
    for s in range(n):
        for d in range(n):
            sent = _head(ctx.node, s)[1 + d]
            expected = _head(ctx.node, d)[1 + n + s]
            if sent != expected:
                return _raise_node_sizes(ctx, c, s, d, sent, expected)
    return 0


cdef int node_gatherv(Context ctx, Coll *c, const char *send, int64_t sendn,
                      char *recv, const int64_t *offs,
                      const int64_t *sizes) except -1 nogil:
    """Every rank's block to the root (recv, offs, sizes: the root's only;
    a root's send NULL: its block is in place). Heads: each rank's block
    size; the root's also holds the sizes it expects."""
    cdef int n = ctx.node.size, r = ctx.node.rank, root = c.proto.root, j
    cdef int64_t head = _head_bytes(n + 3), room = ctx.node.stride - head
    cdef int64_t longest = 0, lo = 0
    cdef int64_t *h
    cdef char *slot
    if r == root:
        sendn = 0                         # nothing to stream: ours is local
        if send is not NULL:
            memmove(recv + offs[r], send, sizes[r])
    while True:
        node_ready(ctx, c)
        slot = ctx.node.slot(r)
        if lo == 0:
            h = <int64_t *>slot
            h[0] = sendn
            if r == root:
                memcpy(h + 1, sizes, n * sizeof(int64_t))
            h[1 + n] = getpid()           # for single copies (_cma.pxi)
            h[2 + n] = <int64_t><intptr_t>send
            h[3 + n] = ctx.node.cma_willing
        if r != root:
            _put(slot + head, lo, lo + room, 0, send, sendn)
        node_step_in(ctx, c)
        if lo == 0:
            longest = _longest(ctx.node)
            h = _head(ctx.node, root)
            for j in range(n):
                if j != root and _head(ctx.node, j)[0] != h[1 + j]:
                    return _raise_node_sizes(ctx, c, j, root, _head(ctx.node, j)[0],
                                             h[1 + j])
        if r == root:
            for j in range(n):
                if j != r:
                    _get(recv + offs[j], 0, sizes[j], ctx.node.slot(j) + head, lo, lo + room)
        if (lo == 0 and longest > room and longest >= ctx.node.cma_min
                and ctx.node.cma > 0):
            # The rest by single copy: the root reads every block.
            if not _all_willing(ctx.node, 3 + n):
                ctx.node.cma = -1
            else:
                h = _head(ctx.node, 0)
                if cma_gatherv(ctx, c, h + 1 + n, h + 2 + n, ctx.node.stride // 8,
                               recv, offs, sizes, room):
                    return 0
                lo += room            # refused (every rank saw it): the slots
                continue
        ctx.node.step += 1
        lo += room
        if lo >= longest:
            return 0


cdef int node_scatterv(Context ctx, Coll *c, const char *send,
                       const int64_t *offs, const int64_t *sizes, char *recv,
                       int64_t recvn) except -1 nogil:
    """The root's block j (send + offs[j], sizes[j]: the root's only) to
    rank j's recv (recvn bytes; the root's recv NULL: it keeps its block).
    Heads: the root's stream length and block sizes; each other rank's
    recvn."""
    cdef int n = ctx.node.size, r = ctx.node.rank, root = c.proto.root, j
    cdef int64_t head = _head_bytes(2 * n + 3), room = ctx.node.stride - head
    cdef int64_t total = 0, longest = 0, lo = 0, at, mine = 0
    cdef int64_t *h
    cdef char *slot
    if r == root:
        for j in range(n):
            if j != r:
                total += sizes[j]
        if recv is not NULL:
            memmove(recv, send + offs[r], sizes[r])
    while True:
        node_ready(ctx, c)
        slot = ctx.node.slot(r)
        if lo == 0:
            h = <int64_t *>slot
            h[0] = total
            if r == root:
                memcpy(h + 1, sizes, n * sizeof(int64_t))
                memcpy(h + 1 + n, offs, n * sizeof(int64_t))
            else:
                h[1] = recvn
            h[1 + 2 * n] = getpid()       # for single copies (_cma.pxi)
            h[2 + 2 * n] = <int64_t><intptr_t>send
            h[3 + 2 * n] = ctx.node.cma_willing
        if r == root:
            at = 0
            for j in range(n):
                if j != r:
                    _put(slot + head, lo, lo + room, at, send + offs[j], sizes[j])
                    at += sizes[j]
            if lo + room >= total:
                # Only ours streams: this is the last step, and the others
                # check the heads.
                return node_step_out(ctx, c)
        node_step_in(ctx, c)
        if lo == 0:
            longest = _longest(ctx.node)
            h = _head(ctx.node, root)
            for j in range(n):
                if j != root and _head(ctx.node, j)[1] != h[1 + j]:
                    return _raise_node_sizes(ctx, c, root, j, h[1 + j],
                                             _head(ctx.node, j)[1])
            for j in range(r):
                if j != root:
                    mine += h[1 + j]
        if r != root:
            _get(recv, mine, recvn, ctx.node.slot(root) + head, lo, lo + room)
        if (lo == 0 and longest > room and longest >= ctx.node.cma_min
                and ctx.node.cma > 0):
            # The rest by single copy: each rank reads its block.
            if not _all_willing(ctx.node, 3 + 2 * n):
                ctx.node.cma = -1
            else:
                h = _head(ctx.node, root)
                if cma_scatterv(ctx, c, h[1 + 2 * n], h[2 + 2 * n] + h[1 + n + r],
                                recv, recvn, min(max(room - mine, 0), recvn)):
                    return 0
                lo += room            # refused (every rank saw it): the slots
                continue
        ctx.node.step += 1
        lo += room
        if lo >= longest:
            return 0


cdef uint64_t _digest(const int64_t *v, int n) noexcept nogil:
    """FNV-1a of n sizes (as sizes_digest)."""
    cdef uint64_t h = 14695981039346656037ULL
    cdef int i
    for i in range(n):
        h = (h ^ <uint64_t>v[i]) * 1099511628211ULL
    return h


cdef int node_reduce_scatter(Context ctx, Coll *c, const char *send,
                             char *mine, const int64_t *offs,
                             const int64_t *lens) except -1 nogil:
    """As run_reduce_scatter: `mine` (lens[rank] elements, apart from
    `send`) ends with block `rank` of every rank's `send` reduced (blocks
    end to end in rank order). Large ones by single copy (_cma.pxi) where
    the kernel allows it; else through the slots: a step carries, from
    every rank, the next piece of each other rank's block (its slot holds
    them in rank order, q elements each), so that every rank copies and
    reduces alike at each step; each reduces its block's pieces, others'
    in rank order. The first step's heads hold a digest of the counts:
    ranks that split the same total differently name each other."""
    cdef int n = ctx.node.size, r = ctx.node.rank, j, k
    cdef int64_t isz = c.itemsize, head = 64, lo = 0, longest = 0, total = 0, m
    cdef int64_t q = max((ctx.node.stride - head) // isz // max(n - 1, 1), 1)
    cdef uint64_t digest = _digest(lens, n)
    cdef char *slot
    for j in range(n):
        longest = max(longest, lens[j])
        total += lens[j]
    memcpy(mine, send + offs[r] * isz, lens[r] * isz)
    if (total * isz >= ctx.node.reduce_scatter_cma_min and ctx.node.cma > 0
            and longest * isz > ctx.node.chunk):
        if node_reduce_scatter_cma(ctx, c, send, mine, offs, lens, total, digest):
            return 0
        memcpy(mine, send + offs[r] * isz, lens[r] * isz)   # refused: again
    while True:
        node_ready(ctx, c)
        slot = ctx.node.slot(r)
        (<uint64_t *>slot)[0] = digest
        k = 0
        for j in range(n):
            if j != r:
                m = min(max(lens[j] - lo, 0), q)
                if m > 0:
                    memcpy(slot + head + k * q * isz,
                           send + (offs[j] + lo) * isz, m * isz)
                k += 1
        node_step_in(ctx, c)
        if lo == 0:
            for j in range(n):
                if (<uint64_t *>ctx.node.slot(j))[0] != digest:
                    return _raise_node_counts(ctx, c, j)
        m = min(max(lens[r] - lo, 0), q)
        if m > 0:
            for j in range(n):
                if j != r:       # our piece sits at index r (r - 1 past j)
                    c.fn(mine + lo * isz, ctx.node.slot(j) + head
                         + (r - (j < r)) * q * isz, m)
        ctx.node.step += 1
        lo += q
        if lo >= longest:
            return 0


cdef int _raise_node_sizes(Context ctx, Coll *c, int sender, int receiver,
                           int64_t sent, int64_t expected) except -1 with gil:
    raise MismatchError(f"rank {ctx.rank}: in {describe_call(&c.proto)} rank "
                        f"{sender} sends {sent} bytes to rank {receiver}, "
                        f"which expects {expected}: the ranks disagree on the "
                        "counts")


cdef int _raise_node_counts(Context ctx, Coll *c, int peer) except -1 with gil:
    raise MismatchError(f"rank {ctx.rank}: in {describe_call(&c.proto)} rank "
                        f"{peer} splits the total otherwise: the ranks disagree "
                        "on the counts")
