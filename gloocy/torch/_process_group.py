"""The gloocy backend of torch.distributed: a ProcessGroup over a gloocy
Communicator.

Each c10d call runs gloocy's collective on the tensors' own memory: its
blocking call by default, or its nonblocking request with
GLOOCY_TORCH_NONBLOCKING=1 (see _post); point-to-point calls are always
requests. The call returns a GloocyWork (see _work.py). The
group's communicator is derived from the default group's (shared
connections, one small agreement) when the default group is gloocy, else
built through the c10d store torch gives the backend.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import time

import torch
import torch.distributed as dist

from .. import IN_PLACE, ANY_SOURCE
from ..errors import GloocyError, CollectiveTimeout
from ._store import C10dStore
from ._tensors import (RAW, Staged, adjacent, check_tensor, one_tensor,
                       raw_entry, reduce_op, spec)
from ._work import GloocyWork, backend_error

try:
    from ._raw import TensorAllreduce
except ImportError:         # not built: every call takes the general path
    TensorAllreduce = None

__all__ = ["ProcessGroupGloocy", "create"]

BACKEND_NAME = "gloocy"
# Tags of monitored_barrier's messages (torch's own tags are small).
_MONITOR_TAG = 1 << 29
_world_comm = None      # the default group's communicator, for subgroups


def _comm_from_store(store, rank, size, timeout):
    from .. import connect, new_secret
    adapter = C10dStore(store, timeout=timeout)
    secret = None
    if not os.environ.get("GLOOCY_SECRET") and size > 1:
        # A fresh job secret, told to the others through torch's store.
        if rank == 0:
            adapter.set("gloocy/secret", new_secret().hex().encode())
        secret = bytes.fromhex(adapter.get("gloocy/secret").decode())
    host = os.environ.get("GLOOCY_HOST")
    if host is None and os.environ.get("MASTER_ADDR"):
        from ..rendezvous.address import advertised_address
        host = advertised_address(os.environ["MASTER_ADDR"])
    return connect(rank, size, adapter, secret=secret, job="gloocy",
                   timeout=timeout, host=host,
                   local_size=_int_env("LOCAL_WORLD_SIZE"))


def _int_env(name):
    text = os.environ.get(name, "")
    return int(text) if text.isdigit() else None


def _subgroup_comm(world, global_ranks, group_id, timeout):
    """The members' communicator, derived from the default group's."""
    tag = int.from_bytes(hashlib.sha256(str(group_id).encode()).digest()[:3], "big")
    group = world.Get_group().Incl(list(global_ranks))
    comm = world.Create_group(group, tag, timeout=timeout)
    comm.timeout = timeout      # the group's, not the world's (torch's timeout=)
    return comm


def create(opts, backend_options=None):
    """torch's creator (extended API): called by the members of a new group."""
    global _world_comm
    timeout = opts.timeout.total_seconds() if opts.timeout else 1800.0
    ranks = list(opts.global_ranks_in_group)
    world = _world_comm
    if ranks and world is not None and not world.closed and max(ranks) < world.size:
        comm = _subgroup_comm(world, ranks, opts.group_id, timeout)
    else:
        comm = _comm_from_store(opts.store, opts.group_rank, opts.group_size, timeout)
        if not ranks:
            _world_comm = comm
    return ProcessGroupGloocy(comm, opts.group_id, timeout)


