# The system calls the core's files share (declarations only; included by
# _core.pxd): poll(2), eventfd(2), read/write/close, pthread mutexes and the
# monotonic clock.

from libc.errno cimport errno, EINTR
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout)
    enum:
        POLLIN
        POLLRDHUP
        POLLHUP
        POLLERR

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)
    enum:
        EFD_CLOEXEC
        EFD_NONBLOCK

cdef extern from "<unistd.h>" nogil:
    ssize_t c_write "write"(int fd, const void *buf, size_t n)
    ssize_t c_read "read"(int fd, void *buf, size_t n)
    int c_close "close"(int fd)

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *m, void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *m)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_trylock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)

cdef enum:
    POLL_SLICE_MS = 100       # longest uninterrupted block: Ctrl-C latency


cdef inline int64_t now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec
