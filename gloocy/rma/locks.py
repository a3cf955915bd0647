"""Passive-target locks of one window at its own process (MPI_Win_lock):
who holds them and who waits, first come first served.

Any number of ranks may hold the lock shared, or one rank exclusive. A
request is granted at once when nobody waits before it and it is
compatible with the holders; else it queues, and each release grants the
requests at the head of the queue that have become compatible.
"""

import collections
import threading

from gloocy.rma.constants import LOCK_EXCLUSIVE

__all__ = ["LockTable"]


class LockTable:
    """The lock of one window at this process."""

    def __init__(self):
        self.exclusive = None                 # the rank holding it exclusive
        self.shared = collections.Counter()   # rank -> shared holds
        self.queue = collections.deque()      # (rank, lock_type) waiting
        self.changed = threading.Condition()  # held while the table changes

    def _fits(self, lock_type):
        if self.exclusive is not None:
            return False
        return lock_type != LOCK_EXCLUSIVE or not self.shared

    def _take(self, rank, lock_type):
        if lock_type == LOCK_EXCLUSIVE:
            self.exclusive = rank
        else:
            self.shared[rank] += 1

    def request(self, rank, lock_type):
        """True if `rank` holds the lock now; else it waits in the queue."""
        with self.changed:
            if not self.queue and self._fits(lock_type):
                self._take(rank, lock_type)
                return True
            self.queue.append((rank, lock_type))
            return False

    def release(self, rank):
        """`rank` lets go; the ranks granted the lock by it (None if `rank`
        held none)."""
        with self.changed:
            if self.exclusive == rank:
                self.exclusive = None
            elif self.shared[rank] > 0:
                self.shared[rank] -= 1
                if not self.shared[rank]:
                    del self.shared[rank]
            else:
                return None
            granted = []
            while self.queue and self._fits(self.queue[0][1]):
                waiter, lock_type = self.queue.popleft()
                self._take(waiter, lock_type)
                granted.append(waiter)
            self.changed.notify_all()
            return granted

    def holds(self, rank):
        return self.exclusive == rank or self.shared[rank] > 0

    def withdraw(self, rank, lock_type):
        """Take back a request that still waits (its waiter gave up)."""
        with self.changed:
            try:
                self.queue.remove((rank, lock_type))
            except ValueError:
                return False
            return True
