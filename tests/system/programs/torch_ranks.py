"""Rank program of tests/system/test_torch.py: the same calls through
torch.distributed on gloo and on gloocy, compared in each rank.

    python torch_ranks.py collectives|ddp|kill   (RANK, WORLD_SIZE, MASTER_*)

The default group is gloocy's; a gloo group spans the same ranks. Every
case runs on both from the same inputs (each rank can rebuild every rank's
inputs from the seed, which gives a closed-form oracle where gloo has no
such op: AVG, PREMUL_SUM). Each rank prints one line "RESULT {json}".
"""

import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import gloocy.torch  # noqa: F401  (registers "gloocy")

FAILURES, CASES = [], []


def report(result):
    """The rank's "RESULT {json}" line, in one write: ranks under torchrun
    share one stdout, and print's text and newline may go as two writes
    (unbuffered), letting another rank's line in between."""
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()

def case(name, ok, detail=""):
    CASES.append(name)
    if not ok:
        FAILURES.append(f"{name}: {detail}")


def same(name, got, want, exact=True):
    if isinstance(got, (list, tuple)):
        for i, (g, w) in enumerate(zip(got, want)):
            same(f"{name}[{i}]", g, w, exact)
        return
    if exact:
        ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    else:
        ok = got.shape == want.shape and torch.allclose(got.double(), want.double(),
                                                        rtol=1e-2, atol=1e-3)
    case(name, ok, f"got {got.flatten()[:6].tolist()} want {want.flatten()[:6].tolist()}")


def inputs(rank, dtype, shape=(7,), low=1, high=4, salt=0):
    g = torch.Generator().manual_seed(1000 * rank + salt)
    x = torch.randint(low, high, shape, generator=g)
    return x.to(dtype)


def both(fn, make):
    """fn(group, *tensors) on gloo and on gloocy with fresh copies of
    make()'s tensors; the tensors after each call (gloo's, gloocy's)."""
    out = []
    for group in (GLOO, None):
        ts = make()
        fn(group, *ts)
        out.append(ts)
    return out


# -- the collectives -----------------------------------------------------------------

INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
R = dist.ReduceOp


