# cython: language_level=3
"""The mpi4py-like Communicator: a thin layer over the Cython Context.

Upper-case methods move buffers (numpy arrays, bytearray, array.array,
memoryview...) without copies; lower-case methods move picklable objects.
A buffer spec is parsed once, by the message layer (`_msg`), into what the
core moves; the Context's entry points are called in C.
"""

from libc.stdint cimport int64_t, uint32_t
from libc.string cimport memcpy
from cpython.object cimport Py_TPFLAGS_HEAPTYPE, PyObject, PyTypeObject, newfunc
from cpython.type cimport PyType_HasFeature, PyType_Modified

from gloocy._core cimport (Buf, Context, I64, Links, _counts, call_recv_new,
                           DT_BYTES, DT_INT64, start_inter_allreduce,
                           start_inter_reduce, start_inter_reduce_scatter,
                           start_neighbors)
from gloocy.requests cimport NbcRequest, nbc_request, p2p_request
from gloocy._msg cimport Message, memory_buf, message, vector_message

import os
import pickle
import sys
import zlib
from array import array

import numpy as np

from gloocy import _core, bufspec
from gloocy import ops as _ops
from gloocy import requests as _requests
from gloocy.constants import (ANY_SOURCE, ANY_TAG, COMM_TYPE_SHARED, IN_PLACE,
                              KEYVAL_INVALID, PROC_NULL, TAG_UB)
from gloocy.constants import (COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED,
                              COMM_TYPE_RESOURCE_GUIDED, ROOT, UNDEFINED)
from gloocy.datatypes import BYTE
from gloocy.constants import LASTUSEDCODE
from gloocy.errors import last_used_code
from gloocy.errors import (ArgumentError, ERR_ARG, ERR_BUFFER, ERR_COMM,
                           ERR_COUNT, ERR_GROUP, ERR_KEYVAL)
from gloocy.groups import Group, IDENT, CONGRUENT
from gloocy.attributes import Attributes, MPI_KEYVALS, create_keyval, free_keyval
from gloocy.info import Info
from gloocy import errhandler as _errhandlers
from gloocy.errhandler import ERRORS_RETURN
from gloocy.status import Status
from gloocy.transport.shm import host_identity

__all__ = ["Communicator", "Comm", "Intracomm", "Intercomm", "IN_PLACE", "Status", "ANY_SOURCE", "ANY_TAG",
           "PROC_NULL"]
__all__ += ["Topocomm", "Cartcomm", "Graphcomm", "Distgraphcomm"]

cdef int MAX_CODE = _ops.MAX.code

include "_fold.pxi"
include "_derive.pxi"
include "_pickled.pxi"


cdef inline int _any(int source):
    """The core's any-source (-1) for mpi4py's ANY_SOURCE."""
    return -1 if source == ANY_SOURCE else source


def _proc_null(status):
    if status is not None:
        status._set(PROC_NULL, ANY_TAG, 0)
    return True


SPLIT_TYPES = (UNDEFINED, COMM_TYPE_SHARED, COMM_TYPE_HW_GUIDED,
               COMM_TYPE_HW_UNGUIDED, COMM_TYPE_RESOURCE_GUIDED)
HW_RESOURCE, SHARED_MEMORY = "mpi_hw_resource_type", "mpi_shared_memory"


cdef int _check_split_type(split_type) except -1:
    if split_type not in SPLIT_TYPES:
        raise ArgumentError(f"split_type: {split_type} is not a split type",
                            ERR_ARG)
    return 0


cdef object _split_type_color(split_type, list hosts, Py_ssize_t me, info):
    """Split_type's color for the rank at `me` in `hosts` (every rank's
    host): its host's first index, or UNDEFINED (see Intracomm.Split_type)."""
    color = hosts.index(hosts[me])
    if split_type == COMM_TYPE_HW_UNGUIDED:
        if len(set(hosts)) == 1:                # no smaller level known
            return UNDEFINED
        if info:
            info.Set(HW_RESOURCE, SHARED_MEMORY)
    elif split_type in (COMM_TYPE_HW_GUIDED, COMM_TYPE_RESOURCE_GUIDED):
        if not info or info.Get(HW_RESOURCE) != SHARED_MEMORY:
            return UNDEFINED
    elif split_type == UNDEFINED:
        return UNDEFINED
    return color


