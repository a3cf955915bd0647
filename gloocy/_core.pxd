# The core's declarations: the contract between gloocy's core and its
# transports, and the core's table of contents.
#
# A transport implements `Pair` (tagged, ordered, reliable byte messages to
# one peer, _pair.pxd); the collectives drive pairs only through its
# methods, without the GIL.
#
# The core is one extension, _core.pyx, made of .pxi files, one per role.
# Each has a .pxd of the same name, included below, that declares what the
# other files (and other modules) use of it: its constants, structs,
# classes and module-level cdef functions, so that no file depends on the
# order of the includes in _core.pyx. A file's private helpers are not
# declared; Python-level names (tables, def functions) cannot be, and each
# .pxd names those of its file in its first comment.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from cpython.buffer cimport Py_buffer

# Every file's functions take the Context (declared in _context.pxd).
cdef class Context

include "_sys.pxd"            # system calls: poll, eventfd, the clock
include "_frames.pxd"         # the wire: header, codes, Xfer, frame checks
include "_pair.pxd"           # the abstract Pair (the transport contract)
include "_links.pxd"          # connections shared by communicators
include "_kernels.pxd"        # reduction kernels by (op, dtype)
include "_buffers.pxd"        # buffers of a call, allocation, block layouts
include "_engine.pxd"         # a call in flight (Coll): post, wait, block
include "_user_ops.pxd"       # user ops: OP_USER's kernel and algorithms
include "_node.pxd"           # the node segment and its whole-buffer collectives
include "_context.pxd"        # the Context: lifecycle, bookkeeping, entry points
include "_failure.pxd"        # poisoning, and naming the root cause
include "_select.pxd"         # algorithm names, overrides, automatic choice
include "_exchanges.pxd"      # exchange patterns several collectives share
include "_barrier_bcast.pxd"  # one file per collective family, each with
include "_allreduce.pxd"      # the body of its Context entry points
include "_reduce.pxd"         # (call_*) and its algorithms
include "_gather.pxd"
include "_node_exchange.pxd"  # node collectives that move blocks
include "_node_scan.pxd"      # scan and exscan through the node segment
include "_cma.pxd"            # single-copy transfers (process_vm_readv)
include "_node_derive.pxd"    # node segments of derived communicators
include "_hier.pxd"           # two-level collectives (ranks on several hosts)
include "_hier_blocks.pxd"    # ... of gather, scatter, alltoall, reduce_scatter
include "_p2p.pxd"            # send, recv, isend, irecv, probe
include "_schedule.pxd"       # nonblocking collectives as schedules of steps
