# Links (_links.pxi): one process's connections, shared by every
# communicator derived from them.

cdef enum:
    MAX_SLEEPERS = 64             # threads blocked at once that can be woken


# What waits learn of how long looking pays (see learn_looks, _engine.pxi).
ctypedef struct Looks:
    int64_t now_ns                # the next wait looks this long before it sleeps
    uint32_t misses               # waits that slept since the last probe
    uint32_t probe_every          # misses before a wait looks the whole time


# The connections of one process to the others, shared by every communicator
# derived from them (frames carry their communicator's id). Threads take
# `lock` to touch the pairs, and drop it to block; whoever moves bytes wakes
# the sleepers, whose transfer it may have finished.
cdef class Links:
    cdef readonly int rank            # our rank among all the linked processes
    cdef readonly int size            # number of linked processes
    cdef readonly list pairs          # Pair per rank (None at our own rank,
                                      # UNCONNECTED where not connected yet)
    cdef pthread_mutex_t lock
    cdef Xfer *wild_head              # posted any-source receives of every
    cdef Xfer *wild_tail              # communicator, oldest first
    cdef uint64_t order               # p2p receives posted so far
    cdef readonly uint32_t next_id    # lowest communicator id never used here
    cdef int users                    # open contexts on these links
    cdef readonly bint closed         # closed for good (every context over them)
    cdef readonly object error        # first fatal error; poisons them all
    cdef bint failed                  # error is set (readable without the GIL)
    cdef tuple told                   # (why, code, culprit, origin) we told the peers
                                      # at the failure; peers that dial us after it
                                      # are told too (note_arrival)
    cdef int sleepers[MAX_SLEEPERS]   # eventfds of threads blocked in poll(2)
    cdef int nsleepers
    cdef void *scheds                 # unfinished nonblocking collectives (Sched
                                      # list, _schedule.pxd), run by progress_all
    cdef bint contended               # threads have waited for `lock`: spinners
                                      # drop it between spins, sleepers are woken
    cdef bint visited                 # the listener's thread takes `lock` now (or
                                      # waits for it): finding it held is no contention
    cdef public int64_t yield_ns      # after its spin, how long a wait keeps looking
                                      # with sched_yield() between looks before it
                                      # sleeps (> 0 where ranks outnumber CPUs)
    cdef Looks looks                  # how long waits on the pairs look (learnt)
    cdef public object connector      # connects UNCONNECTED peers (transport/lazy.py),
                                      # None when every pair was made at start-up
    cdef list views                   # weak references to the contexts over us
    cdef int arrivals                 # the connector holds pairs peers dialed (install them)
    cdef uint32_t arrived_word        # bumped (and futex-woken) at each arrival: a wait
                                      # asleep on its pairs' futex words sleeps on it too

    cdef void enter(self) noexcept nogil
    cdef bint try_enter(self) noexcept nogil   # enter() if the lock is free
    cdef void leave(self) noexcept nogil
    # Wake every sleeper (after moving bytes that may finish its transfer).
    cdef void wake(self) noexcept nogil
    cdef bint add_sleeper(self, int efd) noexcept nogil
    cdef void drop_sleeper(self, int efd) noexcept nogil
    # After a failure: install the pairs peers dialed and tell them why.
    cdef int _tell_arrivals(self) except -1


# The stand-in for every peer not connected yet (lazy connection set-up):
# one object, UNCONNECTED, in every slot of every links that has no pair
# yet, so that a rank of thousands holds no object per peer. It moves
# nothing and owns nothing; a send or receive to its slot goes through
# pair_of() (_context.pxi), which asks the links' connector for the real
# pair (dialing the peer, or taking the one the peer dialed) and installs
# it in the links and every context over them.
# (_links.pxi defines it as unconnected_pair, and `unconnected` its address
# for comparisons without the GIL; Python sees it as _core.UNCONNECTED.)
cdef class LazyPair(Pair):
    pass
