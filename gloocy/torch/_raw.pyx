# The backend's fast path: a collective on a tensor's memory given as an
# address and a size (tensor.data_ptr(), tensor.nbytes), without building
# a NumPy view of it (which costs more than a small allreduce itself).
# The caller keeps the tensor alive and has checked that it is a dense,
# contiguous CPU tensor of the dtype it names.

from libc.stdint cimport int64_t, uintptr_t

from gloocy._core cimport Context
from gloocy._msg cimport memory_buf


def allreduce(Context ctx, uintptr_t address, int64_t nbytes, int dtype,
              int64_t itemsize, int op):
    """In place: the `nbytes` at `address` (elements of gloocy dtype code
    `dtype`, `itemsize` bytes each) = op code `op` over every rank's."""
    ctx.allreduce(None, memory_buf(<void *>address, nbytes, dtype, itemsize,
                                   "tensor"), op)