class ProcessGroupGloocy(dist.ProcessGroup):
    """torch.distributed's ProcessGroup API on a gloocy Communicator."""

    def __init__(self, comm, name="", timeout=1800.0):
        super().__init__(comm.rank, comm.size)
        self._comm = comm
        self._name = str(name)
        self._timeout = float(timeout)
        self._calls = 0
        self._coalesced = None   # the Works of a coalescing block, or None
        # what collectives are posted on: see _post
        self._collectives = comm if _nonblocking() else _Blocking(comm)
        # allreduce's raw path (blocking collectives only): see _fast_allreduce
        self._raw = None
        if TensorAllreduce is not None and not _nonblocking():
            self._raw = TensorAllreduce(
                comm._ctx, self._allreduce, self._raw_failed,
                lambda tensors: GloocyWork((), tensors, None),
                dist.AllreduceOptions, torch.Tensor, torch.nn.Parameter, RAW, raw_entry)
            self._fast_allreduce(True)

    # -- identity ----------------------------------------------------------

    def getBackendName(self):
        return BACKEND_NAME

    def name(self):
        return BACKEND_NAME

    @property
    def comm(self):
        """The gloocy Communicator under this group."""
        return self._comm

    def _where(self, call):
        """Where a call is, for its error messages (formatted only then);
        calls are numbered from 0, as gloocy numbers its collectives."""
        number = self._calls + (self._raw.calls if self._raw is not None else 0)
        self._calls += 1
        return _Where(self._comm.rank, self._comm.size, self._name, call, number)

    def _fast_allreduce(self, on):
        """torch calls group.allreduce(tensors, opts): with `on`, that finds
        the raw path (self._raw, compiled), which reduces one plain tensor
        on its data_ptr() with no Python frame of ours and hands every
        other call to _allreduce; else the method below."""
        if on and self._raw is not None:
            self.allreduce = self._raw
        else:
            self.__dict__.pop("allreduce", None)

    def _raw_failed(self, e):
        return backend_error(e, self._where("allreduce"))

    def _post(self, call, start, result, finish=None, keep=None, opts=None):
        """Run `start(c)`, which calls c.Iallreduce & co. (collectives) or
        the communicator's Isend/Irecv, and wrap the requests in a Work;
        gloocy's errors become torch's.

        `c` runs each collective as gloocy's blocking call (the Work is
        complete when it is returned) unless GLOOCY_TORCH_NONBLOCKING=1,
        where `c` is the communicator and they are nonblocking requests.
        Either way every rank makes the same kind of call whatever its
        async_op: a blocking collective never matches a nonblocking one
        (MPI's rule, which gloocy keeps), and torch lets ranks differ in
        async_op (DDP's Join does). Point-to-point calls are always
        requests. A synchronous dist.* call (opts.asyncOp False) is waited
        for here and gets None, which torch takes as "done already"."""
        where = self._where(call)
        try:
            requests = [r for r in start(self._collectives) if r is not None]
        except GloocyError as e:
            raise backend_error(e, where) from None
        sync = not getattr(opts, "asyncOp", True) and self._coalesced is None
        if sync and not requests:       # done already: no Work to make
            if finish is not None:
                finish()
            return None
        work = GloocyWork(requests, result, where, finish, keep)
        if self._coalesced is not None:
            self._coalesced.append(work)
        elif sync:
            work._wait()
            return None
        return work

    def _start_coalescing(self, device=None):
        """dist._coalescing_manager: the calls until _end_coalescing
        are posted at once and completed by one Work."""
        self._coalesced = []
        self._fast_allreduce(False)

    def _end_coalescing(self, device=None):
        works, self._coalesced = self._coalesced or [], None
        self._fast_allreduce(True)
        return _joined(works, [t for w in works for t in w._result])

    # -- reductions ----------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        # (what torch calls when the raw path is off: see _fast_allreduce)
        return self._allreduce(tensors, opts)

    def _allreduce(self, tensors, opts=None):
        tensors, opts = _overload(tensors, opts, dist.AllreduceOptions, "reduceOp")
        t = one_tensor(tensors, "allreduce's tensors")
        return self._allreduce_many([t], opts.reduceOp, tensors, "allreduce", opts)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        return self._allreduce_many(list(tensors), opts.reduceOp, tensors,
                                    "allreduce_coalesced")

    def _allreduce_many(self, tensors, op, result, call, opts=None):
        staged = Staged()
        bufs, code = [], None
        for i, t in enumerate(tensors):
            c = staged.contiguous(t, f"{call}'s tensor {i}")
            code, factor = reduce_op(op, c.dtype)
            if factor is not None:
                c.mul_(factor)
            bufs.append(c)
        return self._post(
            call, lambda c: [c.Iallreduce(IN_PLACE, spec(b), op=code) for b in bufs],
            result, staged.finish, bufs, opts)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        staged = Staged()
        t = staged.contiguous(one_tensor(tensors, "reduce's tensors"), "reduce's tensor")
        code, factor = reduce_op(opts.reduceOp, t.dtype)
        root = self._root(opts.rootRank)
        comm = self._comm
        if factor is not None:      # the root's tensor is the result; others keep theirs
            t = t.mul_(factor) if comm.rank == root else t * factor
        if comm.rank == root:
            start = lambda c: [c.Ireduce(IN_PLACE, spec(t), op=code, root=root)]
        else:
            start = lambda c: [c.Ireduce(spec(t), None, op=code, root=root)]
        return self._post("reduce", start, tensors, staged.finish, t)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        staged = Staged()
        out = staged.contiguous(one_tensor(output_tensors, "reduce_scatter's outputs"),
                                "reduce_scatter's output")
        flat = self._one_block(one_tensor(input_tensors, "reduce_scatter's inputs"),
                               out, "reduce_scatter's input")
        return self._reduce_scatter_flat(out, flat, opts.reduceOp, staged,
                                         output_tensors, "reduce_scatter")

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        staged = Staged()
        out = staged.contiguous(output, "reduce_scatter's output")
        inp = staged.contiguous(input, "reduce_scatter's input", output=False)
        self._check_group_multiple(inp, out, "reduce_scatter's input", "output")
        return self._reduce_scatter_flat(out, inp, opts.reduceOp, staged,
                                         [output], "reduce_scatter_tensor", opts)

    def _check_group_multiple(self, whole, part, what, part_name):
        """`whole` must hold the group size times `part`'s elements."""
        if whole.numel() != part.numel() * self._comm.size:
            raise ValueError(
                f"gloocy: {what} has {whole.numel()} elements, not the "
                f"{part_name}'s {part.numel()} times the group size {self._comm.size}")

    def _reduce_scatter_flat(self, out, flat, op, staged, result, call, opts=None):
        code, factor = reduce_op(op, out.dtype)
        if factor is not None:
            flat = flat * factor
        return self._post(call, lambda c: [c.Ireduce_scatter_block(
            spec(flat), spec(out), op=code)], result, staged.finish, (flat, out), opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return _joined(works, outputs)

    # -- data movement -------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        tensors, opts = _overload(tensors, opts, dist.BroadcastOptions, "rootRank")
        staged = Staged()
        t = staged.contiguous(one_tensor(tensors, "broadcast's tensors"), "broadcast's tensor")
        root = self._root(opts.rootRank)
        return self._post("broadcast", lambda c: [c.Ibcast(spec(t), root=root)],
                          tensors, staged.finish, t, opts)

    def allgather(self, output_tensors, input_tensors, opts=None):
        outs = one_tensor(output_tensors, "allgather's output lists")
        staged = Staged()
        inp = staged.contiguous(one_tensor(input_tensors, "allgather's inputs"),
                                "allgather's input", output=False)
        self._check_count(outs, "allgather's output list")
        for i, o in enumerate(outs):
            check_tensor(o, f"allgather's output {i}")
            self._check_like(o, inp, f"allgather's output {i}")
        flat, finish = _gather_target(outs, inp)
        return self._post("allgather", lambda c: [c.Iallgather(spec(inp), spec(flat))],
                          output_tensors, finish, (inp, flat))

    def _allgather_base(self, output, input, opts=None):
        staged = Staged()
        out = staged.contiguous(output, "all_gather_into_tensor's output")
        inp = staged.contiguous(input, "all_gather_into_tensor's input", output=False)
        self._check_group_multiple(out, inp, "all_gather_into_tensor's output",
                                   "input")
        return self._post("all_gather_into_tensor",
                          lambda c: [c.Iallgather(spec(inp), spec(out))],
                          [output], staged.finish, (inp, out), opts)

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        works = [self.allgather([o], [i], opts) for o, i in zip(output_lists, input_tensors)]
        return _joined(works, output_lists)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return _joined(works, outputs)

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        root, comm = self._root(opts.rootRank), self._comm
        staged = Staged()
        inp = staged.contiguous(one_tensor(input_tensors, "gather's inputs"),
                                "gather's input", output=False)
        if comm.rank != root:
            if output_tensors and any(output_tensors):
                raise ValueError(f"gloocy: gather's outputs must be empty on "
                                 f"rank {comm.rank}, which is not the root {root}")
            return self._post("gather", lambda c: [c.Igather(spec(inp), None, root=root)],
                              output_tensors, None, inp)
        outs = one_tensor(output_tensors, "gather's output lists")
        self._check_count(outs, "gather's output list")
        for i, o in enumerate(outs):
            check_tensor(o, f"gather's output {i}")
            self._check_like(o, inp, f"gather's output {i}")
        flat, finish = _gather_target(outs, inp)
        return self._post("gather", lambda c: [c.Igather(spec(inp), spec(flat), root=root)],
                          output_tensors, finish, (inp, flat))

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ScatterOptions()
        root, comm = self._root(opts.rootRank), self._comm
        staged = Staged()
        out = staged.contiguous(one_tensor(output_tensors, "scatter's outputs"),
                                "scatter's output")
        if comm.rank != root:
            if input_tensors and any(input_tensors):
                raise ValueError(f"gloocy: scatter's inputs must be empty on "
                                 f"rank {comm.rank}, which is not the root {root}")
            return self._post("scatter", lambda c: [c.Iscatter(None, spec(out), root=root)],
                              output_tensors, staged.finish, out)
        flat = self._one_block(one_tensor(input_tensors, "scatter's input lists"),
                               out, "scatter's input")
        return self._post("scatter", lambda c: [c.Iscatter(spec(flat), spec(out), root=root)],
                          output_tensors, staged.finish, (flat, out))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        staged = Staged()
        out = staged.contiguous(output, "all_to_all_single's output")
        inp = staged.contiguous(input, "all_to_all_single's input", output=False)
        n = self._comm.size
        if not output_split_sizes and not input_split_sizes:
            if inp.numel() % n or out.numel() != inp.numel():
                raise ValueError(
                    f"gloocy: all_to_all_single without split sizes needs input and "
                    f"output of equal size divisible by the group size {n}, got "
                    f"{inp.numel()} and {out.numel()} elements")
            return self._post("all_to_all_single",
                              lambda c: [c.Ialltoall(spec(inp), spec(out))],
                              [output], staged.finish, (inp, out))
        send = _counts(inp, input_split_sizes, n, "input_split_sizes")
        recv = _counts(out, output_split_sizes, n, "output_split_sizes")
        return self._post("all_to_all_single",
                          lambda c: [c.Ialltoallv(spec(inp, send), spec(out, recv))],
                          [output], staged.finish, (inp, out))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        n = self._comm.size
        self._check_count(output_tensors, "all_to_all's output list")
        self._check_count(input_tensors, "all_to_all's input list")
        for i, t in enumerate(input_tensors):
            check_tensor(t, f"all_to_all's input {i}")
        for i, t in enumerate(output_tensors):
            check_tensor(t, f"all_to_all's output {i}")
        send_counts = [t.numel() for t in input_tensors]
        recv_counts = [t.numel() for t in output_tensors]
        flat_in = adjacent(input_tensors) if len(set(send_counts)) == 1 else None
        if flat_in is None:
            flat_in = torch.cat([t.detach().reshape(-1) for t in input_tensors])
        flat_out, finish = _gather_target(output_tensors, output_tensors[0])
        if flat_out.numel() != sum(recv_counts):        # unequal outputs
            flat_out = output_tensors[0].new_empty(sum(recv_counts))
            finish = _scatter_back(output_tensors, flat_out, recv_counts)
        send = (send_counts, _displs(send_counts))
        recv = (recv_counts, _displs(recv_counts))
        return self._post("all_to_all",
                          lambda c: [c.Ialltoallv(spec(flat_in, send), spec(flat_out, recv))],
                          output_tensors, finish, (flat_in, flat_out))

    # torch 2.x's newer names (dist.all_gather_into_tensor & co. call these)
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # -- synchronisation and point-to-point ---------------------------------

    def barrier(self, opts=None):
        return self._post("barrier", lambda c: [c.Ibarrier()], [], None, None, opts)

    def send(self, tensors, dst, tag):
        t = one_tensor(tensors, "send's tensors")
        check_tensor(t, "send's tensor")
        t = t.contiguous()
        comm = self._comm
        return self._post("send", lambda c: [comm.Isend(spec(t), self._peer(dst, "dst"), tag)],
                          tensors, None, t)

    def recv(self, tensors, src, tag):
        staged = Staged()
        t = staged.contiguous(one_tensor(tensors, "recv's tensors"), "recv's tensor")
        comm = self._comm
        return self._post("recv", lambda c: [comm.Irecv(spec(t), self._peer(src, "src"), tag)],
                          tensors, staged.finish, t)

    def recv_anysource(self, tensors, tag):
        staged = Staged()
        t = staged.contiguous(one_tensor(tensors, "recv's tensors"), "recv's tensor")
        comm = self._comm
        return self._post("recv", lambda c: [comm.Irecv(spec(t), ANY_SOURCE, tag)],
                          tensors, staged.finish, t)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """gloo's monitored barrier: rank 0 hears from every rank within
        `timeout` and names the ranks that did not come, then releases them."""
        return monitored_barrier(self, timeout, wait_all_ranks)

    # -- life cycle ------------------------------------------------------------

    def shutdown(self):
        global _world_comm
        comm, self._comm = self._comm, _Closed(self._comm.rank)
        self._collectives = self._comm
        self._fast_allreduce(False)
        self._raw = None
        if comm is _world_comm:
            _world_comm = None
        if not isinstance(comm, _Closed) and not comm.closed:
            try:
                comm.Free()
            except GloocyError:
                pass

    def abort(self):
        self.shutdown()

    # -- checks ------------------------------------------------------------------

    def _root(self, root):
        if not 0 <= root < self._comm.size:
            raise ValueError(f"gloocy: root rank {root} is not in this group of "
                             f"{self._comm.size}")
        return root

    def _peer(self, rank, name):
        if not 0 <= rank < self._comm.size:
            raise ValueError(f"gloocy: {name} rank {rank} is not in this group of "
                             f"{self._comm.size}")
        return rank

    def _check_count(self, tensors, name):
        if len(tensors) != self._comm.size:
            raise ValueError(f"gloocy: {name} has {len(tensors)} tensors, the group "
                             f"has {self._comm.size} ranks")

    def _one_block(self, tensors, like, name):
        """The group's worth of input tensors, each like `like`, as one flat
        tensor: their own memory when they are one block's consecutive
        slices, else a copy."""
        self._check_count(tensors, f"{name} list")
        for i, t in enumerate(tensors):
            check_tensor(t, f"{name} {i}")
            self._check_like(t, like, f"{name} {i}")
        flat = adjacent(tensors)
        if flat is None:
            flat = torch.cat([t.detach().reshape(-1) for t in tensors])
        return flat

    @staticmethod
    def _check_like(t, ref, name):
        if t.dtype != ref.dtype or t.numel() != ref.numel():
            raise ValueError(f"gloocy: {name} is {t.dtype} with {t.numel()} elements; "
                             f"expected {ref.dtype} with {ref.numel()}")


def _nonblocking():
    return os.environ.get("GLOOCY_TORCH_NONBLOCKING", "") not in ("", "0")


class _Blocking:
    """A communicator's I-methods run as its blocking calls (returning no
    request): Iallreduce -> Allreduce."""

    __slots__ = ("_comm", "_calls")

    def __init__(self, comm):
        self._comm = comm
        self._calls = {}

    def __getattr__(self, name):
        call = self._calls.get(name)
        if call is None:
            blocking = getattr(self._comm, name[1].upper() + name[2:])

            def call(*args, **kwargs):
                blocking(*args, **kwargs)
            self._calls[name] = call
        return call


def _overload(tensors, opts, options, field):
    """torch's ProcessGroup also takes allreduce(tensor, op) and
    broadcast(tensor, root) (DDP's Python code calls them so)."""
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    if opts is None or not isinstance(opts, options):
        value, opts = opts, options()
        if value is not None:
            setattr(opts, field, value)
    return tensors, opts


class _Where(tuple):
    """(rank, size, group, call, number), formatted for a message."""

    def __new__(cls, *fields):
        return tuple.__new__(cls, fields)

    def __str__(self):
        rank, size, group, call, number = self
        return f"rank {rank} of {size} in group {group or 'default'}, {call} #{number}"


class _Closed:
    """Stands for the communicator of a group that was shut down."""

    closed = True
    size = 0

    def __init__(self, rank):
        self.rank = rank

    def __getattr__(self, name):
        raise RuntimeError("gloocy: this process group was shut down")


def _gather_target(outs, like):
    """A flat tensor receiving into `outs` directly when they are one
    block's consecutive slices, else a staging tensor copied out after."""
    flat = adjacent(outs)
    if flat is not None:
        return flat, None
    flat = like.new_empty(like.numel() * len(outs))
    return flat, _scatter_back(outs, flat, [o.numel() for o in outs])


def _scatter_back(outs, flat, counts):
    def finish():
        at = 0
        for o, n in zip(outs, counts):
            o.copy_(flat[at:at + n].view(o.shape))
            at += n
    return finish


def _displs(counts):
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += c
    return out


def _counts(t, splits, n, name):
    """(counts, displacements) in elements of all_to_all_single's split
    sizes (rows of the first dimension)."""
    row = t.numel() // t.shape[0] if t.dim() and t.shape[0] else 1
    if not splits:
        if t.dim() == 0 or t.shape[0] % n:
            raise ValueError(f"gloocy: all_to_all_single: {name} is empty and the "
                             f"first dimension {tuple(t.shape)[:1]} is not divisible by {n}")
        splits = [t.shape[0] // n] * n
    if len(splits) != n or sum(splits) != (t.shape[0] if t.dim() else 1):
        raise ValueError(f"gloocy: all_to_all_single: {name} {list(splits)} must have "
                         f"{n} entries summing to the first dimension {t.shape[0] if t.dim() else 1}")
    counts = [int(s) * row for s in splits]
    return counts, _displs(counts)


def _joined(works, result):
    """One Work for several (the coalesced calls)."""
    requests = [r for w in works for r in w._requests]

    def finish():
        for w in works:
            w._complete()
    where = next((w._where for w in works if w._where is not None), "coalesced")
    return GloocyWork(requests, result, where, finish)


def monitored_barrier(pg, timeout=None, wait_all_ranks=False):
    """Rank 0 waits for a message from every rank until `timeout`
    (timedelta or seconds), names the ranks that did not send one, and
    then answers each rank that did; the others wait for that answer."""
    comm = pg.comm
    seconds = (timeout.total_seconds() if isinstance(timeout, datetime.timedelta)
               else float(timeout if timeout is not None else pg._timeout))
    deadline = time.monotonic() + seconds
    token = torch.zeros(1, dtype=torch.uint8).numpy()
    where = pg._where("monitored_barrier")
    try:
        if comm.rank != 0:
            comm.Isend(token, 0, _MONITOR_TAG).Wait()
            answer = comm.Irecv(token, 0, _MONITOR_TAG + 1)
            if not _until(answer, deadline):
                answer.Cancel()
                raise CollectiveTimeout(
                    f"rank {comm.rank} was not released by rank 0 from "
                    f"monitored_barrier within {seconds:g} s")
            return
        pending = {r: comm.Irecv(torch.zeros(1, dtype=torch.uint8).numpy(), r, _MONITOR_TAG)
                   for r in range(1, comm.size)}
        missing = []
        for r, request in pending.items():
            if not _until(request, deadline):
                missing.append(r)
                if not wait_all_ranks:
                    break
        if missing:
            # withdrawn, or a later monitored_barrier's token from these
            # ranks would complete this call's receive, not its own
            for request in pending.values():
                if not request.Test():
                    request.Cancel()
            raise RuntimeError(
                f"gloocy: [Rank 0]: Rank{'s' if len(missing) > 1 else ''} "
                f"{', '.join(map(str, missing))} failed to pass monitoredBarrier "
                f"in {seconds * 1000:.0f} ms")
        for r in range(1, comm.size):
            comm.Isend(token, r, _MONITOR_TAG + 1).Wait()
    except GloocyError as e:
        raise backend_error(e, where) from None


def _until(request, deadline):
    while not request.Test():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)
    return True