def collectives():
    rank, n = dist.get_rank(), dist.get_world_size()
    for dtype in FLOATS + INTS:
        ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX] + ([R.BAND, R.BOR, R.BXOR] if dtype in INTS else [])
        for op in ops:
            gloo, mine = both(lambda g, t: dist.all_reduce(t, op=op, group=g),
                              lambda: [inputs(rank, dtype)])
            same(f"all_reduce {dtype} {op}", mine[0], gloo[0])
        everyone = torch.stack([inputs(r, dtype) for r in range(n)])
        if dtype in FLOATS:
            t = inputs(rank, dtype)
            dist.all_reduce(t, op=R.AVG)
            same(f"all_reduce {dtype} AVG", t, everyone.double().mean(0).to(dtype), exact=False)
            t = inputs(rank, dtype)
            dist.all_reduce(t, op=torch._C._distributed_c10d._make_nccl_premul_sum(0.5))
            same(f"all_reduce {dtype} PREMUL_SUM", t,
                 (everyone.double() * 0.5).sum(0).to(dtype), exact=False)
    # bool: gloo's sum of bools is "any"
    for op in (R.SUM, R.MAX, R.MIN, R.PRODUCT):
        gloo, mine = both(lambda g, t: dist.all_reduce(t, op=op, group=g),
                          lambda: [inputs(rank, torch.int64, low=0, high=2).bool()])
        same(f"all_reduce bool {op}", mine[0], gloo[0])
    # a non-contiguous tensor, made contiguous and copied back
    gloo, mine = both(lambda g, t: dist.all_reduce(t, group=g),
                      lambda: [inputs(rank, torch.float32, (4, 6)).t()])
    same("all_reduce non-contiguous", mine[0], gloo[0])
    case("all_reduce non-contiguous stays a view", not mine[0].is_contiguous())
    # a column of a matrix (elements 6 apart; gloo reduces the 4
    # consecutive elements at the column's start instead): the closed form
    m = torch.arange(24, dtype=torch.float32).reshape(4, 6) * (rank + 1)
    dist.all_reduce(m[:, 1])
    want = torch.arange(24, dtype=torch.float32).reshape(4, 6) * (rank + 1)
    want[:, 1] *= n * (n + 1) / 2 / (rank + 1)
    same("all_reduce of a strided column, its neighbours kept", m, want)
    b = torch.full((4, 6), float(rank))
    dist.broadcast(b[:, ::2], src=n - 1)
    want = torch.full((4, 6), float(rank))
    want[:, ::2] = n - 1
    same("broadcast into every other column", b, want)
    # (blocking collectives reduce one plain tensor on its address: the
    # module doing it is built with gloocy, so its absence is a failure)
    blocking = os.environ.get("GLOOCY_TORCH_NONBLOCKING", "0") == "0"
    case("allreduce's raw path is on unless nonblocking",
         (dist.group.WORLD._raw is not None) == blocking)
    # memory that is not simply the tensor's: a slice at an offset into a
    # bigger storage (its neighbours stay as they were), a Parameter that
    # requires grad, a 0-dim and an empty tensor
    gloo, mine = both(lambda g, part, whole: dist.all_reduce(part, group=g),
                      lambda: (lambda w: [w[3:8], w])(inputs(rank, torch.float32, (12,), salt=9)))
    same("all_reduce of a slice, and its storage", mine, gloo)
    gloo, mine = both(lambda g, p: dist.all_reduce(p, op=R.MAX, group=g),
                      lambda: [torch.nn.Parameter(inputs(rank, torch.float32, salt=10))])
    same("all_reduce of a Parameter", [mine[0].detach()], [gloo[0].detach()])
    for shape in ((), (0,)):
        gloo, mine = both(lambda g, t: dist.all_reduce(t, group=g),
                          lambda: [inputs(rank, torch.float64, shape, salt=11)])
        same(f"all_reduce of shape {shape}", mine[0], gloo[0])
    # a view with a negative bit: its memory holds 1 + rank, it shows the
    # negatives (gloo reduces the memory; the oracle is the values shown)
    t = torch.tensor([complex(0, rank + 1)]).conj().imag
    case("a negative-bit view is one", t.is_neg() and t.is_contiguous())
    dist.all_reduce(t, op=R.MAX)
    same("all_reduce MAX of a negative-bit view", t.resolve_neg(), torch.tensor([-1.0]))
    # async: several outstanding, waited in reverse order
    ts = [inputs(rank, torch.float32, salt=s) for s in range(3)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for w in reversed(works):
        w.wait()
    for s, t in enumerate(ts):
        same(f"async all_reduce {s}", t, sum(inputs(r, torch.float32, salt=s) for r in range(n)))
    # ranks may differ in async_op (DDP's Join does): the calls still match
    t, u = inputs(rank, torch.float32, salt=5), inputs(rank, torch.int64, salt=6)
    w = dist.all_reduce(t, async_op=rank % 2 == 1)
    dist.all_reduce(u, op=R.MAX)
    if w is not None:
        w.wait()
    same("all_reduce, async on odd ranks only", t, sum(inputs(r, torch.float32, salt=5) for r in range(n)))
    same("then a synchronous one", u, torch.stack([inputs(r, torch.int64, salt=6) for r in range(n)]).max(0).values)
    # ProcessGroup's own overloads: allreduce(tensor), broadcast(tensor, root)
    t = inputs(rank, torch.float32, salt=7)
    dist.group.WORLD.allreduce(t).wait()
    same("pg.allreduce(tensor)", t, sum(inputs(r, torch.float32, salt=7) for r in range(n)))
    t = inputs(rank, torch.float32, salt=8)
    dist.group.WORLD.broadcast(t, n - 1).wait()
    same("pg.broadcast(tensor, root)", t, inputs(n - 1, torch.float32, salt=8))
    fut = dist.all_reduce(inputs(rank, torch.float64), async_op=True).get_future()
    same("get_future value", fut.wait()[0], sum(inputs(r, torch.float64) for r in range(n)))
    fut = dist.all_reduce(inputs(rank, torch.float64), async_op=True).get_future()
    same("get_future().then", fut.then(lambda f: f.value()[0] * 2).wait(),
         2 * sum(inputs(r, torch.float64) for r in range(n)))
    gloo, mine = both(lambda g, *ts: dist.all_reduce_coalesced(list(ts), group=g),
                      lambda: [inputs(rank, torch.float32, salt=1), inputs(rank, torch.float32, (3, 2))])
    same("all_reduce_coalesced", mine, gloo)

    for root in range(n):
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            gloo, mine = both(lambda g, t: dist.broadcast(t, group_src=root, group=g),
                              lambda: [inputs(rank, dtype, (5, 3))])
            same(f"broadcast root {root} {dtype}", mine[0], gloo[0])
        for op in (R.SUM, R.MAX):
            gloo, mine = both(lambda g, t: dist.reduce(t, group_dst=root, op=op, group=g),
                              lambda: [inputs(rank, torch.float32)])
            if rank == root:
                same(f"reduce root {root} {op}", mine[0], gloo[0])
        gloo, mine = both(
            lambda g, t, *outs: dist.gather(t, list(outs) if rank == root else None,
                                            group_dst=root, group=g),
            lambda: [inputs(rank, torch.float32)] + [torch.zeros(7) for _ in range(n)])
        if rank == root:
            same(f"gather root {root}", mine[1:], gloo[1:])
        gloo, mine = both(
            lambda g, out, *ins: dist.scatter(out, list(ins) if rank == root else None,
                                              group_src=root, group=g),
            lambda: [torch.zeros(7, dtype=torch.int32)] +
                    [inputs(rank, torch.int32, salt=s) for s in range(n)])
        same(f"scatter root {root}", mine[0], gloo[0])

    # all_gather into separate tensors, and into chunks of one tensor (no staging)
    gloo, mine = both(lambda g, t, *outs: dist.all_gather(list(outs), t, group=g),
                      lambda: [inputs(rank, torch.float16)] + [torch.zeros(7, dtype=torch.float16) for _ in range(n)])
    same("all_gather", mine[1:], gloo[1:])
    gloo, mine = both(lambda g, t, big: dist.all_gather(list(big.chunk(n)), t, group=g),
                      lambda: [inputs(rank, torch.int64, (3,)), torch.zeros(3 * n, dtype=torch.int64)])
    same("all_gather into chunks", mine[1], gloo[1])
    gloo, mine = both(lambda g, t, out: dist.all_gather_into_tensor(out, t, group=g),
                      lambda: [inputs(rank, torch.bfloat16, (2, 3)), torch.zeros(2 * n, 3, dtype=torch.bfloat16)])
    same("all_gather_into_tensor", mine[1], gloo[1])
    gloo, mine = both(lambda g, out, *ins: dist.reduce_scatter(out, list(ins), group=g),
                      lambda: [torch.zeros(4)] + [inputs(rank, torch.float32, (4,), salt=s) for s in range(n)])
    same("reduce_scatter", mine[0], gloo[0])
    gloo, mine = both(lambda g, out, t: dist.reduce_scatter_tensor(out, t, op=R.MAX, group=g),
                      lambda: [torch.zeros(3, dtype=torch.int32), inputs(rank, torch.int32, (3 * n,))])
    same("reduce_scatter_tensor", mine[0], gloo[0])
    gloo, mine = both(lambda g, out, t: dist.all_to_all_single(out, t, group=g),
                      lambda: [torch.zeros(2 * n, 3), inputs(rank, torch.float32, (2 * n, 3))])
    same("all_to_all_single", mine[0], gloo[0])
    splits_in = [(rank + r) % 3 for r in range(n)]
    splits_out = [(r + rank) % 3 for r in range(n)]
    gloo, mine = both(
        lambda g, out, t: dist.all_to_all_single(out, t, splits_out, splits_in, group=g),
        lambda: [torch.zeros(sum(splits_out), 2), inputs(rank, torch.float32, (sum(splits_in), 2))])
    same("all_to_all_single with splits", mine[0], gloo[0])
    gloo, mine = both(
        lambda g, *ts: dist.all_to_all(list(ts[:n]), list(ts[n:]), group=g),
        lambda: [torch.zeros(3, dtype=torch.int64) for r in range(n)] +
                [inputs(rank, torch.int64, (3,), salt=r) for r in range(n)])
    same("all_to_all", mine[:n], gloo[:n])

    dist.barrier()
    case("barrier", True)
    # point to point: a ring, then everyone to rank 0 from any source
    if n > 1:
        right, left = (rank + 1) % n, (rank - 1) % n
        got = torch.zeros(5)
        reqs = [dist.isend(inputs(rank, torch.float32, (5,)), right),
                dist.irecv(got, left)]
        for q in reqs:
            q.wait()
        same("isend/irecv ring", got, inputs(left, torch.float32, (5,)))

        def batch(g, got):
            ops = [dist.P2POp(dist.isend, inputs(rank, torch.float64, (4,), salt=3), right, g),
                   dist.P2POp(dist.irecv, got, left, g)]
            for q in dist.batch_isend_irecv(ops):
                q.wait()
        gloo, mine = both(batch, lambda: [torch.zeros(4, dtype=torch.float64)])
        same("batch_isend_irecv ring", mine, gloo)
        if rank == 0:
            seen = set()
            for _ in range(n - 1):
                t = torch.zeros(1, dtype=torch.int64)
                src = dist.recv(t, tag=7)
                seen.add(src)
                case("recv from any source", int(t) == src * 10, f"{int(t)} from {src}")
            case("recv from any source: every rank", seen == set(range(1, n)), str(seen))
        else:
            dist.send(torch.tensor([rank * 10]), 0, tag=7)
    # objects: torch picks the group's device for them
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank})
    case("all_gather_object", objs == [{"rank": r} for r in range(n)], str(objs))
    # subgroups: the even ranks, on both backends
    evens = list(range(0, n, 2))
    sub = dist.new_group(evens)
    sub_gloo = dist.new_group(evens, backend="gloo")
    if rank in evens:
        a, b = inputs(rank, torch.float32), inputs(rank, torch.float32)
        dist.all_reduce(a, group=sub)
        dist.all_reduce(b, group=sub_gloo)
        same("subgroup all_reduce", a, b)
        case("subgroup rank", dist.get_rank(sub) == evens.index(rank))
        c = torch.tensor([float(rank)])
        dist.broadcast(c, group_src=len(evens) - 1, group=sub)
        same("subgroup broadcast", c, torch.tensor([float(evens[-1])]))
    if n % 2 == 0:
        mine, _ = dist.new_subgroups(group_size=2)
        t = torch.tensor([rank])
        dist.all_reduce(t, group=mine)
        same("new_subgroups all_reduce", t, torch.tensor([rank // 2 * 4 + 1]))
    # bad input, before any byte moves
    try:
        dist.all_reduce(torch.ones(2, device="meta"))
        case("meta tensor refused", False, "no error")
    except RuntimeError as e:
        case("meta tensor refused", "device meta" in str(e), str(e))
    try:
        dist.all_reduce(torch.ones(2), op=R.BAND)
        case("BAND on floats refused", False, "no error")
    except ValueError as e:
        case("BAND on floats refused", "BAND" in str(e), str(e))
    dist.barrier()
    case("monitored_barrier", gloocy.torch.monitored_barrier(timeout=30) is None)
    # torch's own name, which checks for gloo by name: routed to gloocy's
    case("dist.monitored_barrier", dist.monitored_barrier(
        timeout=datetime.timedelta(seconds=30), wait_all_ranks=True) is None)
    if n > 1:   # the last rank stays away: rank 0 names it, the others are not released
        if rank != n - 1:
            try:
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=2))
                case("monitored_barrier without rank n-1 raised", False, "no error")
            except RuntimeError as e:
                named = f"Rank {n - 1} failed" in str(e) if rank == 0 else \
                    f"rank {rank} was not released" in str(e)
                case("monitored_barrier without rank n-1 raised", named, str(e))
        dist.barrier()
        case("monitored_barrier again, after one failed", dist.monitored_barrier(
            timeout=datetime.timedelta(seconds=30), wait_all_ranks=True) is None)
    try:
        dist.monitored_barrier(group=GLOO, timeout=datetime.timedelta(seconds=30))
        case("dist.monitored_barrier on gloo still torch's", True)
    except Exception as e:
        case("dist.monitored_barrier on gloo still torch's", False, repr(e))
    if n > 1:
        # last, as it breaks the ranks' connections (subgroups share the
        # world's): a group's timeout= holds for its own calls, and rank 0,
        # alone in a call, hears of it as torch's error naming it
        short = dist.new_group(timeout=datetime.timedelta(seconds=10))
        if rank == 0:
            began = time.monotonic()
            try:
                dist.all_reduce(torch.ones(3), group=short)
                case("a lone collective raised", False, "no error")
            except RuntimeError as e:
                took = time.monotonic() - began
                case("a lone collective raised within the group's timeout",
                     isinstance(e, dist.DistError) and "rank 0" in str(e)
                     and "timed out" in str(e) and took < 40,
                     f"{type(e).__name__} after {took:.1f} s: {e}")
        dist.barrier(group=GLOO)    # (the others stay, not lost, meanwhile)


# -- DDP --------------------------------------------------------------------------

def model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4))


