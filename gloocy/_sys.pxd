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
    ctypedef unsigned long pthread_t
    pthread_t pthread_self()

cdef enum:
    POLL_SLICE_MS = 100       # longest uninterrupted block: Ctrl-C latency

# A futex word to sleep on, as futex_waitv(2) takes it (_futex.h sleeps on
# a vector of them). Shared-memory pairs hand theirs out (Pair.wait_words).
ctypedef struct WordWait:
    uint64_t val              # sleep while the word holds this
    uint64_t uaddr            # the word's address
    uint32_t flags            # WORD_U32: a 32-bit, process-shared futex
    uint32_t _reserved

cdef enum:
    WORD_U32 = 2              # FUTEX2_SIZE_U32
    WORDS_MAX = 128           # the most futex_waitv sleeps on
    WORDS_NONE = -1           # wait_words: this pair cannot wake a futex (poll it)
    WORDS_READY = -2          # wait_words: it can move already (don't sleep)
    WORD_AWAKE = 0            # a sleep flag in shared memory: its owner is awake,
    WORD_ASLEEP = 1           # asleep on the flag itself (futex_wake it), or
    WORD_POLLING = 2          # asleep in poll(2) (poke its socket)


cdef inline int64_t now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec
