"""mpi4py's ``MPI.Win``: a handle on a window (gloocy.rma.core) with
mpi4py's methods, signatures and exceptions.

A Win is also what mpi4py's is, a buffer: ``memoryview(win)`` is this
process's part of the window (gloocy.memory.buffer, a C type, lends the
buffer protocol that a Python class cannot have on Python 3.11). ``Win()``
is WIN_NULL; ``Win(win)`` is a second handle on the same window, equal to
it; ``Free`` (collective) turns the handle into WIN_NULL.
"""

import numpy as np

from gloocy import bufspec
from gloocy import errhandler as _errhandlers
from gloocy.attributes import MPI_KEYVALS, Attributes, create_keyval, free_keyval
from gloocy.constants import BOTTOM, KEYVAL_INVALID, PROC_NULL
from gloocy.errors import (ERR_COMM, ERR_DISP, ERR_KEYVAL, ERR_RMA_FLAVOR,
                           ERR_SIZE, ERR_WIN, ArgumentError, GloocyError)
from gloocy.handles import Handled, forget
from gloocy.info import INFO_NULL, Info
from gloocy.memory import buffer
from gloocy.ops import SUM
from gloocy.packing import get_address
from gloocy.requests import CollectiveRequest
from gloocy.rma import spec
from gloocy.rma.constants import (LOCK_EXCLUSIVE, WIN_BASE, WIN_CREATE_FLAVOR,
                                  WIN_DISP_UNIT, WIN_FLAVOR_ALLOCATE,
                                  WIN_FLAVOR_CREATE, WIN_FLAVOR_DYNAMIC,
                                  WIN_FLAVOR_SHARED, WIN_MODEL, WIN_SIZE,
                                  WIN_UNIFIED)
from gloocy.rma.core import WindowCore

__all__ = ["Win", "WIN_NULL"]


def _comm(comm):
    """The window's communicator: an intracommunicator (default COMM_SELF)."""
    from gloocy import MPI
    from gloocy.communicator import Intracomm
    if comm is None:
        return MPI.COMM_SELF
    if not isinstance(comm, Intracomm):
        raise TypeError(f"comm: expected an Intracomm, got {comm!r}")
    if not comm:
        raise ArgumentError("comm: COMM_NULL", ERR_COMM)
    return comm


def _positive(value, name, error_class):
    value = int(value)
    if value <= 0:
        raise ArgumentError(f"{name}: must be positive, got {value}", error_class)
    return value


def _size(size):
    size = int(size)
    if size < 0:
        raise ArgumentError(f"size: negative size {size}", ERR_SIZE)
    return size


def _hints(info):
    if not isinstance(info, Info):
        raise TypeError(f"info: expected an Info, got {info!r}")
    return dict(info.items()) if info else {}


def _fill(message, data):
    """Put fetched `data` (the target's bytes) into an origin Message."""
    if message.nbytes:
        out = message.data.reshape(-1).view(np.uint8)
        out[...] = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    message.unpack()


