"""A DDP training step on gloocy's torch backend
against torch's gloo backend, interleaved.

    python bench/ddp.py [-n 2 4] [--steps 20] [--rounds 3] [--json FILE]

For each world size N, N ranks are started on this host (torch's env://
rendezvous). Each rank holds the default group (gloocy) and a gloo group
over the same ranks, and for each model builds two DistributedDataParallel
replicas from one seed, one per group. Rounds alternate which backend goes
first; a step is forward, backward (DDP's bucketed allreduce overlapping
it) and an SGD step, timed as the slowest rank's median step. Models: a
small MLP (~7 K parameters) and a mid-sized one (~4.2 M parameters, 16 MiB
of gradients).

Ratios below 1 favour gloocy. bench/torch_overhead.py times
dist.all_reduce through the backend against gloocy's own Allreduce.
"""

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import time

MODELS = {
    "small MLP": [32, 64, 64, 10],
    "mid MLP": [1024, 2048, 1024, 64],
}


def run_ranks(script, n, worker_args):
    """Start `script --worker WORKER_ARGS` as N ranks on this host (torch's
    env:// rendezvous on a free port); the rows its rank 0 prints as
    "ROW {json}"."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), OMP_NUM_THREADS="1",
               LOCAL_WORLD_SIZE=str(n))
    procs = [subprocess.Popen(
        [sys.executable, script, "--worker", *worker_args],
        env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE)
        for r in range(n)]
    outs = [p.communicate()[0].decode() for p in procs]
    if any(p.returncode for p in procs):
        sys.exit(f"N = {n}: a rank failed (exit codes "
                 f"{[p.returncode for p in procs]})")
    return [json.loads(line[4:]) for line in outs[0].splitlines()
            if line.startswith("ROW ")]


def launch(args):
    rows = []
    for n in args.n:
        rows += run_ranks(__file__, n, ["--steps", str(args.steps),
                                        "--rounds", str(args.rounds)])
    print(f"{'what':<38}{'N':>3}{'gloo':>12}{'gloocy':>12}{'ratio':>8}")
    for r in rows:
        print(f"{r['what']:<38}{r['n']:>3}{r['base_s'] * 1e6:>10.0f}us"
              f"{r['gloocy_s'] * 1e6:>10.0f}us{r['gloocy_s'] / r['base_s']:>8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "cpus": os.cpu_count(), "steps": args.steps,
                       "rounds": args.rounds, "rows": rows}, f, indent=1)


# -- in each rank -------------------------------------------------------------------

def worker(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import gloocy.torch  # noqa: F401  (registers "gloocy")

    dist.init_process_group("gloocy", timeout=datetime.timedelta(seconds=300))
    gloo = dist.new_group(backend="gloo")
    world = dist.group.WORLD
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
        return float(t)

    def emit(what, base, mine):
        if rank == 0:
            print("ROW " + json.dumps({"what": what, "n": n, "base_s": base,
                                       "gloocy_s": mine}), flush=True)

    for name, widths in MODELS.items():
        replicas = {}
        for label, group in (("gloo", gloo), ("gloocy", world)):
            net = DDP(mlp(torch, widths), process_group=group)
            replicas[label] = (net, torch.optim.SGD(net.parameters(), lr=0.01))
        x = torch.randn(32, widths[0])
        y = torch.randn(32, widths[-1])
        times = {"gloo": [], "gloocy": []}
        for round_ in range(args.rounds):
            order = ["gloo", "gloocy"] if round_ % 2 == 0 else ["gloocy", "gloo"]
            for label in order:
                net, opt = replicas[label]
                for step in range(args.steps + 2):
                    dist.barrier(group=gloo)
                    t0 = time.perf_counter()
                    loss = torch.nn.functional.mse_loss(net(x), y)
                    loss.backward()
                    opt.step()
                    opt.zero_grad()
                    took = time.perf_counter() - t0
                    if step >= 2:                    # warm-up steps left out
                        times[label].append(took)
        params = sum(p.numel() for p in replicas["gloo"][0].parameters())
        emit(f"DDP step, {name} ({params / 1e6:.2f} M)",
             slowest(statistics.median(times["gloo"])),
             slowest(statistics.median(times["gloocy"])))

    dist.destroy_process_group()


def mlp(torch, widths):
    """The same model in every rank and replica (one seed)."""
    torch.manual_seed(0)
    layers = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, nargs="+", default=[2, 4])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    worker(args) if args.worker else launch(args)


if __name__ == "__main__":
    main()
