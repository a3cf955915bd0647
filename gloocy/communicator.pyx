# cython: language_level=3
"""The mpi4py-like Communicator: a thin layer over the Cython Context.

Upper-case methods move buffers (numpy arrays, bytearray, array.array,
memoryview...) without copies; lower-case methods move picklable objects.
A buffer spec is parsed once, by the message layer (`_msg`), into what the
core moves; the Context's entry points are called in C.
"""

from libc.stdint cimport int64_t, uint32_t
from libc.string cimport memcpy

from gloocy._core cimport Context, call_recv_new
from gloocy.requests cimport p2p_request
from gloocy._msg cimport Message, message, vector_message

import os
import pickle
import sys
import zlib

import numpy as np

from gloocy import _core, bufspec
from gloocy import ops as _ops
from gloocy import requests as _requests
from gloocy.constants import (ANY_SOURCE, ANY_TAG, COMM_TYPE_SHARED, IN_PLACE,
                              KEYVAL_INVALID, PROC_NULL, TAG_UB)
from gloocy.constants import UNDEFINED
from gloocy.errors import (ArgumentError, ERR_ARG, ERR_BUFFER, ERR_COMM,
                           ERR_COUNT, ERR_GROUP, ERR_KEYVAL)
from gloocy.groups import Group, IDENT, CONGRUENT
from gloocy.info import Info
from gloocy.status import Status
from gloocy.transport.shm import host_identity

__all__ = ["Communicator", "IN_PLACE", "Status", "ANY_SOURCE", "ANY_TAG",
           "PROC_NULL"]

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


