"""A window as its process holds it: its memory, the other ranks' sizes,
its private communicators, its agent, its lock, and the epochs this
process has open on it (WindowCore). gloocy.rma.window's Win is the
handle mpi4py code sees.

Every operation completes before it returns: a Put has been applied at
the target (its agent replied) when Put returns. So Flush, Flush_local
and Sync have nothing left to wait for, a Fence is a barrier, Unlock and
Complete only let the targets know, and Rput & co. return requests that
are already complete. Operations on our own part of the window are
applied by the calling thread, under the same lock the agent takes.

Epochs are checked as MPI states them: an operation needs an access epoch
on its target (a Fence not marked MODE_NOSUCCEED, Start, Lock or
Lock_all), else ERR_RMA_SYNC.
"""

import os
import threading
import time

from gloocy.constants import PROC_NULL, UNDEFINED
from gloocy.errors import (ERR_GROUP, ERR_LOCKTYPE, ERR_RANK,
                           ERR_RMA_SYNC, ArgumentError, CollectiveTimeout,
                           GloocyError, PeerLostError)
from gloocy.groups import Group
from gloocy.rma import agent as _agent
from gloocy.rma.agent import COMPLETED, POSTED, REPLY, REQUEST, Mailbox
from gloocy.rma.constants import (LOCK_EXCLUSIVE, LOCK_SHARED, MODE_NOCHECK,
                                  MODE_NOSUCCEED, WIN_FLAVOR_DYNAMIC,
                                  WIN_FLAVOR_SHARED)
from gloocy.rma.locks import LockTable
from gloocy.rma.regions import Memory
from gloocy.rma.shared import Segment
from gloocy.transport.shm import host_identity

__all__ = ["WindowCore"]


LIVENESS = 5                      # a tag nothing is ever sent with


