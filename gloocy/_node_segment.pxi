# The node segment itself: its size, the settings its maker writes into
# its head (single-copy thresholds, read from the environment once, by the
# rank that makes it), the waits' look floor, and one mapping of it per
# process (_node.pxi's Node maps it; transport/lazy.py hands it out).

cdef extern from "<sys/mman.h>" nogil:
    void *mmap(void *addr, size_t length, int prot, int flags, int fd, long off)
    int munmap(void *addr, size_t length)
    enum:
        PROT_READ
        PROT_WRITE
        MAP_SHARED
    void *MAP_FAILED

cdef enum:
    NODE_HEADROOM_MAX = 4096  # the most a slot holds past its chunk (node_headroom)


cdef inline int64_t node_headroom(int size) noexcept nogil:
    """Bytes a slot holds past its `chunk`: room for the head of a node
    alltoallv (3 x size + 4 int64 words in 64-byte lines, _node_exchange.pxi)
    up to NODE_HEADROOM_MAX, so that its steps still carry whole chunks.
    Without it a 1 MiB alltoall at N = 2 (512 KiB a way) took a third
    step for its last 128 bytes: 96-110 vs 78 us a call (2026-12-05)."""
    return min((8 * (3 * size + 4) + 63) // 64 * 64, <int64_t>NODE_HEADROOM_MAX)


def node_segment_bytes(int size, int64_t chunk):
    return (sizeof(NodeHead) + size * sizeof(NodeCtl)
            + 2 * size * (chunk + node_headroom(size)))


def cma_min_bytes():
    """GLOOCY_CMA_MIN_BYTES (default NODE_CMA_MIN): from how many bytes a
    bcast, allgather or alltoall copies once (_cma.pxi). The segment's
    maker's value holds for all ranks."""
    import os
    text = os.environ.get("GLOOCY_CMA_MIN_BYTES", str(NODE_CMA_MIN))
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"GLOOCY_CMA_MIN_BYTES={text!r}: must be a byte count")
    return n


def cma_min_where_cpus(int size, int64_t own_cpus_min):
    """From how many bytes a call among `size` ranks of this host copies
    once: GLOOCY_CMA_MIN_BYTES if set, else `own_cpus_min` where each rank
    has a CPU, NODE_CMA_MIN where they outnumber the CPUs (bcasts from
    NODE_BCAST_CMA_MIN, reduce_scatters from NODE_RS_CMA_MIN)."""
    import os
    from gloocy.waiting import usable_cpus
    if os.environ.get("GLOOCY_CMA_MIN_BYTES", ""):
        return cma_min_bytes()
    return own_cpus_min if size <= usable_cpus() else NODE_CMA_MIN


def allgather_cma_min_bytes(int size):
    """From how many gathered bytes a node allgather among `size` ranks
    copies once: `size` blocks of GLOOCY_CMA_MIN_BYTES if set, else of
    NODE_ALLGATHER_CMA_BLOCK where each rank has a CPU, of
    NODE_ALLGATHER_CROWDED_BLOCK where they outnumber the CPUs."""
    import os
    from gloocy.waiting import usable_cpus
    if os.environ.get("GLOOCY_CMA_MIN_BYTES", ""):
        block = cma_min_bytes()
    else:
        block = (NODE_ALLGATHER_CMA_BLOCK if size <= usable_cpus()
                 else NODE_ALLGATHER_CROWDED_BLOCK)
    return min(block, 0x7fffffffffffffff // size) * size


def new_node_segment(int size, int64_t chunk):
    """A memfd holding a fresh node segment for `size` ranks with slots of
    `chunk` bytes (its header written); the caller passes it on."""
    import os
    cdef NodeHead head
    if chunk < 4096 or chunk % 64:
        raise ValueError(f"chunk: {chunk} is not a multiple of 64 >= 4096")
    fd = os.memfd_create("gloocy-node", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, node_segment_bytes(size, chunk))
        memset(&head, 0, sizeof(head))
        head.chunk = chunk
        head.cma_min = cma_min_bytes()
        head.bcast_cma_min = cma_min_where_cpus(size, NODE_BCAST_CMA_MIN)
        head.reduce_scatter_cma_min = cma_min_where_cpus(size, NODE_RS_CMA_MIN)
        head.allgather_cma_min = allgather_cma_min_bytes(size)
        head.alltoall_cma_min = cma_min_where_cpus(size, NODE_ALLTOALL_CMA_MIN)
        head.nranks = size
        os.pwrite(fd, (<char *>&head)[:sizeof(head)], 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def node_look_floor_us(env=None):
    """The least a node wait looks (spins 2 us, then yields between looks)
    before it sleeps, in us: GLOOCY_NODE_LOOK_US, else 0 (the adapting
    look alone). A sleeper is woken onto its waker's CPU when the other
    CPUs are busy, so that both ranks may stay on one CPU; a rank that
    keeps looking stays runnable where it is, as MPICH's spinning ranks
    do. It is off by default: at N = 2 with 1000 us, alternating jobs at
    load 13-20 tied (alltoall of 1-16 MiB back to back), and in two pairs
    of gloocy-bench runs at load 30-600 allreduce of 4-64 MiB took 1.0-3.1x
    as long with it as without (bench/results/large-h16/n2-*)."""
    import os
    from gloocy.waiting import env_us
    return env_us("GLOOCY_NODE_LOOK_US", os.environ if env is None else env) or 0


# One mapping of a segment per process, shared by the Nodes of its ranks
# there (a thread world): (st_dev, st_ino) -> [address, bytes, Nodes].
# Each mapping of its own would fault in every page it reads once more:
# a rank reads every slot in an allgather, so at 4,096 rank threads of one
# process, 4,096 faults per rank and per step parity (16 million), and as
# many page-table entries to tear down at close.
_node_maps = {}


cdef void *_map_segment(key, int fd, size_t nbytes) except NULL:
    """The process's mapping of the segment in `fd` (made if none)."""
    cdef void *p = NULL
    held = _node_maps.get(key)
    if held is not None and held[1] == nbytes:
        held[2] += 1
        return <void *><size_t>held[0]
    if nbytes >= sizeof(NodeHead):
        p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
    if p == NULL or p == MAP_FAILED:
        raise OSError(errno, f"cannot map the node segment ({nbytes} bytes)")
    if held is None:          # (a size unlike the held one's: not shared)
        _node_maps[key] = [<size_t>p, nbytes, 1]
    return p


cdef void _unmap_segment(key, char *base, size_t nbytes) noexcept:
    """A Node lets go of its mapping: unmapped with the process's last."""
    held = _node_maps.get(key)
    if held is not None and held[0] == <size_t>base:
        held[2] -= 1
        if held[2] > 0:
            return
        del _node_maps[key]
    munmap(base, nbytes)
