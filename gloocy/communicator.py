"""The mpi4py-like Communicator: a thin layer over the Cython Context.

Upper-case methods move buffers (numpy arrays, bytearray, array.array,
memoryview...) without copies; lower-case methods move picklable objects.
"""

import functools
import pickle

import numpy as np

from gloocy import _core
from gloocy import ops as _ops
from gloocy import requests as _requests

__all__ = ["Communicator", "IN_PLACE", "Status", "ANY_SOURCE", "ANY_TAG",
           "PROC_NULL"]

# mpi4py's (MPICH's) values
ANY_SOURCE = -2
ANY_TAG = -1
PROC_NULL = -1


class Status:
    """Where a received (or probed) message came from and how big it is."""

    __slots__ = ("source", "tag", "count", "error")

    def __init__(self, source=ANY_SOURCE, tag=ANY_TAG, count=0):
        self.source, self.tag, self.count, self.error = source, tag, count, 0

    def Get_source(self):
        return self.source

    def Get_tag(self):
        return self.tag

    def Get_count(self, datatype=None):
        """Bytes received, or elements of `datatype` (anything with an
        itemsize / Get_size())."""
        if datatype is None:
            return self.count
        size = getattr(datatype, "itemsize", None) or datatype.Get_size()
        return self.count // size

    def Get_error(self):
        return self.error

    def _set(self, source, tag, count):
        self.source, self.tag, self.count = source, tag, count

    def __repr__(self):
        return f"<Status source={self.source} tag={self.tag} count={self.count}>"


