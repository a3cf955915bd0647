# cython: language_level=3, cdivision=True
"""gloocy's core: buffers, reduction kernels, the Context and collectives.

Everything on a hot path runs without the GIL. Functions that run without it
return an int status (``except -1 nogil``) and take the GIL only on the
failure path, to raise.
"""

import threading
import time

cimport cython
from libc.string cimport memcpy, memmove, memset
from libc.stdlib cimport calloc, malloc, realloc, free
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release,
                             PyBuffer_IsContiguous, PyBUF_FORMAT,
                             PyBUF_STRIDES, PyBUF_WRITABLE)
from cpython.exc cimport PyErr_CheckSignals
from cpython.ref cimport Py_DECREF, Py_INCREF

from gloocy._quiet import lone_thread
from gloocy.errors import (ArgumentError, CollectiveTimeout, ContextPoisoned,
                           GloocyError, MismatchError, OpError, PeerLostError,
                           ProtocolError, ERR_BUFFER, ERR_COUNT, ERR_RANK,
                           ERR_ROOT, ERR_TAG, ERR_TRUNCATE)

# One file per role; each declares in its .pxd (included by _core.pxd) what
# the others use, so the order below is only the order of reading.
include "_kernels.pxi"        # reduction kernels
include "_buffers.pxi"        # buffers of a call, allocation, block layouts
include "_frames.pxi"         # frame checks
include "_pair.pxi"           # the abstract Pair
include "_links.pxi"          # connections shared by communicators
include "_context.pxi"        # the Context
include "_engine.pxi"         # posting and waiting
include "_failure.pxi"        # poisoning, root causes

# The collectives. All run without the GIL; each Xfer they post stays
# alive (stack or heap) until waited for, and heap memory is freed on every
# path. Where a step both sends and receives, the send is posted first: it
# leaves at once, and a peer that finds a mismatch in what we sent still
# gets our frame to find it too.
include "_select.pxi"         # which algorithm runs
include "_exchanges.pxi"      # patterns several collectives share
include "_barrier_bcast.pxi"
include "_allreduce.pxi"
include "_reduce.pxi"
include "_gather.pxi"
include "_p2p.pxi"
include "_node_spread.pxi"    # ... local ranks kept on CPUs of their own
include "_node_segment.pxi"   # the node segment: size, settings, mapping
include "_node.pxi"           # through the node segment (one host)
include "_node_watch.pxi"     # ... its calls over the pairs beside it
include "_node_exchange.pxi"
include "_node_scan.pxi"        # scan, exscan
include "_cma.pxi"              # single-copy transfers between local ranks
include "_node_derive.pxi"      # segments of derived communicators
include "_hier.pxi"             # two-level collectives (several hosts)
include "_hier_blocks.pxi"      # ... gather, scatter, alltoall, reduce_scatter
include "_user_ops.pxi"       # user ops: OP_USER's kernel and algorithms
include "_schedule.pxi"       # nonblocking collectives: running schedules
include "_schedule_algorithms.pxi"  # ... and their algorithms, as steps
include "_schedule_inter.pxi"       # ... intercommunicators' reductions
include "_schedule_neighbors.pxi"   # ... the neighbourhood exchange