class WindowCore:
    """One window at this process. Made collectively over `comm`."""

    _probe_buffer = bytearray(1)

    def __init__(self, comm, flavor, unit, *, array=None, size=0):
        self.flavor, self.unit = flavor, unit
        self.coll = comm.Dup()                # Fence, Free, creation
        self.rank, self.size = self.coll.Get_rank(), self.coll.Get_size()
        self.wire = None                      # every message (the agent receives)
        self.mailbox = Mailbox()              # what the agent got for us
        self.segment = None
        try:
            table = self.coll.allgather((int(size), int(unit), host_identity(),
                                         os.getpid()))
            self.sizes = [t[0] for t in table]
            self.units = [t[1] for t in table]
            self.processes = [t[2:] for t in table]   # (host, pid): liveness checks
            if flavor == WIN_FLAVOR_SHARED and self.size > 1:
                self.segment = Segment(self.coll, self.sizes)
                array = self.segment.part(self.rank)
            self.memory = Memory(array, unit, dynamic=flavor == WIN_FLAVOR_DYNAMIC)
            self.locks = LockTable()
            self.origin_lock = threading.RLock()  # one round trip at a time
            # epochs this process has open as an origin / as a target
            self.fence_open = False
            self.access = None                # ranks of Start's group
            self.locked = {}                  # rank -> lock type (None: NOCHECK)
            self.locked_all = None            # Lock_all: its assertion
            self.exposed = None               # ranks of Post's group yet to Complete
            if self.size > 1:
                self.wire = comm.Dup()
                _agent.serve(self)
        except BaseException:
            self._free_comms()
            raise
        self.freed = False

    # -- at the target: what the agent does ------------------------------------

    def serve(self, source, request):
        """The reply to `source`'s request (None: later, a lock queued)."""
        kind = request[0]
        if kind == "lock":
            return ("ok", None) if self.locks.request(source, request[1]) else None
        if kind == "unlock":
            self._release(source)
            return ("ok", None)
        if kind == "complete":            # acknowledged: a Test after it sees it
            self.mailbox.put(source, COMPLETED, True)
            return ("ok", None)
        return ("ok", self.apply(request))

    def apply(self, request):
        """Do a data request to our memory; what it fetched."""
        kind, disp, count, datatype = request[:4]
        memory = self.memory
        if kind == "put":
            return memory.put(disp, count, datatype, request[4])
        if kind == "get":
            return memory.get(disp, count, datatype)
        if kind == "acc":
            return memory.accumulate(disp, count, datatype, request[5], request[4],
                                     request[6])
        if kind == "cas":
            return memory.compare_and_swap(disp, datatype, request[4], request[5])
        raise GloocyError(f"unknown RMA request {kind!r}")

    def _release(self, source):
        granted = self.locks.release(source)
        if granted is None:
            raise ArgumentError(f"Unlock: rank {source} holds no lock on rank "
                                f"{self.rank}'s window", ERR_RMA_SYNC)
        for rank in granted:              # our own waits on locks.changed
            if rank != self.rank:
                self.wire.send(("ok", None), rank, tag=REPLY)

    # -- at the origin -------------------------------------------------------------

    def check_rank(self, rank, name="target_rank"):
        rank = int(rank)
        if rank != PROC_NULL and not 0 <= rank < self.size:
            raise ArgumentError(f"{name}: {rank} is not a rank of the window "
                                f"(size {self.size})", ERR_RANK)
        return rank

    def check_epoch(self, rank, what):
        if (self.fence_open or rank in self.locked or self.locked_all is not None
                or (self.access is not None and rank in self.access)):
            return
        raise ArgumentError(f"{what}: no access epoch is open on rank {rank} (call "
                            "Fence, Start, Lock or Lock_all first)", ERR_RMA_SYNC)

    def target_extent(self, rank):
        """(size, disp_unit) of rank's memory; None for dynamic windows (the
        target checks its attached regions)."""
        if self.flavor == WIN_FLAVOR_DYNAMIC:
            return None
        return self.sizes[rank], self.units[rank]

    def run(self, rank, request):
        """Have `request` done at `rank`; what it fetched."""
        if rank == self.rank:
            return self.apply(request)
        return self._round_trip(rank, request)

    def _round_trip(self, rank, request):
        with self.origin_lock:
            self.wire.send(request, rank, tag=REQUEST)
            reply = self._await(rank, REPLY, request[0])
        if reply[0] == "error":
            raise ArgumentError(reply[2], reply[1])
        return reply[1]

    def _take(self, rank, tag, what):
        """The next message rank sent us with tag (the agent got it)."""
        return self.mailbox.take(rank, tag, self.coll.timeout, what,
                                 lambda: self._alive(rank))

    def _await(self, rank, tag, what):
        """The next message from rank with tag, which only this thread
        takes: probed for (a wait that timed out would poison the
        connections, and a blocking receive from a lost shared-memory peer
        would wait for its deadline), more and more lazily (up to 1 ms),
        checking every quarter second that rank lives."""
        start = time.monotonic()
        deadline, check = start + self.coll.timeout, start + _agent.LIVENESS_SECONDS
        delay = 0.0
        while True:
            message = self.wire.improbe(rank, tag)
            if message is not None:
                return message.recv()
            now = time.monotonic()
            if now >= check:
                self._alive(rank)
                check = now + _agent.LIVENESS_SECONDS
            if now >= deadline:
                raise CollectiveTimeout(f"{what}: rank {self.rank} heard nothing from "
                                        f"rank {rank} within {self.coll.timeout} s")
            time.sleep(delay)
            delay = min(max(delay * 1.5, 10e-6), 1e-3)

    def _alive(self, rank):
        """PeerLostError if rank is gone. On our host: its process is gone
        (or a zombie); elsewhere: posting a receive from a lost peer raises
        (the agent's probes notice a closed connection)."""
        if rank == self.rank or self.wire is None:
            return
        host, pid = self.processes[rank]
        if host == self.processes[self.rank][0]:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                state = "X"
            if state in ("Z", "X"):
                raise PeerLostError(f"rank {self.rank}: lost peer rank {rank} "
                                    f"(process {pid} is gone)", rank=rank)
            return
        self.wire.Irecv(self._probe_buffer, rank, LIVENESS).Cancel()

    def _tell(self, rank, tag):
        """A handshake to rank's main thread (ours: straight to the mailbox)."""
        if rank == self.rank:
            self.mailbox.put(rank, tag, True)
        else:
            self.wire.send(True, rank, tag=tag)

    # -- passive target ------------------------------------------------------------

    def lock(self, rank, lock_type, assertion):
        rank = self.check_rank(rank, "rank")
        if lock_type not in (LOCK_EXCLUSIVE, LOCK_SHARED):
            raise ArgumentError(f"lock_type: {lock_type} is neither LOCK_EXCLUSIVE "
                                "nor LOCK_SHARED", ERR_LOCKTYPE)
        if rank == PROC_NULL:
            return
        if rank in self.locked or self.locked_all is not None:
            raise ArgumentError(f"Lock: this process already has rank {rank} "
                                "locked", ERR_RMA_SYNC)
        if not assertion & MODE_NOCHECK:
            self._acquire(rank, lock_type)
        self.locked[rank] = None if assertion & MODE_NOCHECK else lock_type

    def unlock(self, rank):
        rank = self.check_rank(rank, "rank")
        if rank == PROC_NULL:
            return
        if rank not in self.locked:
            raise ArgumentError(f"Unlock: rank {rank} is not locked by this "
                                "process", ERR_RMA_SYNC)
        if self.locked.pop(rank) is not None:
            self._let_go(rank)

    def lock_all(self, assertion):
        if self.locked or self.locked_all is not None:
            raise ArgumentError("Lock_all: this process already holds locks on "
                                "this window", ERR_RMA_SYNC)
        taken = []
        try:
            if not assertion & MODE_NOCHECK:
                for rank in range(self.size):
                    self._acquire(rank, LOCK_SHARED)
                    taken.append(rank)
        except BaseException:
            for rank in taken:
                self._let_go(rank)
            raise
        self.locked_all = assertion

    def unlock_all(self):
        if self.locked_all is None:
            raise ArgumentError("Unlock_all: no Lock_all to end", ERR_RMA_SYNC)
        assertion, self.locked_all = self.locked_all, None
        if not assertion & MODE_NOCHECK:
            for rank in range(self.size):
                self._let_go(rank)

    def check_passive(self, rank, what):
        """Flush's rule: a lock on `rank` (None: on every rank) is held."""
        if self.locked_all is not None:
            return
        if rank is None:
            if self.locked:
                return
        elif rank == PROC_NULL or rank in self.locked:
            return
        where = "any rank" if rank is None else f"rank {rank}"
        raise ArgumentError(f"{what}: no passive-target epoch (Lock) is open on "
                            f"{where}", ERR_RMA_SYNC)

    def _acquire(self, rank, lock_type):
        if rank != self.rank:
            self._round_trip(rank, ("lock", lock_type))
            return
        table = self.locks
        with table.changed:
            if table.request(rank, lock_type):
                return
            deadline = time.monotonic() + self.coll.timeout
            while not table.holds(rank):
                left = deadline - time.monotonic()
                if left <= 0:
                    table.withdraw(rank, lock_type)
                    raise CollectiveTimeout(f"Lock: rank {rank} waited {self.coll.timeout} "
                                            "s for the lock of its own window")
                table.changed.wait(min(left, 1.0))

    def _let_go(self, rank):
        if rank == self.rank:
            self._release(rank)
        else:
            self._round_trip(rank, ("unlock",))

    # -- active target ---------------------------------------------------------------

    def fence(self, assertion):
        if self.locked or self.locked_all is not None:
            raise ArgumentError("Fence: a passive-target epoch (Lock) is still open",
                                ERR_RMA_SYNC)
        if self.size > 1:
            self.coll.Barrier()
        self.fence_open = not assertion & MODE_NOSUCCEED

    def _group_ranks(self, group, what):
        if not isinstance(group, Group):
            raise TypeError(f"{what}: expected a Group, got {group!r}")
        ranks = group.Translate_ranks(None, self.coll.Get_group())
        if any(r == UNDEFINED for r in ranks):
            raise ArgumentError(f"{what}: the group has processes outside the "
                                "window's group", ERR_GROUP)
        return ranks

    def start(self, group, assertion):
        ranks = self._group_ranks(group, "Start")
        if self.access is not None:
            raise ArgumentError("Start: an access epoch (Start) is already open",
                                ERR_RMA_SYNC)
        if not assertion & MODE_NOCHECK:
            for rank in ranks:          # each target has posted
                if rank == self.rank:
                    self._take(rank, POSTED, "Start")
                else:
                    self._await(rank, POSTED, "Start")
        self.access = set(ranks)

    def complete(self):
        if self.access is None:
            raise ArgumentError("Complete: no access epoch (Start) to end", ERR_RMA_SYNC)
        ranks, self.access = self.access, None
        for rank in sorted(ranks):      # our operations there are all done
            if rank == self.rank:
                self.mailbox.put(rank, COMPLETED, True)
            else:
                self._round_trip(rank, ("complete",))

    def post(self, group, assertion):
        ranks = self._group_ranks(group, "Post")
        if self.exposed is not None:
            raise ArgumentError("Post: an exposure epoch (Post) is already open",
                                ERR_RMA_SYNC)
        if not assertion & MODE_NOCHECK:
            for rank in ranks:
                self._tell(rank, POSTED)
        self.exposed = set(ranks)

    def wait(self):
        if self.exposed is None:
            raise ArgumentError("Wait: no exposure epoch (Post) to end", ERR_RMA_SYNC)
        for rank in sorted(self.exposed):
            self._take(rank, COMPLETED, "Wait")
            self.exposed.discard(rank)
        self.exposed = None

    def test(self):
        if self.exposed is None:
            raise ArgumentError("Test: no exposure epoch (Post) to end", ERR_RMA_SYNC)
        for rank in sorted(self.exposed):
            if self.mailbox.poll(rank, COMPLETED) is not None:
                self.exposed.discard(rank)
        if self.exposed:
            return False
        self.exposed = None
        return True

    # -- the end -------------------------------------------------------------------

    def free(self):
        """Collective: every rank's operations are done (a barrier), then
        the agent stops and the communicators go."""
        if self.size > 1:
            self.coll.Barrier()
        if self.wire is not None:
            _agent.retire(self)
        self.freed = True
        self._free_comms()
        self.memory = None
        self.segment = None

    def _free_comms(self):
        for name in ("wire", "coll"):
            comm = getattr(self, name, None)
            if comm is not None:
                try:
                    comm.Free()
                except GloocyError:
                    pass              # a poisoned world: nothing to say goodbye to
                setattr(self, name, None)