class _InPlace:
    """Marker: the receive buffer is also the send buffer."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self):
        return "gloocy.IN_PLACE"

    def __reduce__(self):
        return "IN_PLACE"


IN_PLACE = _InPlace()

_INT64 = 8


def _check_op(op):
    if not isinstance(op, _ops.Op):
        raise TypeError(f"op: expected a gloocy op such as gloocy.SUM, got {op!r}")
    return op


def _check_avg(op, recvbuf):
    if op is _ops.AVG:
        _core.check_floating(recvbuf)


def _finish_avg(op, recvbuf, size):
    if op is _ops.AVG:
        _core.divide(recvbuf, size)


def _array(buf):
    """A NumPy view of any buffer (shares its memory)."""
    return buf if isinstance(buf, np.ndarray) else np.asarray(memoryview(buf))


def _proc_null(status):
    if status is not None:
        status._set(PROC_NULL, ANY_TAG, 0)
    return True


def _fold(op, blocks):
    """blocks[0] <op> blocks[1] <op> ... in rank order, for a user op."""
    acc = blocks[0].copy()
    for b in blocks[1:]:
        if op.c_function:
            _core.apply_c_op(op.c_function, op.c_context,
                             b.view(np.uint8), acc.view(np.uint8), acc.size)
        else:
            inout = b.copy()
            op(acc, inout)            # MPI's rule: inoutvec = invec <op> inoutvec
            acc = inout
    return acc


def _check_callable(op):
    if not callable(op):
        raise TypeError(f"op: expected a gloocy op or a callable, got {op!r}")
    return op


def _check_scan_op(op):
    if op is _ops.AVG:
        raise TypeError("op: AVG is not defined for scans")
    return _check_callable(op)


def _in_place(buf):
    return None if buf is IN_PLACE else buf


def _dumps(obj):
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _int64(n):
    return n.to_bytes(_INT64, "little")


def _from_int64s(data):
    return [int.from_bytes(data[i:i + _INT64], "little")
            for i in range(0, len(data), _INT64)]


def _loads_all(data, counts):
    view, objs, at = memoryview(data), [], 0
    for n in counts:
        objs.append(pickle.loads(view[at:at + n]))
        at += n
    return objs


def _extent(buf, name):
    """(itemsize, number of elements) of any buffer. NumPy arrays are asked
    directly: some (bfloat16) export no buffer format."""
    if isinstance(buf, np.ndarray):
        return buf.itemsize, buf.size
    if buf is None or buf is IN_PLACE:
        raise TypeError(f"{name}: expected a buffer, got {buf!r}")
    try:
        view = memoryview(buf)
    except TypeError:
        raise TypeError(f"{name}: {type(buf).__name__} does not expose a "
                        "buffer") from None
    return view.itemsize, view.nbytes // view.itemsize


def _blocks(buf, size, name):
    """Byte sizes and displacements of `size` equal blocks filling buf."""
    item, items = _extent(buf, name)
    if items % size:
        raise ValueError(f"{name}: {items} elements do not split into "
                         f"{size} equal blocks")
    block = items // size * item
    return [block] * size, [block * i for i in range(size)]


def _vector(spec, size, name):
    """(buf, byte sizes, byte displacements) from [buf, counts] or
    [buf, (counts, displs)] or [buf, counts, displs], counts in elements."""
    if not isinstance(spec, (list, tuple)) or len(spec) not in (2, 3):
        raise TypeError(f"{name}: expected [buf, counts] or "
                        f"[buf, (counts, displs)], got {spec!r}")
    buf, counts, displs = spec[0], spec[1], None
    if len(spec) == 3:
        displs = spec[2]
    elif (isinstance(counts, tuple) and len(counts) == 2
          and all(hasattr(part, "__len__") for part in counts)):
        counts, displs = counts          # (counts, displs), not two counts
    item = _extent(buf, name)[0]
    sizes = [int(n) * item for n in counts]
    if len(sizes) != size:
        raise ValueError(f"{name}: expected {size} counts, got {len(sizes)}")
    offs = None if displs is None else [int(d) * item for d in displs]
    return buf, sizes, offs


class Communicator:
    """A group of ranks that run collectives together.

    Every rank must call the same collectives in the same order. Each call
    takes a keyword-only ``timeout`` (seconds); the default is the
    communicator's ``timeout``.
    """

    def __init__(self, context):
        self._ctx = context
        self._shadow = None         # Dup running the nonblocking collectives
        self._worker = None

    # -- identity ----------------------------------------------------------

    @property
    def rank(self):
        """This process's rank, 0 <= rank < size."""
        return self._ctx.rank

    @property
    def size(self):
        """Number of ranks."""
        return self._ctx.size

    def Get_rank(self):
        return self._ctx.rank

    def Get_size(self):
        return self._ctx.size

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
        return f"<gloocy.Communicator rank {self.rank} of {self.size}>"

    # -- buffer collectives --------------------------------------------------

    def Barrier(self, *, timeout=None):
        """Return only when every rank has called Barrier."""
        self._ctx.barrier(timeout=timeout)

    def Bcast(self, buf, root=0, *, timeout=None, algorithm=None):
        """Copy `buf` from `root` into `buf` on every other rank."""
        self._ctx.bcast(buf, root, timeout=timeout, algorithm=algorithm)

    def Allreduce(self, sendbuf, recvbuf, op=_ops.SUM, *, timeout=None,
                  algorithm=None):
        """recvbuf = op(sendbuf of every rank); sendbuf may be IN_PLACE."""
        if _check_op(op).is_user:
            blocks = self._user_inputs(sendbuf, recvbuf, None, timeout)
            _array(recvbuf)[...] = _fold(op, blocks).reshape(_array(recvbuf).shape)
            return
        _check_avg(op, recvbuf)
        self._ctx.allreduce(_in_place(sendbuf), recvbuf, op.code,
                            timeout=timeout, algorithm=algorithm)
        _finish_avg(op, recvbuf, self.size)

    def Reduce(self, sendbuf, recvbuf, op=_ops.SUM, root=0, *, timeout=None,
               algorithm=None):
        """recvbuf at root = op(sendbuf of every rank); recvbuf is ignored
        elsewhere; the root's sendbuf may be IN_PLACE."""
        at_root = self.rank == root
        if _check_op(op).is_user:
            blocks = self._user_inputs(sendbuf, recvbuf, root, timeout)
            if at_root:
                out = _array(recvbuf)
                out[...] = _fold(op, blocks).reshape(out.shape)
            return
        _check_avg(op, recvbuf if at_root else sendbuf)
        self._ctx.reduce(_in_place(sendbuf), recvbuf if at_root else None,
                         op.code, root, timeout=timeout, algorithm=algorithm)
        if at_root:
            _finish_avg(op, recvbuf, self.size)

    def _user_inputs(self, sendbuf, recvbuf, root, timeout):
        """Every rank's input as rows of an array (at root only when root is
        not None), for user ops: they are folded in rank order here."""
        mine = _array(recvbuf if _in_place(sendbuf) is None else sendbuf)
        flat = np.ascontiguousarray(mine).reshape(-1)
        out = np.empty((self.size, flat.size), flat.dtype)
        if root is None:
            self._ctx.allgatherv(flat, out, [flat.nbytes] * self.size,
                                 timeout=timeout)
            return out
        self._ctx.gatherv(flat, out if self.rank == root else None,
                          [flat.nbytes] * self.size, None, root,
                          timeout=timeout)
        return out

    def Allgather(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        """Every rank's sendbuf, in rank order, into every recvbuf."""
        sizes, displs = _blocks(recvbuf, self.size, "recvbuf")
        self._ctx.allgatherv(_in_place(sendbuf), recvbuf, sizes, displs,
                             timeout=timeout, algorithm=algorithm)

    def Allgatherv(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        """recvbuf is [buf, counts] or [buf, (counts, displs)] (elements)."""
        buf, sizes, displs = _vector(recvbuf, self.size, "recvbuf")
        self._ctx.allgatherv(_in_place(sendbuf), buf, sizes, displs,
                             timeout=timeout, algorithm=algorithm)

    def Gather(self, sendbuf, recvbuf, root=0, *, timeout=None):
        """Every rank's sendbuf, in rank order, into recvbuf at root."""
        sizes = displs = None
        if self.rank == root:
            sizes, displs = _blocks(recvbuf, self.size, "recvbuf")
        self._ctx.gatherv(_in_place(sendbuf), recvbuf, sizes, displs, root,
                          timeout=timeout)

    def Gatherv(self, sendbuf, recvbuf, root=0, *, timeout=None):
        buf = sizes = displs = None
        if self.rank == root:
            buf, sizes, displs = _vector(recvbuf, self.size, "recvbuf")
        self._ctx.gatherv(_in_place(sendbuf), buf, sizes, displs, root,
                          timeout=timeout)

    def Scatter(self, sendbuf, recvbuf, root=0, *, timeout=None):
        """Block i of root's sendbuf into rank i's recvbuf."""
        sizes = displs = None
        if self.rank == root:
            sizes, displs = _blocks(sendbuf, self.size, "sendbuf")
        self._ctx.scatterv(sendbuf if self.rank == root else None,
                           _in_place(recvbuf), sizes, displs, root,
                           timeout=timeout)

    def Scatterv(self, sendbuf, recvbuf, root=0, *, timeout=None):
        buf = sizes = displs = None
        if self.rank == root:
            buf, sizes, displs = _vector(sendbuf, self.size, "sendbuf")
        self._ctx.scatterv(buf, _in_place(recvbuf), sizes, displs, root,
                           timeout=timeout)

    def Alltoall(self, sendbuf, recvbuf, *, timeout=None):
        """Block i of sendbuf to rank i; rank i's block for us into block i
        of recvbuf."""
        rsizes, rdispls = _blocks(recvbuf, self.size, "recvbuf")
        send = _in_place(sendbuf)
        ssizes, sdispls = ((None, None) if send is None
                           else _blocks(send, self.size, "sendbuf"))
        self._ctx.alltoallv(send, ssizes, sdispls, recvbuf, rsizes, rdispls,
                            timeout=timeout)

    def Alltoallv(self, sendbuf, recvbuf, *, timeout=None):
        rbuf, rsizes, rdispls = _vector(recvbuf, self.size, "recvbuf")
        send = _in_place(sendbuf)
        sbuf = ssizes = sdispls = None
        if send is not None:
            sbuf, ssizes, sdispls = _vector(send, self.size, "sendbuf")
        self._ctx.alltoallv(sbuf, ssizes, sdispls, rbuf, rsizes, rdispls,
                            timeout=timeout)

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=_ops.SUM, *,
                       timeout=None, algorithm=None):
        """Reduce sendbuf over the ranks; rank i gets recvcounts[i] elements
        (default: recvbuf's size on every rank; in place: recvbuf holds the
        whole input and gets our block at its start)."""
        _check_op(op)
        if recvcounts is None:
            block = _extent(recvbuf, "recvbuf")[1]
            if _in_place(sendbuf) is None:
                block //= self.size
            recvcounts = [block] * self.size
        counts = [int(n) for n in recvcounts]
        if op.is_user:
            blocks = self._user_inputs(sendbuf, recvbuf, None, timeout)
            start = sum(counts[:self.rank])
            mine = _fold(op, blocks)[start:start + counts[self.rank]]
            _array(recvbuf).reshape(-1)[:mine.size] = mine
            return
        _check_avg(op, recvbuf)
        kwargs = {"algorithm": algorithm} if algorithm is not None else {}
        self._ctx.reduce_scatter(_in_place(sendbuf), recvbuf, counts, op.code,
                                 timeout=timeout, **kwargs)
        if op is _ops.AVG:
            _finish_avg(op, _array(recvbuf).reshape(-1)[:counts[self.rank]],
                        self.size)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=_ops.SUM, *,
                             timeout=None, algorithm=None):
        """Reduce sendbuf (size x block) over the ranks; rank i gets block i."""
        block = _extent(recvbuf, "recvbuf")[1]
        if _in_place(sendbuf) is None:
            block //= self.size
        self.Reduce_scatter(sendbuf, recvbuf, [block] * self.size, op,
                            timeout=timeout, algorithm=algorithm)

    def Scan(self, sendbuf, recvbuf, op=_ops.SUM, *, timeout=None):
        """recvbuf on rank r = op over the sendbufs of ranks 0..r."""
        self._scan(sendbuf, recvbuf, op, False, timeout)

    def Exscan(self, sendbuf, recvbuf, op=_ops.SUM, *, timeout=None):
        """recvbuf on rank r > 0 = op over ranks 0..r-1 (rank 0: untouched)."""
        self._scan(sendbuf, recvbuf, op, True, timeout)

    def _scan(self, sendbuf, recvbuf, op, exclusive, timeout):
        if _check_op(op) is _ops.AVG:
            raise TypeError("op: AVG is not defined for scans")
        if op.is_user:
            blocks = self._user_inputs(sendbuf, recvbuf, None, timeout)
            upto = self.rank if exclusive else self.rank + 1
            if upto:
                out = _array(recvbuf)
                out[...] = _fold(op, blocks[:upto]).reshape(out.shape)
            return
        self._ctx.scan(_in_place(sendbuf), recvbuf, op.code,
                       exclusive=exclusive, timeout=timeout)

    # -- point-to-point ------------------------------------------------------

    def _source(self, source):
        return -1 if source == ANY_SOURCE else source

    def Send(self, buf, dest, tag=0, *, timeout=None):
        """Send buf to rank `dest`; returns once buf may be reused."""
        if dest == PROC_NULL:
            return
        self._ctx.send(buf, dest, tag, timeout=timeout)

    def Recv(self, buf, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
             timeout=None):
        """Receive into buf (a shorter message is fine, a longer one is an
        error); `status` gets the source, tag and byte count."""
        if source == PROC_NULL:
            if status is not None:
                status._set(PROC_NULL, ANY_TAG, 0)
            return
        got = self._ctx.recv(buf, self._source(source), tag, timeout=timeout)
        if status is not None:
            status._set(*got)

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None,
                 source=ANY_SOURCE, recvtag=ANY_TAG, status=None, *,
                 timeout=None):
        """Send and receive at once (a send never waits for its receive)."""
        self.Send(sendbuf, dest, sendtag, timeout=timeout)
        self.Recv(recvbuf, source, recvtag, status, timeout=timeout)

    def Probe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
              timeout=None):
        """Wait until a matching message can be received; True."""
        if source == PROC_NULL:
            return _proc_null(status)
        got = self._ctx.probe(self._source(source), tag, timeout=timeout)
        if status is not None:
            status._set(*got)
        return True

    def Iprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        """Is a matching message there to receive now?"""
        if source == PROC_NULL:
            return _proc_null(status)
        got = self._ctx.probe(self._source(source), tag, block=False)
        if got is not None and status is not None:
            status._set(*got)
        return got is not None

    def send(self, obj, dest, tag=0, *, timeout=None):
        if dest != PROC_NULL:
            self._ctx.send(_dumps(obj), dest, tag, timeout=timeout)

    def recv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
             timeout=None):
        """The next object from `source` with `tag`."""
        if source == PROC_NULL:
            if status is not None:
                status._set(PROC_NULL, ANY_TAG, 0)
            return None
        src, tag, n = self._ctx.probe(self._source(source), tag,
                                      timeout=timeout)
        data = bytearray(n)
        got = self._ctx.recv(data, src, tag, timeout=timeout)
        if status is not None:
            status._set(*got)
        return pickle.loads(data)

    def sendrecv(self, sendobj, dest, sendtag=0, recvbuf=None,
                 source=ANY_SOURCE, recvtag=ANY_TAG, status=None, *,
                 timeout=None):
        self.send(sendobj, dest, sendtag, timeout=timeout)
        return self.recv(None, source, recvtag, status, timeout=timeout)

    def probe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
              timeout=None):
        return self.Probe(source, tag, status, timeout=timeout)

    def iprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return self.Iprobe(source, tag, status)

    # -- object collectives ------------------------------------------------

    def barrier(self, *, timeout=None):
        self.Barrier(timeout=timeout)

    def bcast(self, obj=None, root=0, *, timeout=None):
        """Return root's `obj` on every rank."""
        if self.rank == root:
            data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
            self._ctx.bcast(len(data).to_bytes(_INT64, "little"), root,
                            timeout=timeout)
            self._ctx.bcast(data, root, timeout=timeout)
            return pickle.loads(data)      # a copy, as other ranks get
        size = bytearray(_INT64)
        self._ctx.bcast(size, root, timeout=timeout)
        data = bytearray(int.from_bytes(size, "little"))
        self._ctx.bcast(data, root, timeout=timeout)
        return pickle.loads(data)

    def allgather(self, obj, *, timeout=None):
        """List of every rank's `obj`, in rank order."""
        data = _dumps(obj)
        sizes = bytearray(_INT64 * self.size)
        self._ctx.allgatherv(_int64(len(data)), sizes,
                             [_INT64] * self.size, timeout=timeout)
        counts = _from_int64s(sizes)
        out = bytearray(sum(counts))
        self._ctx.allgatherv(data, out, counts, timeout=timeout)
        return _loads_all(out, counts)

    def allreduce(self, obj, op=_ops.SUM, *, timeout=None):
        """op applied to every rank's `obj` in rank order (AVG: the sum
        divided by the number of ranks)."""
        total = functools.reduce(_check_callable(op),
                                 self.allgather(obj, timeout=timeout))
        return total / self.size if op is _ops.AVG else total

    def gather(self, obj, root=0, *, timeout=None):
        """List of every rank's `obj` at root, None elsewhere."""
        data = _dumps(obj)
        sizes = bytearray(_INT64 * self.size) if self.rank == root else None
        self._ctx.gatherv(_int64(len(data)), sizes, [_INT64] * self.size,
                          None, root, timeout=timeout)
        counts = _from_int64s(sizes) if self.rank == root else None
        out = bytearray(sum(counts)) if self.rank == root else None
        self._ctx.gatherv(data, out, counts, None, root, timeout=timeout)
        return _loads_all(out, counts) if self.rank == root else None

    def scatter(self, objs, root=0, *, timeout=None):
        """objs[i] of root's list (len == size) to rank i."""
        sizes = data = counts = None
        if self.rank == root:
            objs = list(objs)
            if len(objs) != self.size:
                raise ValueError(f"objs: expected {self.size} items at the "
                                 f"root, got {len(objs)}")
            parts = [_dumps(o) for o in objs]
            counts = [len(p) for p in parts]
            data = b"".join(parts)
            sizes = b"".join(_int64(n) for n in counts)
        mine = bytearray(_INT64)
        self._ctx.scatterv(sizes, mine, [_INT64] * self.size, None, root,
                           timeout=timeout)
        out = bytearray(int.from_bytes(mine, "little"))
        self._ctx.scatterv(data, out, counts, None, root, timeout=timeout)
        return pickle.loads(out)

    def alltoall(self, objs, *, timeout=None):
        """objs[i] to rank i; returns the list of what each rank sent us."""
        objs = list(objs)
        if len(objs) != self.size:
            raise ValueError(f"objs: expected {self.size} items, got {len(objs)}")
        parts = [_dumps(o) for o in objs]
        ssizes = [len(p) for p in parts]
        rsizes = bytearray(_INT64 * self.size)
        self._ctx.alltoallv(b"".join(_int64(n) for n in ssizes),
                            [_INT64] * self.size, None, rsizes,
                            [_INT64] * self.size, None, timeout=timeout)
        counts = _from_int64s(rsizes)
        out = bytearray(sum(counts))
        self._ctx.alltoallv(b"".join(parts), ssizes, None, out, counts, None,
                            timeout=timeout)
        return _loads_all(out, counts)

    def reduce(self, obj, op=_ops.SUM, root=0, *, timeout=None):
        """op applied to every rank's `obj` in rank order, at root (None
        elsewhere)."""
        _check_callable(op)
        objs = self.gather(obj, root, timeout=timeout)
        if self.rank != root:
            return None
        total = functools.reduce(op, objs)
        return total / self.size if op is _ops.AVG else total

    def scan(self, obj, op=_ops.SUM, *, timeout=None):
        """op over the objs of ranks 0..rank, in rank order."""
        _check_scan_op(op)
        objs = self.allgather(obj, timeout=timeout)
        return functools.reduce(op, objs[:self.rank + 1])

    def exscan(self, obj, op=_ops.SUM, *, timeout=None):
        """op over the objs of ranks 0..rank-1; None on rank 0."""
        _check_scan_op(op)
        objs = self.allgather(obj, timeout=timeout)
        return functools.reduce(op, objs[:self.rank]) if self.rank else None

    # -- nonblocking -----------------------------------------------------------

    def Isend(self, buf, dest, tag=0):
        """Start sending buf (which must not change until the request is
        done)."""
        if dest == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        return _requests.P2PRequest(self._ctx.isend(buf, dest, tag), buf)

    def Irecv(self, buf, source=ANY_SOURCE, tag=ANY_TAG):
        """Start receiving into buf."""
        if source == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        return _requests.P2PRequest(
            self._ctx.irecv(buf, self._source(source), tag), buf)

    def isend(self, obj, dest, tag=0):
        if dest == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        data = _dumps(obj)
        return _requests.P2PRequest(self._ctx.isend(data, dest, tag), data)

    def irecv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG):
        """A request whose wait() returns the object received."""
        if source == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        return _requests.ObjectRecvRequest(self, self._source(source), tag)

    def _start(self, method, *args, **kwargs):
        """Run collective `method` of the shadow communicator on the worker.
        The first call builds both (collectively: every rank makes it)."""
        if self._shadow is None:
            self._shadow = self.Dup()
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

    def Dup(self, *, timeout=None):
        """A communicator of the same ranks, over the same connections (its
        messages never mix with ours). Collective."""
        return Communicator(self._ctx.derive(range(self.size),
                                             self._new_id(timeout)))

    def _new_id(self, timeout):
        """An id for a new communicator that no rank here has used."""
        mine = np.array([self._ctx.next_comm_id], np.int64)
        self._ctx.allreduce(None, mine, _ops.MAX.code, timeout=timeout)
        return int(mine[0])

    Clone = Dup

    # -- lifetime ------------------------------------------------------------

    def Free(self):
        """Close the connections (peers are told this rank left cleanly)."""
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        if self._shadow is not None:
            self._shadow.Free()
            self._shadow = None
        self._ctx.close()

    @property
    def closed(self):
        return self._ctx.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.Free()