class Win(buffer, Handled):
    """A window of memory for one-sided communication."""

    __slots__ = ("_core", "__weakref__")

    def __new__(cls, win=None):
        self = buffer.__new__(cls)
        self._core = None
        if win is not None:
            if not isinstance(win, Win):
                raise TypeError(f"expected a Win, got {win!r}")
            self._bind(win._core)
        return self

    def __init__(self, win=None):
        """(__new__ did it all.)"""

    def _bind(self, core):
        self._core = core
        if core is not None and core.export is not None:
            buffer.__init__(self, core.export)
        else:
            buffer.release(self)

    @classmethod
    def _made(cls, core, export):
        """A new handle on a window just made."""
        core.export = export
        core.base = buffer.frombuffer(export).address if export is not None else 0
        core.nbytes = core.memory.array.size if export is not None else 0
        core.name, core.errhandler = "", None
        core.attributes = Attributes()
        win = cls.__new__(cls)
        win._bind(core)
        return win

    def _live(self):
        core = self._core
        if core is None or core.freed:
            raise GloocyError("WIN_NULL (or a freed window) is not a window", ERR_WIN)
        return core

    # -- comparisons, pickling, handles ---------------------------------------

    def __bool__(self):
        return self._core is not None and not self._core.freed

    # Handled's, not those of the buffer a window also is
    __eq__, __ne__, __hash__ = Handled.__eq__, Handled.__ne__, None

    def __reduce__(self):
        if self._core is None:
            return "WIN_NULL" if self is WIN_NULL else (type(self), ())
        raise ValueError(f"cannot pickle {self!r}: a window lives in its processes")

    def __repr__(self):
        if self._core is None:
            return "<Win WIN_NULL>"
        core = self._core
        return f"<Win rank {core.rank} of {core.size}{' (freed)' if core.freed else ''}>"

    def _key(self):
        return self._core

    def free(self):
        """Free the window, if this handle is not null."""
        if self:
            self.Free()

    # -- construction ------------------------------------------------------------

    @classmethod
    def Create(cls, memory, disp_unit=1, info=INFO_NULL, comm=None):
        """A window over `memory` (BOTTOM or None: none). Collective."""
        comm, unit, hints = _comm(comm), _positive(disp_unit, "disp_unit", ERR_DISP), _hints(info)
        array, export = None, None
        if memory is not None and memory is not BOTTOM:
            array = bufspec._buffer(memory, "memory", False)[0]
            export = memory
        core = WindowCore(comm, WIN_FLAVOR_CREATE, unit, array=array,
                          size=0 if array is None else array.size)
        core.hints = hints
        return cls._made(core, export)

    @classmethod
    def Allocate(cls, size, disp_unit=1, info=INFO_NULL, comm=None):
        """A window over `size` new bytes of each rank. Collective."""
        comm, unit, hints = _comm(comm), _positive(disp_unit, "disp_unit", ERR_DISP), _hints(info)
        array = np.zeros(_size(size), np.uint8)
        core = WindowCore(comm, WIN_FLAVOR_ALLOCATE, unit, array=array, size=array.size)
        core.hints = hints
        return cls._made(core, array)

    @classmethod
    def Allocate_shared(cls, size, disp_unit=1, info=INFO_NULL, comm=None):
        """A window over `size` new bytes of each rank, all in one shared
        segment (ranks of one host only). Collective."""
        comm, unit, hints = _comm(comm), _positive(disp_unit, "disp_unit", ERR_DISP), _hints(info)
        size = _size(size)
        alone = np.zeros(size, np.uint8) if comm.Get_size() == 1 else None
        core = WindowCore(comm, WIN_FLAVOR_SHARED, unit, array=alone, size=size)
        core.hints = hints
        return cls._made(core, core.memory.array)

    @classmethod
    def Create_dynamic(cls, info=INFO_NULL, comm=None):
        """A window with no memory until Attach. Collective."""
        comm, hints = _comm(comm), _hints(info)
        core = WindowCore(comm, WIN_FLAVOR_DYNAMIC, 1)
        core.hints = hints
        return cls._made(core, None)

    def Attach(self, memory):
        """Expose `memory` in a dynamic window (targets: its addresses)."""
        core = self._dynamic("Attach")
        array = bufspec._buffer(memory, "memory", False)[0]
        core.memory.attach(get_address(memory), array)

    def Detach(self, memory):
        core = self._dynamic("Detach")
        core.memory.detach(get_address(memory))

    def _dynamic(self, what):
        core = self._live()
        if core.flavor != WIN_FLAVOR_DYNAMIC:
            raise ArgumentError(f"{what}: only a window from Create_dynamic attaches "
                                "memory", ERR_RMA_FLAVOR)
        return core

    def Free(self):
        """Free the window (collective); this handle becomes WIN_NULL."""
        core = self._live()
        core.attributes.clear(self)
        core.free()
        forget(core)
        self._core = None
        buffer.release(self)

    # -- what it is ------------------------------------------------------------

    def tomemory(self):
        """This process's part of the window, as an MPI.buffer."""
        core = self._live()
        if core.export is None:
            return buffer.fromaddress(0, 0)
        return buffer.frombuffer(core.export)

    @property
    def attrs(self):
        """(base address, size in bytes, disp_unit)."""
        core = self._live()
        return core.base, core.nbytes, core.unit

    @property
    def flavor(self):
        return self._live().flavor

    @property
    def model(self):
        self._live()
        return WIN_UNIFIED

    def Shared_query(self, rank):
        """(buffer, disp_unit) of rank's memory, if this process can load
        and store it: every rank's in an Allocate_shared window, else only
        its own (other ranks: an empty buffer). PROC_NULL: the lowest rank
        with memory."""
        core = self._live()
        rank = core.check_rank(rank, "rank")
        if rank == PROC_NULL:
            rank = next((r for r, s in enumerate(core.sizes) if s), 0)
        if core.segment is not None:
            return buffer.frombuffer(core.segment.part(rank)), core.units[rank]
        if rank == core.rank and core.export is not None:
            return buffer.frombuffer(core.export), core.unit
        return buffer.fromaddress(0, 0), core.units[rank]

    def Get_group(self):
        return self._live().coll.Get_group()

    group = property(Get_group)

    @property
    def group_size(self):
        return self._live().size

    @property
    def group_rank(self):
        return self._live().rank

    def Get_info(self):
        """A new Info with the window's hints."""
        return Info.Create(self._live().hints)

    def Set_info(self, info):
        self._live().hints = _hints(info)

    info = property(Get_info, Set_info)

    def Get_name(self):
        return "MPI_WIN_NULL" if self._core is None else self._live().name

    def Set_name(self, name):
        self._live().name = str(name)

    name = property(Get_name, Set_name)

    # -- attributes ------------------------------------------------------------

    @classmethod
    def Create_keyval(cls, copy_fn=None, delete_fn=None, nopython=False):
        return create_keyval(copy_fn, delete_fn, nopython)

    @classmethod
    def Free_keyval(cls, keyval):
        return free_keyval(keyval)

    def Get_attr(self, keyval):
        """The value under `keyval` (None if none); WIN_BASE, WIN_SIZE,
        WIN_DISP_UNIT, WIN_CREATE_FLAVOR and WIN_MODEL are the window's."""
        core = self._live()
        if keyval == KEYVAL_INVALID:
            raise ArgumentError("keyval: KEYVAL_INVALID", ERR_KEYVAL)
        predefined = {WIN_BASE: core.base, WIN_SIZE: core.nbytes,
                      WIN_DISP_UNIT: core.unit, WIN_CREATE_FLAVOR: core.flavor,
                      WIN_MODEL: WIN_UNIFIED}
        if keyval in predefined:
            return predefined[keyval]
        if keyval >= MPI_KEYVALS:
            return None
        return core.attributes.get(keyval)

    def Set_attr(self, keyval, attrval):
        self._live().attributes.set(self, keyval, attrval)

    def Delete_attr(self, keyval):
        self._live().attributes.delete(self, keyval)

    # -- error handlers ----------------------------------------------------------

    @classmethod
    def Create_errhandler(cls, errhandler_fn):
        """An error handler running ``errhandler_fn(win, errorcode)``."""
        return _errhandlers.create(errhandler_fn)

    def Set_errhandler(self, errhandler):
        """What Call_errhandler runs (gloocy's calls raise their errors as
        exceptions whatever the handler)."""
        self._live().errhandler = _errhandlers.checked(errhandler)

    def Get_errhandler(self):
        return _errhandlers.Errhandler(self._live().errhandler
                                       or _errhandlers.ERRORS_RETURN)

    def Call_errhandler(self, errorcode):
        core = self._live()
        _errhandlers.call(core.errhandler or _errhandlers.ERRORS_RETURN, self,
                          errorcode)

    # -- communication -----------------------------------------------------------

    def _access(self, origin, target_rank, target, readonly, what):
        """(core, rank, Access) of a Put/Get/Accumulate; rank PROC_NULL:
        nothing to do."""
        core = self._live()
        rank = core.check_rank(target_rank)
        acc = spec.access(origin, rank, target, readonly=readonly)
        if rank != PROC_NULL:
            core.check_epoch(rank, what)
            _in_range(core, rank, acc.disp, acc.count, acc.datatype)
        return core, rank, acc

    def Put(self, origin, target_rank, target=None):
        """Write origin into the target's memory."""
        core, rank, acc = self._access(origin, target_rank, target, True, "Put")
        if rank != PROC_NULL:
            core.run(rank, ("put",) + acc.target + (acc.origin.data,))

    def Get(self, origin, target_rank, target=None):
        """Read the target's memory into origin."""
        core, rank, acc = self._access(origin, target_rank, target, False, "Get")
        if rank != PROC_NULL:
            _fill(acc.origin, core.run(rank, ("get",) + acc.target))

    def Accumulate(self, origin, target_rank, target=None, op=SUM):
        """target = origin <op> target, elementwise (op: a predefined one,
        REPLACE or NO_OP); atomic per element."""
        op = spec.accumulate_op(op)
        core, rank, acc = self._access(origin, target_rank, target, True, "Accumulate")
        if rank != PROC_NULL:
            spec.same_elements(acc)
            spec.check_op_type(op, acc.datatype.np_dtype)
            core.run(rank, ("acc",) + acc.target + (acc.origin.data, op, False))

    def Get_accumulate(self, origin, result, target_rank, target=None, op=SUM):
        """result = the target's elements, then target = origin <op> target,
        in one atomic step."""
        op = spec.accumulate_op(op)
        core, rank, acc = self._access(origin, target_rank, target, True,
                                       "Get_accumulate")
        if rank == PROC_NULL:
            return
        fetched = spec.result_message(result, rank, acc)
        spec.same_elements(acc)
        spec.check_op_type(op, acc.datatype.np_dtype)
        _fill(fetched, core.run(rank, ("acc",) + acc.target + (acc.origin.data, op, True)))

    def Fetch_and_op(self, origin, result, target_rank, target_disp=0, op=SUM):
        """Get_accumulate of one element at target_disp."""
        op = spec.accumulate_op(op)
        one = self._one(target_rank, target_disp, "Fetch_and_op",
                        [("origin", origin, True), ("result", result, False)])
        if one is not None:
            core, rank, disp, (value, fetched) = one
            datatype = value.datatype
            spec.check_op_type(op, datatype.np_dtype)
            _fill(fetched, core.run(rank, ("acc", disp, 1, datatype, value.data, op, True)))

    def Compare_and_swap(self, origin, compare, result, target_rank, target_disp=0):
        """result = the target element; it becomes origin if it was
        compare (bytewise), in one atomic step."""
        one = self._one(target_rank, target_disp, "Compare_and_swap",
                        [("origin", origin, True), ("compare", compare, True),
                         ("result", result, False)])
        if one is not None:
            core, rank, disp, (value, expected, fetched) = one
            _fill(fetched, core.run(rank, ("cas", disp, 1, value.datatype, value.data,
                                           expected.data)))

    def _one(self, target_rank, target_disp, what, specs):
        """(core, rank, disp, messages) of an operation on one element: the
        (name, spec, readonly) buffers hold one element each, all of one
        datatype; None for PROC_NULL."""
        core = self._live()
        rank = core.check_rank(target_rank)
        if rank == PROC_NULL:
            return None
        messages = [spec.single(buf, rank, name, readonly) for name, buf, readonly in specs]
        for (name, _, _), message in zip(specs[1:], messages[1:]):
            if message.datatype != messages[0].datatype:
                raise ValueError(f"mismatch in origin and {name} datatypes")
        disp = int(target_disp)
        if disp < 0:
            raise ArgumentError(f"target_disp: negative displacement {disp}", ERR_DISP)
        core.check_epoch(rank, what)
        _in_range(core, rank, disp, 1, messages[0].datatype)
        return core, rank, disp, messages

    # the request forms: the operation is complete when they return
    def Rput(self, origin, target_rank, target=None):
        self.Put(origin, target_rank, target)
        return CollectiveRequest._finished()

    def Rget(self, origin, target_rank, target=None):
        self.Get(origin, target_rank, target)
        return CollectiveRequest._finished()

    def Raccumulate(self, origin, target_rank, target=None, op=SUM):
        self.Accumulate(origin, target_rank, target, op)
        return CollectiveRequest._finished()

    def Rget_accumulate(self, origin, result, target_rank, target=None, op=SUM):
        self.Get_accumulate(origin, result, target_rank, target, op)
        return CollectiveRequest._finished()

    # -- synchronization -----------------------------------------------------------

    def Fence(self, assertion=0):
        """End one fence epoch and start the next (collective)."""
        self._live().fence(int(assertion))

    def Start(self, group, assertion=0):
        """Begin an access epoch on group's ranks (waits for their Post)."""
        self._live().start(group, int(assertion))

    def Complete(self):
        self._live().complete()

    def Post(self, group, assertion=0):
        """Begin an exposure epoch to group's ranks."""
        self._live().post(group, int(assertion))

    def Wait(self):
        """End the exposure epoch: every rank of Post's group completed."""
        self._live().wait()
        return True

    def Test(self):
        return self._live().test()

    def Lock(self, rank, lock_type=LOCK_EXCLUSIVE, assertion=0):
        """Begin a passive-target epoch on rank (waits for its lock)."""
        self._live().lock(rank, int(lock_type), int(assertion))

    def Unlock(self, rank):
        self._live().unlock(rank)

    def Lock_all(self, assertion=0):
        self._live().lock_all(int(assertion))

    def Unlock_all(self):
        self._live().unlock_all()

    def Flush(self, rank):
        """Operations are complete when they return: nothing to wait for."""
        core = self._live()
        core.check_passive(core.check_rank(rank, "rank"), "Flush")

    def Flush_all(self):
        self._live().check_passive(None, "Flush_all")

    def Flush_local(self, rank):
        core = self._live()
        core.check_passive(core.check_rank(rank, "rank"), "Flush_local")

    def Flush_local_all(self):
        self._live().check_passive(None, "Flush_local_all")

    def Sync(self):
        """The window's memory has one copy: nothing to synchronize."""
        self._live()


def _in_range(core, rank, disp, count, datatype):
    extent = core.target_extent(rank)
    if extent is not None:
        spec.check_range(disp, count, datatype, extent[0], extent[1], rank)


WIN_NULL = Win()
