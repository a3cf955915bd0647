# Links: one process's connections, shared by every communicator derived from
# them. Frames carry their communicator's id, so a Dup or Split costs no
# socket: only an agreement on a fresh id (see Context.derive).

from cpython.list cimport PyList_GET_ITEM
from cpython.object cimport PyObject


cdef class Links:
    """The pairs to every other process, a lock, and what the communicators
    over them share: the any-source receives and the next free id."""

    def __cinit__(self, int rank, int size, list pairs):
        cdef Py_ssize_t i
        self.rank = rank
        self.size = size
        self.pairs = pairs
        self.next_id = 1              # 0 is the first context's
        self.looks.now_ns = (<int64_t>1) << 62    # no wait seen yet: look fully
        self.looks.probe_every = LOOK_PROBE_MIN
        self.views = []
        pthread_mutex_init(&self.lock, NULL)
        for i in range(len(pairs)):   # (a C loop: thousands of unconnected slots)
            if _is_pair(PyList_GET_ITEM(pairs, i)):
                p = pairs[i]
                (<Pair>p).wild_head = &self.wild_head
                (<Pair>p).wild_tail = &self.wild_tail

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.pairs is not None:
            for i in range(len(self.pairs)):
                p = self.pairs[i]
                if p is not None and p is not unconnected_pair:
                    (<Pair>p).wild_head = (<Pair>p).wild_tail = NULL
        pthread_mutex_destroy(&self.lock)

    cdef void enter(self) noexcept nogil:
        if pthread_mutex_trylock(&self.lock) != 0:
            if not self.visited:
                self.contended = True   # threads share the links: take turns
            pthread_mutex_lock(&self.lock)

    cdef bint try_enter(self) noexcept nogil:
        if pthread_mutex_trylock(&self.lock) == 0:
            return True
        if not self.visited:
            self.contended = True
        return False

    cdef void leave(self) noexcept nogil:
        pthread_mutex_unlock(&self.lock)

    cdef void wake(self) noexcept nogil:
        cdef uint64_t one = 1
        cdef int i
        for i in range(self.nsleepers):
            c_write(self.sleepers[i], &one, sizeof(one))

    cdef bint add_sleeper(self, int efd) noexcept nogil:
        if self.nsleepers == MAX_SLEEPERS:
            return False
        self.sleepers[self.nsleepers] = efd
        self.nsleepers += 1
        return True

    cdef void drop_sleeper(self, int efd) noexcept nogil:
        cdef int i
        for i in range(self.nsleepers):
            if self.sleepers[i] == efd:
                self.nsleepers -= 1
                self.sleepers[i] = self.sleepers[self.nsleepers]
                return

    def close(self, bint clean):
        """Close every pair, with a goodbye first when `clean`. Once."""
        cdef Py_ssize_t i
        if self.closed:
            return
        self.closed = True
        if self.connector is not None:    # why we stopped is in the store
            self.connector.recorded()     # before our peers see us go
        for i in range(len(self.pairs)):
            p = self.pairs[i]
            if p is not None and p is not unconnected_pair:
                (<Pair>p).shutdown(clean)
        connector, self.connector = self.connector, None
        if connector is not None:
            connector.close(clean)

    def note_arrival(self, bint wait=True):
        """The connector holds a pair a peer dialed: the next progress
        installs it (a sleeper is woken: it may be an any-source receive's).
        From the listener's thread: the sleepers are read under the lock,
        as their owners change them (an eventfd dropped and closed may be
        another file by now). A wait asleep on futex words (block_on_words)
        sleeps on arrived_word too: it is bumped and woken under the lock,
        so a sleeper that read it before it slept is woken, or sees it
        changed. The lock is taken without enter(): this thread is no
        rank's, and enter() finding it held (a rank waiting) would mark the
        links as contended for good: no wait would sleep on futex words.
        For the same reason `visited` tells a rank's enter() that finds
        the lock held meanwhile that it is held by this thread.
        Without `wait` (a listener serving many ranks must wait for none
        of them), a lock held by another thread is not waited for: the
        word is bumped and woken without it (only this thread writes it; a
        sleeper sees it changed, or is woken), and False says to call
        again soon for the sleepers in poll(2) (a rank at work holds the
        lock; it looks at `arrivals` before it sleeps)."""
        self.arrivals = 1
        self.visited = True
        if not wait:
            if pthread_mutex_trylock(&self.lock) != 0:
                self.visited = False
                self.arrived_word += 1
                futex_wake(&self.arrived_word, MAX_SLEEPERS)
                return False
        else:
            with nogil:
                pthread_mutex_lock(&self.lock)
        try:
            if self.told is not None:
                self._tell_arrivals()
        finally:
            self.arrived_word += 1
            futex_wake(&self.arrived_word, MAX_SLEEPERS)
            self.wake()
            self.leave()
            self.visited = False
        return True

    cdef int _tell_arrivals(self) except -1:
        """After a failure (poisoned: no call will install them), peers that
        dial us wait for us in a call: tell them why we stopped, as fail()
        told the peers connected then (the lock held)."""
        cdef Pair pair
        why, code, culprit, origin = self.told
        self.arrivals = 0
        connector = self.connector
        if connector is None:
            return 0
        for peer, p in connector.arrived():
            install_pair(self, peer, p)
            pair = <Pair>p
            if pair.peer != origin:
                pair.say_abort(why, code, culprit, origin)
            pair.abandon()
        return 0

    def connection_fds(self):
        """The fds the connections made so far hold (for leak checks: they
        live as long as the links)."""
        return set().union(*(p.held_fds() for p in self.pairs
                             if p is not None and p is not unconnected_pair))

    @property
    def connected(self):
        """The ranks we hold a connection to."""
        return [i for i, p in enumerate(self.pairs)
                if p is not None and p is not unconnected_pair]


cdef class LazyPair(Pair):
    """The stand-in for every peer not connected yet (UNCONNECTED): it
    moves nothing, and is never posted to (pair_of() connects the slot
    first)."""

    def __init__(self):
        self.rank = self.peer = -1

    cdef int post_send(self, Xfer *x) except -1 nogil:
        return _posted_unconnected()

    cdef int post_recv(self, Xfer *x) except -1 nogil:
        return _posted_unconnected()

    cdef int progress(self) except -1 nogil:
        return 0

    cdef int shutdown(self, bint clean) except -1:
        return 0                      # shared by every links: never closed


cdef int _posted_unconnected() except -1 with gil:
    raise RuntimeError("a transfer was posted to an unconnected peer's "
                       "stand-in (post through pair_of())")


cdef LazyPair unconnected_pair = LazyPair()
cdef void *unconnected = <void *>unconnected_pair
UNCONNECTED = unconnected_pair


cdef inline bint _is_pair(PyObject *slot) noexcept:
    """Whether a slot of a pairs list (a borrowed pointer: no reference
    counted, which thousands of slots a rank would cost) holds a real pair,
    not None or UNCONNECTED."""
    return <void *>slot != <void *>None and <void *>slot != unconnected
