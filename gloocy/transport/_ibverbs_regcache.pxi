# The registration cache of user buffers (included by _ibverbs.pyx): one per
# device (its protection domain), shared by the pairs of the process.
#
# A rendezvous needs its buffer registered. Registering costs a system call
# and pinning every page, so a registration is kept for the next transfer
# that falls inside it, but only while the memory cannot have gone away: a
# buffer freed and another allocated at the same address has other pages
# behind it, and a kept registration would still point at the old ones
# (the HCA would read or write memory nobody owns: silent corruption).
#
# The transport only sees addresses. An address alone cannot tell, short of
# hooking munmap/madvise as UCX and Open MPI do, which is too much here; so a
# registration is kept only when the object that owns the memory is known:
# the core tells us (its buffer watch, `note_buffer`) of every user buffer a
# call acquires. The entry holds a weak reference to that owner: the owner's
# death (the moment its memory may be freed) deregisters the entry, and a
# hit also checks that the owner still exports the same address and length
# (an array resized in place). We hold no strong reference: a strong one
# would keep users' arrays alive, up to the cache's size, after they dropped
# them. Memory with no known owner (the core's own scratch buffers, objects
# without weak references such as bytes) is registered for one transfer
# and deregistered after it, as before.
#
# Bounded by GLOOCY_IB_REG_CACHE_BYTES (registered bytes, whole pages) and
# MAX_ENTRIES; the least recently used entries no transfer uses go first.
# When ibv_reg_mr fails (ENOMEM: the locked-memory limit) unused entries are
# evicted and it is tried again; if it still fails the caller falls back
# (eager copies when sending, the bounce buffer when receiving).

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_STRIDES
from collections import OrderedDict
import weakref

cdef enum:
    MAX_ENTRIES = 64      # bounds the linear search of a lookup
    RECENT = 16           # user buffers remembered (note_buffer)
    PAGE = 4096           # registrations are rounded out to whole pages


# (weak reference to the owner, address, length) of the user buffers calls
# acquired lately, newest last: the candidates for owning registered memory.
_recent = []


def note_buffer(obj, size_t addr, Py_ssize_t nbytes):
    """The core's buffer watch: `obj` exports nbytes at addr for a call."""
    try:
        ref = weakref.ref(obj)
    except TypeError:
        return                 # no weak references: never cached
    _recent.append((ref, addr, nbytes))
    if len(_recent) > RECENT:
        del _recent[0]


cdef bint _exports(object owner, size_t addr, Py_ssize_t nbytes, bint *writable):
    """Does `owner` (still) export exactly nbytes at addr?"""
    cdef Py_buffer view
    try:
        PyObject_GetBuffer(owner, &view, PyBUF_STRIDES)
    except Exception:
        return False
    same = <size_t>view.buf == addr and view.len == nbytes
    writable[0] = not view.readonly
    PyBuffer_Release(&view)
    return same


cdef class RegEntry:
    """One registration: [lo, hi) with `access`, used by `refs` transfers."""
    cdef glv_mr *mr
    cdef size_t lo, hi
    cdef int access
    cdef int refs
    cdef bint cached               # kept after use (its owner is known)
    cdef bint dead                 # its owner went while in use: drop at release
    cdef object owner              # weak reference; calls us when it dies
    cdef size_t owner_addr
    cdef Py_ssize_t owner_len
    cdef RegCache cache

    def __call__(self, ref):
        """The owner died: its memory may be freed now."""
        if self.cache is not None:
            self.cache._owner_gone(self)


