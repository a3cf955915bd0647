/* Sleeping on a 32-bit word of memory shared between processes (or threads):
   a futex costs one system call to sleep and one to wake, where a poke
   through a socket costs a send, a poll and a recv. The word lives in a
   MAP_SHARED segment, so the futex is not FUTEX_PRIVATE: the kernel keys it
   by the page, and every process mapping that page sees the same futex. */
#include <errno.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

/* Sleep while *p == v, at most ns nanoseconds (a signal ends it early:
   EINTR). 0 when woken or the word had changed, else -1 with errno set
   (ETIMEDOUT, EINTR, EAGAIN: the word was not v). */
static inline int futex_sleep(uint32_t *p, uint32_t v, int64_t ns)
{
    struct timespec t;
    t.tv_sec = (time_t)(ns / 1000000000);
    t.tv_nsec = (long)(ns % 1000000000);
    return (int)syscall(SYS_futex, p, FUTEX_WAIT, v, &t, NULL, 0);
}

/* Wake up to n sleepers on p. */
static inline void futex_wake(uint32_t *p, int n)
{
    syscall(SYS_futex, p, FUTEX_WAKE, n, NULL, NULL, 0);
}

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449         /* Linux 5.16 */
#endif

/* Sleep until any of the n words w (the kernel's struct futex_waitv, laid
   out as WordWait in _sys.pxd) no longer holds its value, at most ns
   nanoseconds. n == 1 is a plain futex_sleep (every kernel has it); more
   need futex_waitv (ENOSYS before Linux 5.16). 0 or the index of the word
   that woke us; else -1 with errno as futex_sleep's. */
static inline int futex_sleep_any(void *w, int n, int64_t ns)
{
    struct timespec t;
    uint64_t *first = (uint64_t *)w;    /* val, uaddr, ... */
    if (n == 1)
        return futex_sleep((uint32_t *)(uintptr_t)first[1], (uint32_t)first[0], ns);
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)(ns / 1000000000);
    t.tv_nsec += (long)(ns % 1000000000);
    if (t.tv_nsec >= 1000000000) {
        t.tv_sec += 1;
        t.tv_nsec -= 1000000000;
    }
    return (int)syscall(SYS_futex_waitv, w, (unsigned)n, 0, &t, CLOCK_MONOTONIC);
}

/* Set the flag to 0, returning what it held (who sleeps, and how). */
static inline uint32_t flag_swap_zero(uint32_t *p)
{
    if (__atomic_load_n(p, __ATOMIC_RELAXED) == 0)
        return 0;
    return __atomic_exchange_n(p, 0, __ATOMIC_ACQ_REL);
}