class WithUnused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.used = model(0)
        self.unused = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.used(x)


def train(group, steps, hook=None, accumulate=1, uneven=False):
    """DDP from seed 0; `uneven`: rank r takes r more steps, under
    net.join(), with an unused layer (find_unused_parameters)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    import contextlib
    rank = dist.get_rank()
    if uneven:
        torch.manual_seed(0)
        net = DDP(WithUnused(), process_group=group, find_unused_parameters=True)
        steps += rank
    else:
        net = DDP(model(0), process_group=group, bucket_cap_mb=0.002)   # several buckets
    if hook is not None:
        net.register_comm_hook(group, hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    with net.join() if uneven else contextlib.nullcontext():
        for step in range(steps):
            for micro in range(accumulate):
                x = torch.randn(8, 16, generator=g)
                y = torch.randn(8, 4, generator=g)
                if micro < accumulate - 1:
                    with net.no_sync():
                        torch.nn.functional.mse_loss(net(x), y).backward()
                else:
                    torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
            opt.zero_grad()
    return [p.detach().clone() for p in net.parameters()]


def ddp():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    world = dist.group.WORLD
    gloo_group = GLOO
    for name, kw in [("plain", {}), ("no_sync", {"accumulate": 2}),
                     ("allreduce hook", {"hook": default_hooks.allreduce_hook}),
                     ("fp16 hook", {"hook": default_hooks.fp16_compress_hook}),
                     ("join, uneven inputs, unused parameters", {"uneven": True})]:
        steps = 50 if name == "plain" else 10
        a = train(gloo_group, steps, **kw)
        b = train(world, steps, **kw)
        worst = max(float((x - y).abs().max()) for x, y in zip(a, b))
        case(f"ddp {name}", worst < (1e-2 if "fp16" in name else 1e-5), f"max diff {worst}")
    # the ranks hold the same parameters
    b = train(world, 10)
    p = torch.cat([t.flatten() for t in b])
    top = p.clone()
    dist.all_reduce(top, op=R.MAX)
    case("ddp replicas agree", torch.equal(top, p))
    # ranks that disagree on the count: gloocy's mismatch detection,
    # surfacing as torch's DistBackendError that names the ranks
    rank = dist.get_rank()
    try:
        dist.all_reduce(torch.ones(3 + 2 * rank))
        case("mismatch raised", False, "no error")
    except dist.DistBackendError as e:
        print(f"MISMATCH {e}"[:600], flush=True)
        case("mismatch names a rank", "rank" in str(e) and "count" in str(e), str(e)[:300])
    report({"rank": rank, "cases": len(CASES), "failures": FAILURES})
    os._exit(0)      # the context is poisoned: no collective goodbye


def kill():
    """Rank n-1 is killed in its third step; the others must raise."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    rank, n = dist.get_rank(), dist.get_world_size()
    net = DDP(model(0))
    started = None
    try:
        for step in range(100):
            if step == 3:
                started = time.monotonic()
                if rank == n - 1:
                    os.kill(os.getpid(), signal.SIGKILL)
            net(torch.randn(4, 16)).sum().backward()
        case("kill raised", False, "100 steps without an error")
    except Exception as e:
        seconds = time.monotonic() - started
        print(f"RAISED {type(e).__name__} after {seconds:.1f} s: {e}"[:600], flush=True)
        case("kill raised a torch error", isinstance(e, RuntimeError), type(e).__name__)
        case("kill names the rank", f"rank {n - 1}" in str(e).lower(), str(e)[:300])
    report({"rank": rank, "cases": len(CASES), "failures": FAILURES})
    os._exit(0)      # the group is broken: no collective goodbye


if __name__ == "__main__":
    mode = sys.argv[1]
    # How the ranks meet: torch's env:// (torchrun's variables), or a
    # tcp:// init_method, or a store= object, with "gloocy" or "cpu:gloocy".
    how = os.environ.get("TORCH_RANKS_INIT", "env")
    backend = os.environ.get("TORCH_RANKS_BACKEND", "gloocy")
    timeout = datetime.timedelta(seconds=60)
    if how == "env":
        dist.init_process_group(backend, timeout=timeout)
    else:
        rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        if how == "tcp":
            dist.init_process_group(backend, init_method=f"tcp://{where}",
                                    rank=rank, world_size=n, timeout=timeout)
        else:
            host, port = where.rsplit(":", 1)
            store = dist.TCPStore(host, int(port), n, is_master=rank == 0, timeout=timeout)
            dist.init_process_group(backend, store=store, rank=rank, world_size=n,
                                    timeout=timeout)
    case(f"backend {backend}", dist.get_backend() == backend, dist.get_backend())
    GLOO = dist.new_group(backend="gloo")
    {"collectives": collectives, "ddp": ddp, "kill": kill}[mode]()
    report({"rank": dist.get_rank(), "cases": len(CASES), "failures": FAILURES})
    dist.destroy_process_group()
