"""The mpi4py-like Communicator: a thin layer over the Cython Context.

Upper-case methods move buffers (numpy arrays, bytearray, array.array,
memoryview...) without copies; lower-case methods move picklable objects.
"""

import functools
import pickle

from gloocy import ops as _ops

__all__ = ["Communicator", "IN_PLACE"]


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


class Communicator:
    """A group of ranks that run collectives together.

    Every rank must call the same collectives in the same order. Each call
    takes a keyword-only ``timeout`` (seconds); the default is the
    communicator's ``timeout``.
    """

    def __init__(self, context, *, algorithm=None):
        self._ctx = context
        self._algorithm = algorithm

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

    def Bcast(self, buf, root=0, *, timeout=None):
        """Copy `buf` from `root` into `buf` on every other rank."""
        self._ctx.bcast(buf, root, timeout=timeout)

    def Allreduce(self, sendbuf, recvbuf, op=_ops.SUM, *, timeout=None,
                  algorithm=None):
        """recvbuf = op(sendbuf of every rank); sendbuf may be IN_PLACE."""
        _check_op(op)
        if sendbuf is IN_PLACE or sendbuf is None:
            sendbuf = None
        self._ctx.allreduce(sendbuf, recvbuf, op.code, timeout=timeout,
                            algorithm=algorithm or self._algorithm)

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
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        sizes = bytearray(_INT64 * self.size)
        self._ctx.allgatherv(len(data).to_bytes(_INT64, "little"), sizes,
                             [_INT64] * self.size, timeout=timeout)
        counts = [int.from_bytes(sizes[i:i + _INT64], "little")
                  for i in range(0, len(sizes), _INT64)]
        out = bytearray(sum(counts))
        self._ctx.allgatherv(data, out, counts, timeout=timeout)
        view, objs, at = memoryview(out), [], 0
        for n in counts:
            objs.append(pickle.loads(view[at:at + n]))
            at += n
        return objs

    def allreduce(self, obj, op=_ops.SUM, *, timeout=None):
        """op applied to every rank's `obj` in rank order."""
        if not callable(op):
            raise TypeError(f"op: expected a gloocy op or a callable, got {op!r}")
        return functools.reduce(op, self.allgather(obj, timeout=timeout))

    # -- lifetime ------------------------------------------------------------

    def Free(self):
        """Close the connections (peers are told this rank left cleanly)."""
        self._ctx.close()

    @property
    def closed(self):
        return self._ctx.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.Free()