cdef list _ends(list sizes):
    """Offsets of blocks of these sizes laid end to end."""
    cdef list out = []
    cdef int64_t at = 0
    for n in sizes:
        out.append(at)
        at += n
    return out


cdef I64 _blocks(Message m, int size, str name):
    """Byte sizes of `size` equal blocks filling message m (end to end)."""
    if m.count % size:
        raise ArgumentError(f"{name}: {m.count} items do not split into "
                            f"{size} equal blocks", ERR_COUNT)
    return I64.filled(size, m.buf.nbytes // size)


include "_comm_base.pxi"
include "_comm_p2p.pxi"
include "_comm_collectives.pxi"


cdef class Comm(_Collectives):
    """Any communicator (mpi4py's Comm): point-to-point, collectives, and
    new communicators made from it."""

    # -- new communicators -----------------------------------------------------

    def Dup(self, info=None, *, timeout=None):
        """A communicator of the same ranks, over the same connections (its
        messages never mix with ours). Collective."""
        cdef Context ctx = self.live()
        dup = self._derived(range(ctx.size), _new_id(ctx, timeout))
        if _python_class(type(self)) and type(dup) is not type(self):
            dup = self._new_like((dup,), {})      # a Python subclass's Dup is one too
        if self._attrs is not None and self._attrs.values:
            try:
                dup._attrs = self._attrs.copy(self)   # the keys' copy_fns
            except BaseException:
                dup.Free()
                raise
        return dup

    Clone = Dup

    # -- dynamic processes (gloocy.dynamic) ---------------------------------------

    @classmethod
    def Get_parent(cls):
        """The intercommunicator to the processes that spawned this one
        (Intracomm.Spawn), a null Intercomm if none did (or once it is
        disconnected)."""
        from gloocy import dynamic
        return dynamic.get_parent()

    @classmethod
    def Join(cls, fd, *, timeout=None):
        """The intercommunicator (of one process on each side) with the
        process at the other end of the connected socket `fd`, which calls
        Join too."""
        from gloocy import dynamic
        return dynamic.join(fd, timeout)

    def Idup(self, info=None):
        """(communicator, request): the communicator of a Dup, usable once
        the request is done (COMM_NULL until then): the id agreement runs
        as a nonblocking collective."""
        cdef Context ctx = self.live()
        cdef _CommBase new = type(self)()
        copied = self._attrs.copy(self) if self._attrs is not None else None

        def adopt(uid):
            cdef _CommBase made = self._derived(range(ctx.size), uid)
            new._bind(made._ctx)
            new._procs, new._attrs = made._procs, copied
        return new, _start_new_id(ctx, adopt)

    def Idup_with_info(self, info):
        return self.Idup(info)

    def Split(self, color=0, key=0, *, timeout=None):
        """One new communicator per `color`, ranked by (key, our rank);
        COMM_NULL for color UNDEFINED. Collective."""
        found = _split(self.live(), color, key, timeout)
        return COMM_NULL if found is None else self._derived(*found)

    def Split_type(self, split_type, key=0, info=None, *, timeout=None):
        """One communicator per host for COMM_TYPE_SHARED, and for the
        guided types when `info`'s mpi_hw_resource_type is
        "mpi_shared_memory" (another resource: COMM_NULL);
        COMM_TYPE_HW_UNGUIDED splits by host when the ranks span several
        (naming the level in `info`), else gives COMM_NULL; so does
        UNDEFINED. Collective."""
        _check_split_type(split_type)
        hosts = self.allgather(host_identity(), timeout=timeout)
        return self.Split(_split_type_color(split_type, hosts, self.rank, info),
                          key, timeout=timeout)

    def Create(self, group, *, timeout=None):
        """A communicator of the processes of `group` (which this one holds),
        COMM_NULL elsewhere. Collective over this communicator."""
        cdef Context ctx = self.live()
        members = _members_of(self._procs, group)
        comm_id = _new_id(ctx, timeout)
        if ctx.rank not in members:
            return COMM_NULL
        return self._derived(members, comm_id)

    def Create_group(self, group, tag=0, *, timeout=None):
        """Like Create, but collective over the group's members only."""
        cdef Context ctx = self.live()
        members = _members_of(self._procs, group)
        if ctx.rank not in members:
            return COMM_NULL
        return self._derived(members, _group_id(ctx, members, tag, timeout))

    def _derived(self, members, comm_id):
        cdef list ranks = [int(m) for m in members]
        cls = type(self)
        if _python_class(cls):      # a user's subclass: Split, Create... give
            cls = _native(cls)      # our class (Dup: its own, above)
        cdef Context ctx = self.live().derive_ranks(ranks, comm_id)
        ctx.node_wanted = True      # its node segment: at its first collective
        return _new_comm(cls, ctx, tuple([self._procs[m] for m in ranks]))


cdef class Intracomm(Comm):
    """A group of ranks that run collectives together (gloocy.Communicator;
    mpi4py's Intracomm): what COMM_WORLD, COMM_SELF and the communicators
    made from them are.

    Every rank must call the same collectives in the same order. Each call
    takes a keyword-only ``timeout`` (seconds); the default is the
    communicator's ``timeout``.
    """

    def __init__(self, context=None, **kwargs):
        if self._made_in_new():
            return
        if isinstance(context, Intercomm) and context:
            raise TypeError(f"expected an intracommunicator, got {context!r}")
        Comm.__init__(self, context, **kwargs)

    # -- intercommunicators (_comm_inter.pxi) -----------------------------------

    def Create_intercomm(self, local_leader, peer_comm, remote_leader, tag=0,
                         *, timeout=None):
        """The intercommunicator between this group and another one, made
        through the leaders: our rank `local_leader`, and `remote_leader`,
        the other group's leader's rank in `peer_comm` (a communicator
        holding both leaders, significant at our leader only). Collective
        over both groups."""
        return _create_intercomm(self, local_leader, peer_comm, remote_leader,
                                 tag, timeout)

    # -- dynamic processes (gloocy.dynamic) ---------------------------------------

    def Spawn(self, command, args=None, maxprocs=1, info=None, root=0,
              errcodes=None, *, timeout=None):
        """Start `maxprocs` processes of `command` (with `args`), a world of
        their own; the intercommunicator to them (theirs: Get_parent()).
        The arguments matter at `root` only; `errcodes` (a list) gets one
        code per process. Collective."""
        from gloocy import dynamic
        return dynamic.spawn(self, [command], [args], [maxprocs], [info],
                             root, errcodes, timeout, multiple=False)

    def Spawn_multiple(self, command, args=None, maxprocs=None, info=None,
                       root=0, errcodes=None, *, timeout=None):
        """Spawn() of several commands at once: one world of them all;
        `errcodes` gets a list of codes per command. Collective."""
        from gloocy import dynamic
        return dynamic.spawn(self, command, args, maxprocs, info, root,
                             errcodes, timeout, multiple=True)

    def Accept(self, port_name, info=None, root=0, *, timeout=None):
        """The intercommunicator with the group that Connect()s to
        `port_name` (from Open_port; significant at `root`). Collective."""
        from gloocy import dynamic
        return dynamic.accept(self, port_name, root, timeout)

    def Connect(self, port_name, info=None, root=0, *, timeout=None):
        """The intercommunicator with the group that Accept()s on
        `port_name` (significant at `root`). Collective."""
        from gloocy import dynamic
        return dynamic.connect(self, port_name, root, timeout)

    @classmethod
    def Create_from_group(cls, group, stringtag="org.mpi4py", info=None,
                          errhandler=None, *, timeout=None):
        """A communicator of `group`'s processes, collective over them only
        (MPI-4); `stringtag` keeps concurrent calls apart."""
        world = PREDEFINED.get("COMM_WORLD")
        if world is None:
            raise NotImplementedError("Create_from_group needs gloocy.MPI's "
                                      "COMM_WORLD (import gloocy.MPI)")
        if not isinstance(stringtag, str):
            raise TypeError(f"stringtag: expected a str, got {stringtag!r}")
        comm = world.Create_group(group, zlib.crc32(stringtag.encode()),
                                  timeout=timeout)
        if comm and errhandler is not None:
            comm.Set_errhandler(errhandler)
        if comm and group._session is not None:
            comm._session = group._session    # its buffer for buffered sends
        return comm

    # -- scans (only within one group) -------------------------------------------

    def Scan(self, sendbuf, recvbuf, op=_ops.SUM, *, timeout=None,
             algorithm=None):
        """recvbuf on rank r = op over the sendbufs of ranks 0..r."""
        self._scan(sendbuf, recvbuf, op, False, timeout, algorithm)

    def Exscan(self, sendbuf, recvbuf, op=_ops.SUM, *, timeout=None,
               algorithm=None):
        """recvbuf on rank r > 0 = op over ranks 0..r-1 (rank 0: untouched)."""
        self._scan(sendbuf, recvbuf, op, True, timeout, algorithm)

    def _scan(self, sendbuf, recvbuf, op, exclusive, timeout, algorithm):
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        if op is AVG:
            raise TypeError("op: AVG is not defined for scans")
        cdef Message rm = message(recvbuf, "recvbuf")
        cdef Message sm = message(sendbuf, "sendbuf", True, True)
        if code == OP_USER:
            u = _kernel_op(op, rm)
            if u is None:
                _scan_user(ctx, sendbuf, recvbuf, op, exclusive, timeout)
            else:
                _reduce_in_core(ctx, sm, rm, u, True, exclusive, timeout)
            return
        ctx.scan(None if sm is None else sm.buf, rm.buf, code, exclusive,
                 timeout, algorithm)
        rm.unpack()

    def scan(self, obj, op=_ops.SUM, *, timeout=None):
        """op over the objs of ranks 0..rank, in rank order."""
        cdef Context ctx = self.live()
        _check_scan_op(op)
        objs = allgather_objects(ctx, obj, timeout, OBJ_SCAN)
        return fold_objects(objs[:ctx.rank + 1], op)

    def exscan(self, obj, op=_ops.SUM, *, timeout=None):
        """op over the objs of ranks 0..rank-1; None on rank 0."""
        cdef Context ctx = self.live()
        _check_scan_op(op)
        objs = allgather_objects(ctx, obj, timeout, OBJ_EXSCAN)
        return fold_objects(objs[:ctx.rank], op) if ctx.rank else None

    def Iscan(self, sendbuf, recvbuf, op=_ops.SUM):
        return self._iscan(sendbuf, recvbuf, op, False)

    def Iexscan(self, sendbuf, recvbuf, op=_ops.SUM):
        return self._iscan(sendbuf, recvbuf, op, True)

    def Scan_init(self, sendbuf, recvbuf, op=_ops.SUM, info=None):
        return self._persistent("Iscan", sendbuf, recvbuf, op)

    def Exscan_init(self, sendbuf, recvbuf, op=_ops.SUM, info=None):
        return self._persistent("Iexscan", sendbuf, recvbuf, op)

    # -- process topologies (_comm_topology.pxi) ---------------------------------

    def Create_cart(self, dims, periods=None, reorder=False, *, timeout=None):
        """A Cartcomm of the first prod(dims) ranks (COMM_NULL for the
        others); `reorder` is ignored (ranks keep their order). Collective."""
        return _create_cart(self, dims, periods, timeout)

    def Create_graph(self, index, edges, reorder=False, *, timeout=None):
        """A Graphcomm of the first len(index) ranks (COMM_NULL for the
        others). Collective."""
        return _create_graph(self, index, edges, timeout)

    def Create_dist_graph_adjacent(self, sources, destinations,
                                   sourceweights=None, destweights=None,
                                   info=None, reorder=False, *, timeout=None):
        """A Distgraphcomm: each rank names its own incoming and outgoing
        neighbours. Collective."""
        return _create_dist_graph_adjacent(self, sources, destinations,
                                           sourceweights, destweights, timeout)

    def Create_dist_graph(self, sources, degrees, destinations, weights=None,
                          info=None, reorder=False, *, timeout=None):
        """A Distgraphcomm from edges any rank may name (degrees[i] edges
        from sources[i]). Collective."""
        return _create_dist_graph(self, sources, degrees, destinations,
                                  weights, timeout)

    def Cart_map(self, dims, periods=None):
        """Our rank in Create_cart(dims, periods) (UNDEFINED outside)."""
        cdef Context ctx = self.live()
        cart = _topology.Cart.make(dims, periods, ctx.size, ctx.rank)
        return ctx.rank if ctx.rank < cart.nnodes else UNDEFINED

    def Graph_map(self, index, edges):
        """Our rank in Create_graph(index, edges) (UNDEFINED outside)."""
        cdef Context ctx = self.live()
        graph = _topology.Graph.make(index, edges, ctx.size, ctx.rank)
        return ctx.rank if ctx.rank < graph.nnodes else UNDEFINED


# gloocy's own name for it: a communicator of one group of ranks.
Communicator = Intracomm


cdef object _new_comm(type cls, Context ctx, tuple procs):
    """A new communicator of class `cls` over ctx, of these processes.
    Comm's and Intracomm's are made in C (what their constructors check
    holds here; mpi4py's new communicators skip __init__ too); a subclass
    is made by its constructor."""
    cdef _CommBase comm
    if cls is Intracomm:
        comm = Intracomm.__new__(Intracomm)
    elif cls is Comm:
        comm = Comm.__new__(Comm)
    else:
        return cls(ctx, procs=procs)
    comm._bind(ctx)
    comm._procs = procs
    comm._name = ""
    return comm

include "_comm_inter_make.pxi"
include "_comm_inter.pxi"
include "_comm_topology.pxi"


# What MPI.COMM_WORLD.Get_attr gives for MPI's keys (APPNUM...), set by
# gloocy.MPI; the other communicators have none.
WORLD_ATTRS = {}


def _intercomm_over(Context joint, int nfirst, bint first, tuple procs,
                    tuple rprocs):
    """The Intercomm over a fresh context `joint` (its own connections)
    joining two groups: its ranks 0 .. nfirst-1 are the first group, the
    others the second; `first`: ours is the first (gloocy.dynamic)."""
    lower, upper = list(range(nfirst)), list(range(nfirst, joint.size))
    mine, theirs = (lower, upper) if first else (upper, lower)
    return _intercomm(joint, mine, theirs, procs, rprocs, first,
                      joint.links.next_id)


class _NullContext:
    """What a freed communicator (and COMM_NULL) runs on: nothing."""

    closed = True

    def __getattr__(self, name):
        raise ArgumentError("communicator: COMM_NULL (or freed) cannot be "
                            "used", ERR_COMM)


# -- one allocator for every communicator class -----------------------------
# mpi4py's subclassing idiom allocates a subclass with its base's __new__:
# Comm.__new__(cls, comm) with cls a Python subclass of Intercomm, as
# mpi4py's util.pkl5 does. Python allows it only when cls's nearest class
# of ours has Comm's tp_new, and each class here has its own (its C fields
# and vtable). So they all get _comm_tp_new, which allocates with the own
# tp_new of the class of ours that cls derives from.

cdef dict _OWN_TP_NEW = {}      # class of ours -> address of its own tp_new


cdef object _comm_tp_new(type cls, PyObject *args, PyObject *kwargs):
    native = _native(cls) if _python_class(cls) else cls
    cdef Py_ssize_t own = _OWN_TP_NEW[native]
    return (<newfunc><void *>own)(cls, args, kwargs)


for _cls in (Comm, Intracomm, Intercomm, Topocomm, Cartcomm, Graphcomm,
             Distgraphcomm):
    _OWN_TP_NEW[_cls] = <Py_ssize_t><void *>(<PyTypeObject *>_cls).tp_new
    (<PyTypeObject *>_cls).tp_new = <newfunc>_comm_tp_new
    PyType_Modified(_cls)
del _cls

_NULL_CONTEXT = _NullContext()
COMM_NULL = Comm()
COMM_NULL._predefine("COMM_NULL")
