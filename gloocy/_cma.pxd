# Single-copy transfers between local ranks (_cma.pxi): process_vm_readv
# straight from the owner's buffer. Each returns 1 when the call is done,
# 0 when the kernel refused (the node is marked; the caller runs the
# ordinary node algorithm).

from libc.stdint cimport intptr_t
from libc.errno cimport EPERM, EACCES, ESRCH, ENOSYS, EFAULT

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len
    ssize_t process_vm_readv(int pid, const iovec *local_iov,
                             unsigned long liovcnt, const iovec *remote_iov,
                             unsigned long riovcnt, unsigned long flags)
    ssize_t process_vm_writev(int pid, const iovec *local_iov,
                              unsigned long liovcnt, const iovec *remote_iov,
                              unsigned long riovcnt, unsigned long flags)

cdef extern from "<unistd.h>" nogil:
    int getpid()
    long sysconf(int name)
    enum:
        _SC_NPROCESSORS_ONLN

# n bytes at `addr` in process `pid` to dst (from src): 0, or the errno (point-to-
# point single copies between local ranks use it too: transport/_shm.pyx).
cdef int cma_read(int64_t pid, int64_t addr, char *dst, int64_t n) noexcept nogil
cdef int cma_write(int64_t pid, int64_t addr, const char *src, int64_t n) noexcept nogil
cdef int node_bcast_cma(Context ctx, Coll *c, char *buf, int64_t nbytes,
                        int root) except -1 nogil
cdef int node_allgatherv_cma(Context ctx, Coll *c, char *buf,
                             const int64_t *offs,
                             const int64_t *sizes) except -1 nogil
# node_reduce_scatter in one step (`mine` holds our block of `send`; the
# heads carry `digest`, the counts' FNV-1a).
cdef int node_reduce_scatter_cma(Context ctx, Coll *c, const char *send,
                                 char *mine, const int64_t *offs,
                                 const int64_t *lens, int64_t total,
                                 uint64_t digest) except -1 nogil
# node_alltoallv's rest after its first step (heads: see there), less what
# that step brought from each sender (done[j] bytes of rank j's stream);
# own_n bytes of our own block (own_src to own; 0: none) are copied after
# the reads, while the others finish theirs.
cdef int cma_alltoallv(Context ctx, Coll *c, const int64_t *pids,
                       const int64_t *bases, const int64_t *soffs,
                       int64_t stride, char *recv, const int64_t *roffs,
                       const int64_t *rsizes, const int64_t *at,
                       const int64_t *done, char *own, const char *own_src,
                       int64_t own_n) except -1 nogil
# node_gatherv's rest (the root reads every block), node_scatterv's
# (each rank reads its block from the root), less what the first step
# brought.
cdef int cma_gatherv(Context ctx, Coll *c, const int64_t *pids,
                     const int64_t *bases, int64_t stride, char *recv,
                     const int64_t *offs, const int64_t *sizes,
                     int64_t done) except -1 nogil
cdef int cma_scatterv(Context ctx, Coll *c, int64_t pid, int64_t addr,
                      char *recv, int64_t recvn, int64_t skip) except -1 nogil
