"""What dist.all_reduce costs through gloocy's torch backend, against
gloocy's own Allreduce on the same memory and against torch's gloo,
interleaved.

    python bench/torch_overhead.py [-n 2 4] [--sizes 4,4K,1M,16M] [--rounds 20]

For each world size N, N ranks are started on this host (torch's env://
rendezvous; the default group is gloocy's). For each size, a float32
tensor of zeros (so repeated sums stay zero) is reduced in place (SUM) by

- own:    comm.Allreduce(IN_PLACE, tensor.numpy()'s array, made once);
- gloocy: dist.all_reduce(tensor) on the gloocy group;
- floor:  dist.all_reduce(tensor) on a backend whose allreduce does nothing,
          followed by own: torch's share of the call (its Python wrapper,
          the same for every backend) plus gloocy's, the least any backend
          written in Python can cost;
- direct: the gloocy group's allreduce([tensor], options) called as torch's
          wrapper calls it (synchronous options made once), without the
          wrapper: the backend's share alone;
- bucket: the call as DDP's reducer makes it for a gradient bucket: the
          group's allreduce([tensor], options) with torch's default
          (asynchronous) options, then the Work's get_future().wait() (from Python here;
          the reducer calls from C++);
- gloo:   dist.all_reduce(tensor) on a gloo group over the same ranks.

Each is checked once against the closed form (rank r gives r + 1), then
timed. Rounds are short and rotate which goes first; each rank keeps its best
round per column, and a figure is the slowest rank's. Columns are µs per
call and ratios to own.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp import run_ranks  # noqa: E402

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20}


def size_bytes(text):
    text = text.strip().upper().rstrip("B")
    unit = text[-1:] if text[-1:] in UNITS else ""
    return int(text[:len(text) - len(unit)]) * UNITS[unit]


def launch(args):
    rows = []
    for n in args.n:
        rows += run_ranks(__file__, n, ["--sizes", args.sizes,
                                        "--rounds", str(args.rounds)])
    print(f"{'bytes':>9}{'N':>3}{'own':>9}{'direct':>9}{'gloocy':>9}{'floor':>9}"
          f"{'bucket':>9}{'gloo':>10}{'gloocy/own':>12}{'floor/own':>11}"
          f"{'gloocy/floor':>14}{'direct/own':>12}{'bucket/own':>12}{'gloo/gloocy':>13}")
    for r in rows:
        own, direct, mine, floor, bucket, gloo = (
            r[k] * 1e6 for k in ("own", "direct", "gloocy", "floor", "bucket", "gloo"))
        print(f"{r['bytes']:>9}{r['n']:>3}{own:>9.1f}{direct:>9.1f}{mine:>9.1f}"
              f"{floor:>9.1f}{bucket:>9.1f}{gloo:>10.1f}{mine / own:>12.2f}"
              f"{floor / own:>11.2f}{mine / floor:>14.2f}{direct / own:>12.2f}"
              f"{bucket / own:>12.2f}{gloo / mine:>13.1f}")
    print("µs per call, the slowest rank's best round")


# -- in each rank -------------------------------------------------------------------

def worker(args):
    import torch
    import torch.distributed as dist

    import gloocy
    import gloocy.torch

    class DoesNothing(dist.ProcessGroup):
        def allreduce(self, tensors, opts=None):
            return None

    dist.Backend.register_backend(
        "does_nothing", lambda opts, options=None: DoesNothing(opts.group_rank,
                                                               opts.group_size),
        extended_api=True, devices=["cpu"])
    dist.init_process_group("gloocy")
    gloo = dist.new_group(backend="gloo")
    nothing = dist.new_group(backend="does_nothing")
    comm = gloocy.torch.communicator()
    group = dist.group.WORLD
    sync = dist.AllreduceOptions()
    sync.asyncOp = False
    default = dist.AllreduceOptions()   # what DDP's reducer passes
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)

    for size in [size_bytes(s) for s in args.sizes.split(",")]:
        t = torch.zeros(max(size // 4, 1), dtype=torch.float32)
        a = t.numpy()

        def own():
            comm.Allreduce(gloocy.IN_PLACE, a)

        def floor():
            dist.all_reduce(t, group=nothing)
            comm.Allreduce(gloocy.IN_PLACE, a)

        runs = {"own": own, "direct": lambda: group.allreduce([t], sync),
                "gloocy": lambda: dist.all_reduce(t), "floor": floor,
                "bucket": lambda: group.allreduce([t], default).get_future().wait(),
                "gloo": lambda: dist.all_reduce(t, group=gloo)}
        for label, run in runs.items():     # each checked once, as warm-up
            t.fill_(rank + 1)
            run()
            if not bool((t == n * (n + 1) // 2).all()):
                sys.exit(f"rank {rank}: {label} all_reduce of {size} B is wrong")
        t.zero_()       # (repeated sums stay zero)
        # Rounds of about 2 ms of gloocy's own call (fewer preemptions by
        # the other processes of a busy machine).
        iters = max(3, min(200, int(2e-3 / _time(own, comm))))
        best = dict.fromkeys(runs, float("inf"))
        for round_ in range(args.rounds):
            labels = list(runs)
            k = round_ % len(labels)
            labels = labels[k:] + labels[:k]
            for label in labels:
                run = runs[label]
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    run()
                best[label] = min(best[label], (time.perf_counter() - t0) / iters)
        every = comm.gather(best, root=0)
        if rank == 0:
            row = {"bytes": size, "n": n,
                   **{label: max(b[label] for b in every) for label in runs}}
            print("ROW " + json.dumps(row), flush=True)
    dist.destroy_process_group()


def _time(run, comm):
    """Seconds one call takes (the slowest rank's, so all agree)."""
    import gloocy
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(3):
        run()
    return comm.allreduce((time.perf_counter() - t0) / 3, op=gloocy.MAX)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, nargs="+", default=[2, 4])
    p.add_argument("--sizes", default="4,64,4K,64K,1M,16M",
                   help="comma-separated bytes (K, M suffixes)")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    worker(args) if args.worker else launch(args)


if __name__ == "__main__":
    main()