cdef class RegCache:
    cdef glv_pd *pd
    cdef public int64_t limit      # bytes kept registered at most (0: none)
    cdef int64_t nbytes
    cdef object lru                # id -> RegEntry, least recently used first
    cdef readonly dict stats

    def __cinit__(self):
        self.lru = OrderedDict()
        self.stats = dict(hits=0, misses=0, invalidations=0, evictions=0,
                          refused=0)

    def counters(self):
        """The counters, with the entries and bytes kept now."""
        return dict(self.stats, entries=len(self.lru), bytes=self.nbytes)

    cdef RegEntry acquire(self, const char *addr, int64_t n, int access):
        """A registration covering [addr, addr+n) with `access` for one
        transfer (release() it after); None when the device refuses."""
        cdef size_t a = <size_t>addr, b = a + <size_t>n
        cdef RegEntry e
        cdef bint writable
        for e in tuple(self.lru.values()):
            if e.lo <= a and b <= e.hi and (e.access & access) == access and not e.dead:
                if not _exports(e.owner(), e.owner_addr, e.owner_len, &writable):
                    self._invalidate(e)
                    continue
                self.lru.move_to_end(id(e))
                self.stats["hits"] += 1
                e.refs += 1
                return e
        self.stats["misses"] += 1
        e = self._owned(a, b, access) if self.limit > 0 else None
        if e is None:
            e = RegEntry.__new__(RegEntry)
            e.mr = self._register(a, n, access)
            if e.mr is NULL:
                self.stats["refused"] += 1
                return None
        e.refs = 1
        return e

    cdef RegEntry _owned(self, size_t a, size_t b, int access):
        """Register and keep the whole buffer of the recent owner of
        [a, b), if one is known and it fits; None otherwise."""
        cdef RegEntry e
        cdef bint writable
        cdef size_t lo, hi
        for ref, addr, length in reversed(_recent):
            owner = ref()
            if (owner is not None and addr <= a and b <= addr + <size_t>length
                    and _exports(owner, addr, length, &writable)):
                break
        else:
            return None
        lo = addr & ~<size_t>(PAGE - 1)
        hi = (addr + <size_t>length + PAGE - 1) & ~<size_t>(PAGE - 1)
        if <int64_t>(hi - lo) > self.limit:
            return None
        while ((self.nbytes + <int64_t>(hi - lo) > self.limit
                or len(self.lru) >= MAX_ENTRIES) and self._evict_one()):
            pass
        if self.nbytes + <int64_t>(hi - lo) > self.limit or len(self.lru) >= MAX_ENTRIES:
            return None                # what is kept is in use
        if writable:                   # one registration for both directions
            access |= GLV_ACCESS_LOCAL_WRITE | GLV_ACCESS_REMOTE_READ
        e = RegEntry.__new__(RegEntry)
        e.mr = self._register(lo, hi - lo, access)
        if e.mr is NULL:
            return None
        e.lo, e.hi, e.access, e.cached = lo, hi, access, True
        e.owner_addr, e.owner_len, e.cache = addr, length, self
        e.owner = weakref.ref(owner, e)
        self.lru[id(e)] = e
        self.nbytes += <int64_t>(hi - lo)
        return e

    cdef glv_mr *_register(self, size_t addr, size_t n, int access):
        """ibv_reg_mr, evicting unused entries while the device refuses."""
        cdef glv_mr *mr
        while True:
            mr = glv.reg_mr(self.pd, <void *>addr, n, access)
            if mr is not NULL or not self._evict_one():
                return mr

    cdef bint _evict_one(self) except -1:
        """Deregister the least recently used entry not in use; False if
        there is none."""
        cdef RegEntry e
        for e in self.lru.values():
            if e.refs == 0:
                self._drop(e, "evictions")
                return True
        return False

    cdef int release(self, RegEntry e) except -1:
        """A transfer is done with `e`."""
        e.refs -= 1
        if e.refs == 0 and (e.dead or not e.cached):
            if e.cached:
                self._drop(e, None)
            else:
                _dereg(&e.mr)
        return 0

    def _owner_gone(self, RegEntry e):
        if e.mr is not NULL and e.cached and not e.dead:
            self._invalidate(e)

    cdef int _invalidate(self, RegEntry e) except -1:
        """The memory of `e` may have gone: it is never used again."""
        self.stats["invalidations"] += 1
        if e.refs:
            e.dead = True              # deregistered when its transfer ends
        else:
            self._drop(e, None)
        return 0

    cdef int _drop(self, RegEntry e, str why) except -1:
        if why is not None:
            self.stats[why] += 1
        if self.lru.pop(id(e), None) is not None:
            self.nbytes -= <int64_t>(e.hi - e.lo)
        e.owner = None
        e.cache = None
        _dereg(&e.mr)
        return 0

    def close(self):
        """Deregister everything (the device closes)."""
        cdef RegEntry e
        for e in tuple(self.lru.values()):
            self._drop(e, None)
