# The backend's fast path: dist.all_reduce of one plain tensor runs
# gloocy's allreduce on the tensor's memory given as an address and a size
# (tensor.data_ptr(), tensor.nbytes), without building a NumPy view of it
# (which costs more than a small allreduce itself), and without a Python
# frame of the backend's between torch's call and gloocy's.
# This module imports no torch: the group hands it torch's types.

from libc.stdint cimport int64_t, uintptr_t

from gloocy._core cimport Context
from gloocy._msg cimport memory_buf

from gloocy.errors import GloocyError


cdef class TensorAllreduce:
    """A process group's ``allreduce(tensors, opts)`` (set as an attribute
    of the group, where torch looks it up): the call on one plain,
    contiguous CPU tensor of a dtype and op in `entries` is reduced on its
    data_ptr(); every other call goes to `general`, the group's own method."""

    cdef Context ctx
    cdef object general       # the group's allreduce for what this one leaves
    cdef object failed        # failed(error): torch's exception for gloocy's error
    cdef object done_work     # done_work(tensors): the complete Work of an async call
    cdef object options       # torch's AllreduceOptions (only that type is taken)
    cdef object tensor_type   # torch.Tensor
    cdef object parameter_type  # torch.nn.Parameter (its memory is its data_ptr() too)
    cdef dict entries         # (dtype, hash(ReduceOp)) -> (dtype code, itemsize, op code) or ()
    cdef object entry_of      # entry_of(dtype, op): fills `entries`
    cdef readonly int64_t calls   # calls it completed (for the group's call numbers)

    def __init__(self, Context ctx, general, failed, done_work, options,
                 tensor_type, parameter_type, dict entries, entry_of):
        self.ctx = ctx
        self.general = general
        self.failed = failed
        self.done_work = done_work
        self.options = options
        self.tensor_type = tensor_type
        self.parameter_type = parameter_type
        self.entries = entries
        self.entry_of = entry_of

    def __call__(self, tensors, opts=None):
        if type(opts) is not self.options or type(tensors) is not list \
                or len(<list>tensors) != 1:
            return self.general(tensors, opts)
        t = (<list>tensors)[0]
        kind = type(t)
        if kind is not self.tensor_type and kind is not self.parameter_type:
            return self.general(tensors, opts)
        dtype = t.dtype
        op = opts.reduceOp
        entry = self.entries.get((dtype, hash(op)))
        if entry is None:
            entry = self.entry_of(dtype, op)
        # (a view with a negative bit holds other values than it shows)
        if not entry or not t.is_cpu or not t.is_contiguous() or t.is_neg():
            return self.general(tensors, opts)
        cdef tuple e = <tuple>entry
        cdef uintptr_t address = t.data_ptr()
        try:
            self.ctx.allreduce(None, memory_buf(<void *>address, t.nbytes, e[0],
                                                e[1], "tensor"), e[2])
        except GloocyError as error:
            raise self.failed(error) from None
        self.calls += 1
        if opts.asyncOp:
            return self.done_work(tensors)
        return None     # (torch takes None as "done already")