cdef list _blocks(m, int size, str name):
    """Byte sizes of `size` equal blocks filling message m (end to end)."""
    if m.count % size:
        raise ArgumentError(f"{name}: {m.count} items do not split into "
                            f"{size} equal blocks", ERR_COUNT)
    return [m.nbytes // size] * size


cdef class Communicator:
    """A group of ranks that run collectives together.

    Every rank must call the same collectives in the same order. Each call
    takes a keyword-only ``timeout`` (seconds); the default is the
    communicator's ``timeout``.
    """

    cdef public object _ctx       # the core Context, or _NULL_CONTEXT
    cdef Context ctx              # the same, typed; None when null
    cdef public tuple _procs      # our ranks' processes, by world rank
    cdef public str _name
    cdef public bint _predefined  # COMM_WORLD, COMM_SELF: never freed
    cdef public object _errhandler
    cdef public object _info
    cdef public object _shadow    # Dup running the nonblocking collectives
    cdef public object _worker
    cdef dict __dict__            # users may hang attributes on a communicator

    def __init__(self, context=None, *, procs=None, name=""):
        """A communicator running on a core Context; with another
        Communicator, a second handle on it (equal to it); with nothing,
        a null one (equal to COMM_NULL)."""
        if isinstance(context, Communicator):
            procs, name = context._procs, context._name
            context = context._ctx
        elif context is None:
            context, procs = _NULL_CONTEXT, ()
            name = name or "MPI_COMM_NULL"
        elif not isinstance(context, Context):
            raise TypeError(f"expected a communicator, got {context!r}")
        self._bind(context)
        self._procs = tuple(range(context.size) if procs is None else procs)
        self._name = name
        self._predefined = False
        self._errhandler = None
        self._info = None
        self._shadow = None
        self._worker = None

    cdef _bind(self, context):
        self._ctx = context
        self.ctx = context if isinstance(context, Context) else None

    cdef Context live(self):
        """The Context; ArgumentError (ERR_COMM) on a null communicator."""
        if self.ctx is None:
            _NULL_CONTEXT.rank
        return self.ctx

    # -- identity ----------------------------------------------------------

    @property
    def rank(self):
        """This process's rank, 0 <= rank < size."""
        return self.live().rank

    @property
    def size(self):
        """Number of ranks."""
        return self.live().size

    def Get_rank(self):
        return self.live().rank

    def Get_size(self):
        return self.live().size

    @property
    def timeout(self):
        """Default deadline of every call, in seconds."""
        return self._ctx.timeout

    @timeout.setter
    def timeout(self, seconds):
        if not seconds > 0:
            raise ValueError(f"timeout must be positive, got {seconds!r}")
        self._ctx.timeout = float(seconds)

    def __repr__(self):
        if not self:
            return "<gloocy.Communicator NULL>"
        return f"<gloocy.Communicator rank {self.rank} of {self.size}>"

    # -- buffer collectives --------------------------------------------------

    def Barrier(self, *, timeout=None):
        """Return only when every rank has called Barrier."""
        self.live().barrier(timeout)

    def Bcast(self, buf, root=0, *, timeout=None, algorithm=None):
        """Copy `buf` from `root` into `buf` on every other rank."""
        cdef Context ctx = self.live()
        cdef Message m = message(buf, "buf", ctx.rank == root)
        ctx.bcast(m.buf, root, timeout, algorithm)
        m.unpack()

    def Allreduce(self, sendbuf, recvbuf, op=_ops.SUM, *, timeout=None,
                  algorithm=None):
        """recvbuf = op(sendbuf of every rank); sendbuf may be IN_PLACE."""
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        if code == OP_USER:
            _reduce_user(ctx, sendbuf, recvbuf, op, None, timeout)
            return
        cdef Message r = message(recvbuf, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        if op is AVG:
            _core.check_floating(r.buf)
        ctx.allreduce(None if s is None else s.buf, r.buf, code, timeout,
                      algorithm)
        if op is AVG:
            _core.divide(r.buf, ctx.size)
        r.unpack()

    def Reduce(self, sendbuf, recvbuf, op=_ops.SUM, root=0, *, timeout=None,
               algorithm=None):
        """recvbuf at root = op(sendbuf of every rank); recvbuf is ignored
        elsewhere; the root's sendbuf may be IN_PLACE."""
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        if code == OP_USER:
            _reduce_user(ctx, sendbuf, recvbuf, op, root, timeout)
            return
        cdef bint at_root = ctx.rank == root
        cdef Message r = message(recvbuf, "recvbuf") if at_root else None
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        if r is None and s is None:
            raise ArgumentError("sendbuf: only the root may reduce in place",
                                ERR_BUFFER)
        if op is AVG:
            _core.check_floating((r or s).buf)
        ctx.reduce(None if s is None else s.buf, None if r is None else r.buf,
                   code, root, timeout, algorithm)
        if at_root:
            if op is AVG:
                _core.divide(r.buf, ctx.size)
            r.unpack()

    def Allgather(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        """Every rank's sendbuf, in rank order, into every recvbuf."""
        cdef Context ctx = self.live()
        cdef Message r = message(recvbuf, "recvbuf", False, False, ctx.size)
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        ctx.allgatherv(None if s is None else s.buf, r.buf,
                       _blocks(r, ctx.size, "recvbuf"), None, timeout,
                       algorithm)
        r.unpack()

    def Allgatherv(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        """recvbuf is [buf, counts] or [buf, (counts, displs)] (elements)."""
        cdef Context ctx = self.live()
        cdef Message r = vector_message(recvbuf, ctx.size, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        ctx.allgatherv(None if s is None else s.buf, r.buf, r.sizes,
                       r.offsets, timeout, algorithm)
        r.unpack()

    def Gather(self, sendbuf, recvbuf, root=0, *, timeout=None,
               algorithm=None):
        """Every rank's sendbuf, in rank order, into recvbuf at root."""
        cdef Context ctx = self.live()
        cdef Message r = None
        sizes = None
        if ctx.rank == root:
            r = message(recvbuf, "recvbuf", False, False, ctx.size)
            sizes = _blocks(r, ctx.size, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        ctx.gatherv(None if s is None else s.buf, None if r is None else r.buf,
                    sizes, None, root, timeout, algorithm)
        if r is not None:
            r.unpack()

    def Gatherv(self, sendbuf, recvbuf, root=0, *, timeout=None,
                algorithm=None):
        cdef Context ctx = self.live()
        cdef Message r = None
        if ctx.rank == root:
            r = vector_message(recvbuf, ctx.size, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        ctx.gatherv(None if s is None else s.buf,
                    None if r is None else r.buf,
                    None if r is None else r.sizes,
                    None if r is None else r.offsets, root, timeout,
                    algorithm)
        if r is not None:
            r.unpack()

    def Scatter(self, sendbuf, recvbuf, root=0, *, timeout=None,
                algorithm=None):
        """Block i of root's sendbuf into rank i's recvbuf."""
        cdef Context ctx = self.live()
        cdef Message s = None
        sizes = None
        if ctx.rank == root:
            s = message(sendbuf, "sendbuf", True, False, ctx.size)
            sizes = _blocks(s, ctx.size, "sendbuf")
        cdef Message r = message(recvbuf, "recvbuf", False, ctx.rank == root)
        ctx.scatterv(None if s is None else s.buf,
                     None if r is None else r.buf, sizes, None, root, timeout,
                     algorithm)
        if r is not None:
            r.unpack()

    def Scatterv(self, sendbuf, recvbuf, root=0, *, timeout=None,
                 algorithm=None):
        cdef Context ctx = self.live()
        cdef Message s = None
        if ctx.rank == root:
            s = vector_message(sendbuf, ctx.size, "sendbuf", True)
        cdef Message r = message(recvbuf, "recvbuf", False, ctx.rank == root)
        ctx.scatterv(None if s is None else s.buf,
                     None if r is None else r.buf,
                     None if s is None else s.sizes,
                     None if s is None else s.offsets, root, timeout,
                     algorithm)
        if r is not None:
            r.unpack()

    def Alltoall(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        """Block i of sendbuf to rank i; rank i's block for us into block i
        of recvbuf."""
        cdef Context ctx = self.live()
        cdef int size = ctx.size
        cdef Message r = message(recvbuf, "recvbuf", False, False, size)
        cdef Message s = message(sendbuf, "sendbuf", True, True, size)
        rsizes = _blocks(r, size, "recvbuf")
        ssizes = None if s is None else _blocks(s, size, "sendbuf")
        ctx.alltoallv(None if s is None else s.buf, ssizes, None, r.buf,
                      rsizes, None, timeout, algorithm)
        r.unpack()

    def Alltoallv(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        cdef Context ctx = self.live()
        cdef Message r = vector_message(recvbuf, ctx.size, "recvbuf")
        cdef Message s = None
        if sendbuf is not IN_PLACE and sendbuf is not None:
            s = vector_message(sendbuf, ctx.size, "sendbuf", True)
        ctx.alltoallv(None if s is None else s.buf,
                      None if s is None else s.sizes,
                      None if s is None else s.offsets, r.buf, r.sizes,
                      r.offsets, timeout, algorithm)
        r.unpack()

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=_ops.SUM, *,
                       timeout=None, algorithm=None):
        """Reduce sendbuf over the ranks; rank i gets recvcounts[i] items
        (default: each rank's recvbuf size; in place: recvbuf holds the
        whole input, by default in equal blocks, and gets our block at its
        start)."""
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        cdef Message r = message(recvbuf, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        if recvcounts is None and s is None:   # recvbuf splits evenly
            counts = [r.count // ctx.size] * ctx.size
        elif recvcounts is None:
            every = np.empty(ctx.size, np.int64)
            ctx.allgatherv(np.array([r.count], np.int64), every,
                           [8] * ctx.size, None, timeout, None)
            counts = every.tolist()
        else:
            counts = [int(n) for n in recvcounts]
        self._reduce_scatter(ctx, r, s, counts, op, code, timeout, algorithm)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=_ops.SUM, *,
                             timeout=None, algorithm=None):
        """Reduce sendbuf (size x block) over the ranks; rank i gets block i."""
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        cdef Message r = message(recvbuf, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        block = r.count // ctx.size if s is None else r.count
        self._reduce_scatter(ctx, r, s, [block] * ctx.size, op, code, timeout,
                             algorithm)

    cdef _reduce_scatter(self, Context ctx, Message r, Message s, list counts,
                         op, int code, timeout, algorithm):
        if code == OP_USER:
            _reduce_scatter_user(ctx, IN_PLACE if s is None else s.spec,
                                 r.spec, counts, op, timeout)
            return
        items = r.buf.count // r.count if r.count else 1    # elements per item
        if op is AVG:
            _core.check_floating(r.buf)
        ctx.reduce_scatter(None if s is None else s.buf, r.buf,
                           [n * items for n in counts], code, timeout,
                           algorithm)
        if op is AVG:
            _core.divide(r.data[:counts[ctx.rank] * items], ctx.size)
        r.unpack()

    def Scan(self, sendbuf, recvbuf, op=_ops.SUM, *, timeout=None):
        """recvbuf on rank r = op over the sendbufs of ranks 0..r."""
        self._scan(sendbuf, recvbuf, op, False, timeout)

    def Exscan(self, sendbuf, recvbuf, op=_ops.SUM, *, timeout=None):
        """recvbuf on rank r > 0 = op over ranks 0..r-1 (rank 0: untouched)."""
        self._scan(sendbuf, recvbuf, op, True, timeout)

    def _scan(self, sendbuf, recvbuf, op, exclusive, timeout):
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        if op is AVG:
            raise TypeError("op: AVG is not defined for scans")
        if code == OP_USER:
            _scan_user(ctx, sendbuf, recvbuf, op, exclusive, timeout)
            return
        cdef Message rm = message(recvbuf, "recvbuf")
        cdef Message sm = message(sendbuf, "sendbuf", True, True)
        ctx.scan(None if sm is None else sm.buf, rm.buf, code, exclusive,
                 timeout)
        rm.unpack()

    # -- point-to-point ------------------------------------------------------

    def Send(self, buf, dest, tag=0, *, timeout=None):
        """Send buf to rank `dest`; returns once buf may be reused."""
        cdef Context ctx = self.live()
        if dest != PROC_NULL:
            ctx.send(message(buf, "buf", True).buf, dest, tag, timeout)

    Ssend = Rsend = Bsend = Send

    def Recv(self, buf, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
             timeout=None):
        """Receive into buf (a shorter message is fine, a longer one is an
        error); `status` gets the source, tag and byte count."""
        cdef Context ctx = self.live()
        if source == PROC_NULL:
            return _proc_null(status) and None
        cdef Message m = message(buf, "buf")
        got = ctx.recv(m.buf, _any(source), tag, timeout)
        m.unpack(got[2])
        if status is not None:
            status._set(*got)

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None,
                 source=ANY_SOURCE, recvtag=ANY_TAG, status=None, *,
                 timeout=None):
        """Send and receive at once: the send is posted first, so rings of
        Sendrecv never wait on each other."""
        cdef Context ctx = self.live()
        cdef Message r
        sent = None
        if dest != PROC_NULL:
            sent = ctx.isend(message(sendbuf, "sendbuf", True).buf, dest,
                             sendtag)
        if source == PROC_NULL:
            _proc_null(status)
        else:
            r = message(recvbuf, "recvbuf")
            got = ctx.recv(r.buf, _any(source), recvtag, timeout)
            r.unpack(got[2])
            if status is not None:
                status._set(*got)
        if sent is not None:
            sent.wait(timeout)

    def Sendrecv_replace(self, buf, dest, sendtag=0, source=ANY_SOURCE,
                         recvtag=ANY_TAG, status=None, *, timeout=None):
        """Send buf, then receive into it."""
        m = bufspec.message(buf, name="buf")
        self.Sendrecv(m.data.copy(), dest, sendtag, m.data, source, recvtag,
                      status, timeout=timeout)
        m.unpack()

    def Probe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
              timeout=None):
        """Wait until a matching message can be received; True."""
        if source == PROC_NULL:
            return _proc_null(status)
        got = self._ctx.probe(_any(source), tag, timeout=timeout)
        if status is not None:
            status._set(*got)
        return True

    def Iprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        """Is a matching message there to receive now?"""
        if source == PROC_NULL:
            return _proc_null(status)
        got = self._ctx.probe(_any(source), tag, block=False)
        if got is not None and status is not None:
            status._set(*got)
        return got is not None

    def send(self, obj, dest, tag=0, *, timeout=None):
        send_object(self.live(), obj, dest, tag, timeout)

    ssend = bsend = send

    def recv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
             timeout=None):
        """The next object from `source` with `tag`."""
        return recv_object(self.live(), source, tag, status, timeout)

    def sendrecv(self, sendobj, dest, sendtag=0, recvbuf=None,
                 source=ANY_SOURCE, recvtag=ANY_TAG, status=None, *,
                 timeout=None):
        cdef Context ctx = self.live()
        send_object(ctx, sendobj, dest, sendtag, timeout)
        return recv_object(ctx, source, recvtag, status, timeout)

    def probe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
              timeout=None):
        return self.Probe(source, tag, status, timeout=timeout)

    def iprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return self.Iprobe(source, tag, status)

    # -- object collectives (the pickle layer: _pickled.pxi) -------------------

    def barrier(self, *, timeout=None):
        self.Barrier(timeout=timeout)

    def bcast(self, obj=None, root=0, *, timeout=None):
        """Return root's `obj` on every rank."""
        return bcast_object(self.live(), obj, root, timeout)

    def allgather(self, obj, *, timeout=None):
        """List of every rank's `obj`, in rank order."""
        return allgather_objects(self.live(), obj, timeout, OBJ_ALLGATHER)

    def allreduce(self, obj, op=_ops.SUM, *, timeout=None):
        """op applied to every rank's `obj` in rank order (AVG: the sum
        divided by the number of ranks)."""
        cdef Context ctx = self.live()
        _check_callable(op)
        return fold_objects(allgather_objects(ctx, obj, timeout, OBJ_ALLREDUCE),
                            op)

    def gather(self, obj, root=0, *, timeout=None):
        """List of every rank's `obj` at root, None elsewhere."""
        return gather_objects(self.live(), obj, root, timeout, OBJ_GATHER)

    def scatter(self, objs, root=0, *, timeout=None):
        """objs[i] of root's list (len == size) to rank i."""
        return scatter_objects(self.live(), objs, root, timeout)

    def alltoall(self, objs, *, timeout=None):
        """objs[i] to rank i; returns the list of what each rank sent us."""
        return alltoall_objects(self.live(), objs, timeout)

    def reduce(self, obj, op=_ops.SUM, root=0, *, timeout=None):
        """op applied to every rank's `obj` in rank order, at root (None
        elsewhere)."""
        cdef Context ctx = self.live()
        _check_callable(op)
        objs = gather_objects(ctx, obj, root, timeout, OBJ_REDUCE)
        return None if objs is None else fold_objects(objs, op)

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

    # -- nonblocking -----------------------------------------------------------

    def Isend(self, buf, dest, tag=0):
        """Start sending buf (which must not change until the request is
        done)."""
        cdef Context ctx = self.live()
        if dest == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        cdef Message m = message(buf, "buf", True)
        return p2p_request(ctx.isend(m.buf, dest, tag), m, None)

    Issend = Irsend = Ibsend = Isend

    def Send_init(self, buf, dest, tag=0):
        """A persistent send: each Start() sends buf's current contents."""
        return _requests.Prequest(lambda: self.Isend(buf, dest, tag))

    Ssend_init = Bsend_init = Rsend_init = Send_init

    def Recv_init(self, buf, source=ANY_SOURCE, tag=ANY_TAG):
        """A persistent receive into buf."""
        return _requests.Prequest(lambda: self.Irecv(buf, source, tag))

    def Isendrecv(self, *args, **kwargs):
        raise NotImplementedError("Isendrecv (MPI-4) is not in gloocy yet")

    Isendrecv_replace = Isendrecv

    def Irecv(self, buf, source=ANY_SOURCE, tag=ANY_TAG):
        """Start receiving into buf."""
        cdef Context ctx = self.live()
        if source == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        cdef Message m = message(buf, "buf")
        return p2p_request(ctx.irecv(m.buf, _any(source), tag), m,
                           m.slow.unpack if m.slow is not None else None)

    def isend(self, obj, dest, tag=0):
        cdef Context ctx = self.live()
        if dest == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        data = _dumps(obj)
        return p2p_request(ctx.isend(data, dest, tag), data, None)

    issend = ibsend = isend

    def irecv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG):
        """A request whose wait() returns the object received."""
        if source == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        return _requests.ObjectRecvRequest(self.live(), _any(source), tag)

    def _start(self, method, *args, **kwargs):
        """Run collective `method` of the shadow communicator on the worker.
        The first call builds both, locally: the shadow's id is ours with
        the shadow bit set, so no rank waits for another to start."""
        if self._shadow is None:
            self._shadow = Communicator(
                self._ctx.derive(range(self.size), self._ctx.comm_id | SHADOW),
                procs=self._procs)
            self._worker = _requests.Worker(f"gloocy-nonblocking-{self.rank}")
        call = getattr(self._shadow, method)
        return self._worker.submit(lambda: call(*args, **kwargs),
                                   _requests.CollectiveRequest())

    def Ibarrier(self):
        return self._start("Barrier")

    def Ibcast(self, buf, root=0):
        return self._start("Bcast", buf, root)

    def Iallreduce(self, sendbuf, recvbuf, op=_ops.SUM):
        return self._start("Allreduce", sendbuf, recvbuf, op)

    def Ireduce(self, sendbuf, recvbuf, op=_ops.SUM, root=0):
        return self._start("Reduce", sendbuf, recvbuf, op, root)

    def Iallgather(self, sendbuf, recvbuf):
        return self._start("Allgather", sendbuf, recvbuf)

    def Iallgatherv(self, sendbuf, recvbuf):
        return self._start("Allgatherv", sendbuf, recvbuf)

    def Igather(self, sendbuf, recvbuf, root=0):
        return self._start("Gather", sendbuf, recvbuf, root)

    def Igatherv(self, sendbuf, recvbuf, root=0):
        return self._start("Gatherv", sendbuf, recvbuf, root)

    def Iscatter(self, sendbuf, recvbuf, root=0):
        return self._start("Scatter", sendbuf, recvbuf, root)

    def Iscatterv(self, sendbuf, recvbuf, root=0):
        return self._start("Scatterv", sendbuf, recvbuf, root)

    def Ialltoall(self, sendbuf, recvbuf):
        return self._start("Alltoall", sendbuf, recvbuf)

    def Ialltoallv(self, sendbuf, recvbuf):
        return self._start("Alltoallv", sendbuf, recvbuf)

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=_ops.SUM):
        return self._start("Reduce_scatter", sendbuf, recvbuf, recvcounts, op)

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=_ops.SUM):
        return self._start("Reduce_scatter_block", sendbuf, recvbuf, op)

    def Iscan(self, sendbuf, recvbuf, op=_ops.SUM):
        return self._start("Scan", sendbuf, recvbuf, op)

    def Iexscan(self, sendbuf, recvbuf, op=_ops.SUM):
        return self._start("Exscan", sendbuf, recvbuf, op)

    # -- new communicators -----------------------------------------------------

    def Dup(self, info=None, *, timeout=None):
        """A communicator of the same ranks, over the same connections (its
        messages never mix with ours). Collective."""
        cdef Context ctx = self.live()
        return self._derived(range(ctx.size), _new_id(ctx, timeout))

    Clone = Dup

    def Split(self, color=0, key=0, *, timeout=None):
        """One new communicator per `color`, ranked by (key, our rank);
        COMM_NULL for color UNDEFINED. Collective."""
        found = _split(self.live(), color, key, timeout)
        return COMM_NULL if found is None else self._derived(*found)

    def Split_type(self, split_type, key=0, info=None, *, timeout=None):
        """COMM_TYPE_SHARED: one communicator per host (COMM_NULL for the
        ranks passing UNDEFINED). Collective."""
        if split_type not in (UNDEFINED, COMM_TYPE_SHARED):
            raise ArgumentError(f"split_type: {split_type} is not supported "
                                "(only COMM_TYPE_SHARED)", ERR_ARG)
        hosts = self.allgather(host_identity(), timeout=timeout)
        color = (UNDEFINED if split_type == UNDEFINED
                 else hosts.index(hosts[self.rank]))
        return self.Split(color, key, timeout=timeout)

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
        members = list(members)
        return type(self)(self.live().derive(members, comm_id),
                          procs=[self._procs[m] for m in members])

    def Get_group(self):
        return Group(self._procs, self._procs[self.rank])

    group = property(Get_group)

    def Compare(self, comm):
        """IDENT (the same communicator), CONGRUENT (same ranks), SIMILAR
        (same processes, other ranks) or UNEQUAL."""
        self._ctx.rank, comm._ctx.rank      # COMM_NULL raises here
        if comm is self or comm._ctx is self._ctx:
            return IDENT
        result = self.Get_group().Compare(comm.Get_group())
        return CONGRUENT if result == IDENT else result

    def Get_name(self):
        return self._name

    def Set_name(self, name):
        self._name = str(name)

    name = property(Get_name, Set_name)

    def Is_inter(self):
        return False

    def Is_intra(self):
        return True

    is_inter = property(Is_inter)
    is_intra = property(Is_intra)

    def Get_topology(self):
        return UNDEFINED

    topology = property(Get_topology)

    def Get_attr(self, keyval):
        """TAG_UB: the largest tag; other MPI attributes: None."""
        self._ctx.rank                      # COMM_NULL raises here
        if keyval == KEYVAL_INVALID:
            raise ArgumentError("keyval: KEYVAL_INVALID", ERR_KEYVAL)
        return 2**31 - 1 if keyval == TAG_UB else None

    def Get_info(self):
        return self._info if self._info is not None else Info()

    def Set_info(self, info):
        self._info = info

    info = property(Get_info, Set_info)

    def Dup_with_info(self, info, *, timeout=None):
        dup = self.Dup(timeout=timeout)
        dup.Set_info(info)
        return dup

    def _mpi4(self, *args, **kwargs):
        raise NotImplementedError("this MPI-4 operation is not in gloocy yet")

    Idup = Idup_with_info = Attach_buffer = Detach_buffer = _mpi4
    Flush_buffer = Iflush_buffer = _mpi4

    def Set_errhandler(self, errhandler):
        """Accepted for mpi4py code; errors are always exceptions here."""
        self._ctx.rank                      # COMM_NULL raises here
        self._errhandler = errhandler

    def Get_errhandler(self):
        self._ctx.rank                      # COMM_NULL raises here
        return self._errhandler

    def Abort(self, errorcode=0):
        """End the whole job now (the launcher stops the other ranks)."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(errorcode) & 0xFF or 1)

    # -- lifetime ------------------------------------------------------------

    def Free(self):
        """Forget this communicator; the connections close with the last
        one over them (peers are told this rank left cleanly). It is
        COMM_NULL afterwards."""
        if self._predefined:
            raise ArgumentError(f"cannot free {self._name or 'a predefined communicator'}",
                                ERR_COMM)
        self._close()

    def _close(self):
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        if self._shadow is not None:
            self._shadow.Free()
            self._shadow = None
        self._ctx.close()
        self._bind(_NULL_CONTEXT)

    def _leave(self):
        """This process leaves the job (exit, Finalize): the nonblocking
        collectives it started finish, then the connections under this
        communicator close with a goodbye, whatever communicators derived
        from it are still alive (they are closed with them)."""
        _requests.stop_workers()
        ctx = self._ctx
        if ctx is _NULL_CONTEXT:
            return                      # left already (Finalize, then exit)
        self._close()
        if isinstance(ctx, _core.Context):
            ctx.close_all()

    @property
    def closed(self):
        return self._ctx.closed

    def __bool__(self):
        return self._ctx is not _NULL_CONTEXT

    def __reduce__(self):
        """COMM_WORLD, COMM_SELF and COMM_NULL unpickle as themselves; other
        communicators cannot travel."""
        name = {"MPI_COMM_WORLD": "COMM_WORLD", "MPI_COMM_SELF": "COMM_SELF",
                "MPI_COMM_NULL": "COMM_NULL"}.get(self._name)
        if not self._predefined or name is None:
            raise ValueError(f"cannot pickle {self!r}")
        return name

    def __eq__(self, other):
        if not isinstance(other, Communicator):
            return NotImplemented
        return self._ctx is other._ctx

    __hash__ = object.__hash__

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.Free()


class _NullContext:
    """What a freed communicator (and COMM_NULL) runs on: nothing."""

    closed = True

    def __getattr__(self, name):
        raise ArgumentError("communicator: COMM_NULL (or freed) cannot be "
                            "used", ERR_COMM)


_NULL_CONTEXT = _NullContext()
COMM_NULL = Communicator(name="MPI_COMM_NULL")
COMM_NULL._predefined = True
