"""Two hosts of two ranks each, made of network namespaces on one bridge
(gloocy.testing.netns): gloocy's two-level collectives against its flat
ones (and MPICH, under mpiexec into the namespaces, and torch.distributed's
gloo backend, under torchrun in each namespace), once over the unlimited
veth and once with every host link limited by tc tbf.

For each (link, collective, size) the peers run in turn, round after
round (interleaved), each call timed on every rank; the figure is the
median over rounds of the slowest rank's mean time per call. The peers:
gloocy's two-level form (forced), its flat one (what "auto" runs over the
pairs at 4 ranks on one host), "auto" (what a caller gets: its choice is
the `auto_algorithm` column), MPICH and torch-gloo. The bytes
through host 0's link (its bridge port's counters, both ways) during a
peer's timed calls, over the calls and the message size, say how much
crossed the network per call.

    sudo python bench/hosts.py [--rounds 3] [--sizes 4,65536,1048576]
         [--rate 1gbit] [--mpich] [--torch [--torch-launcher torchrun|env]]
         [--root 0] [--out bench/results/hosts]

`--root`: the root of bcast, gather and scatter (0 leads host 0; 1 is
host 0's other rank, for which the flat trees cross the link more than
once).

Needs root and iproute2. MPICH (pip's mpich + mpi4py, ch4:ucx) runs with
MPIR_CVAR_NOLOCAL=1 and UCX_TLS=tcp: its hydra places every rank on one
node (the namespaces share a host name and a launcher) and UCX reaches a
process of the same machine through shared memory, so otherwise MPICH
would pass bytes between the "hosts" through memory. Its ranks then talk
over TCP inside a host too (the namespace's loopback), and its
collectives see one node: a handicap to keep in mind when reading its
times. The link bytes count both directions of host 0's link.

torch (`--torch`, torch 2.13 CPU build) runs as a torch user would run it
on two machines: one `torchrun --nnodes 2 --node_rank h --nproc_per_node 2`
per namespace, static rendezvous at host 0's address, every rank's
GLOO_SOCKET_IFNAME the namespace's veth (without it gloo binds the address
the host name resolves to, 127.0.0.1 here, and connectFullMesh fails across
the namespaces: "Connection refused, remote=[127.0.0.1]") and
OMP_NUM_THREADS=1.
Its calls are those of gloocy-bench's torch-gloo adapter
(gloocy/bench/impls.py): all_reduce, broadcast, all_gather_single,
reduce_scatter_single, all_to_all_single; gather and scatter, which that
adapter lacks, are dist.gather / dist.scatter. `--torch-launcher env`
starts the four ranks directly through the namespaces with the env://
variables torchrun would set (the same process group without the two
agent processes; a little quicker to start).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))          # _host_calls, in the ranks too

from gloocy.testing import World  # noqa: E402
from gloocy.testing import netns  # noqa: E402

from _host_calls import COLLECTIVES, calls_of  # noqa: E402


def flat(coll, nbytes):
    """The algorithm "auto" would run over the pairs at 4 ranks."""
    from gloocy import _core
    return _core.auto_algorithm(coll, 4, nbytes, itemsize=8)


def calls_for(nbytes):
    """Calls per timing: about 64 MiB moved, at least 3, at most 200."""
    return max(3, min(200, (64 << 20) // max(nbytes, 1)))


def r_time(comm, coll, nbytes, algorithm, calls, root):
    """(mean seconds per call on this rank after a warm-up call, the
    algorithm the last call ran)."""
    from gloocy import MPI
    once = calls_of(MPI, comm, coll, nbytes, root, algorithm=algorithm)
    once()
    comm.Barrier()
    t = time.perf_counter()
    for _ in range(calls):
        once()
    t = (time.perf_counter() - t) / calls
    ran = comm._ctx.last_algorithm
    comm.Barrier()
    return t, ran


MPI_PROGRAM = textwrap.dedent("""
    import sys, time, json
    sys.path.insert(0, sys.argv[4])
    from mpi4py import MPI
    from _host_calls import calls_of
    comm = MPI.COMM_WORLD
    coll, nbytes, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    once = calls_of(MPI, comm, coll, nbytes, int(sys.argv[5]))
    once(); comm.Barrier()
    if comm.rank == 0: sys.stdout.write("go\\n"); sys.stdout.flush(); sys.stdin.readline()
    comm.Barrier()
    t = time.perf_counter()
    for _ in range(calls): once()
    t = (time.perf_counter() - t) / calls
    ts = comm.gather(t)
    comm.Barrier()
    if comm.rank == 0: sys.stdout.write(json.dumps(max(ts)) + "\\n"); sys.stdout.flush(); sys.stdin.readline()
""")


def mpich_time(hosts, prog, coll, nbytes, calls, root=0):
    """(slowest rank's seconds per call, bytes through host 0's link during
    the timed calls, per call) under mpiexec into the namespaces."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GLOOCY_", "PMI_", "HYDRA_"))}
    env["MPIR_CVAR_NOLOCAL"] = "1"
    env["UCX_TLS"] = "tcp"          # UCX would use shared memory and CMA too
    cmd = [mpiexec]
    for h in range(2):
        cmd += [":"] * (h > 0) + ["-n", "2", *hosts.exec_prefix(h),
                                  sys.executable, str(prog), coll, str(nbytes),
                                  str(calls), str(HERE), str(root)]
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        line = p.stdout.readline()
        if line.strip() != "go":
            raise RuntimeError(f"mpiexec: {line!r} {p.stderr.read()[-2000:]}")
        before = hosts.link_bytes()[0]
        p.stdin.write("\n")
        p.stdin.flush()
        t = json.loads(p.stdout.readline())
        after = hosts.link_bytes()[0]
        p.stdin.write("\n")
        p.stdin.flush()
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    return t, (sum(after) - sum(before)) / calls


TORCH_PROGRAM = textwrap.dedent("""
    import sys, time, json, datetime
    sys.path.insert(0, sys.argv[4])
    import torch
    import torch.distributed as dist
    from _host_calls import torch_calls_of
    coll, nbytes, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    once = torch_calls_of(torch, dist, coll, nbytes, int(sys.argv[5]))
    once(); dist.barrier()
    if rank == 0: sys.stdout.write("go\\n"); sys.stdout.flush(); sys.stdin.readline()
    dist.barrier()
    t = time.perf_counter()
    for _ in range(calls): once()
    t = torch.tensor([(time.perf_counter() - t) / calls], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    dist.barrier()
    if rank == 0: sys.stdout.write(json.dumps(t.item()) + "\\n"); sys.stdout.flush(); sys.stdin.readline()
    dist.destroy_process_group()
""")

_torch_port = [29500 + os.getpid() % 20000]


def torch_time(hosts, prog, coll, nbytes, calls, root=0, launcher="torchrun"):
    """(slowest rank's seconds per call, bytes through host 0's link during
    the timed calls, per call) for torch.distributed's gloo backend, 2 ranks
    on each host, timed as mpich_time times MPICH. `launcher`: "env", four
    processes started through exec_prefix with torch's env:// variables;
    "torchrun", one torchrun per host (--nnodes 2 --node_rank h
    --nproc_per_node 2, static rendezvous at host 0's address). Either way
    GLOO_SOCKET_IFNAME names the host's veth, so gloo binds the namespace's
    address (the link), never its loopback."""
    _torch_port[0] = 29500 + (_torch_port[0] - 29500 + 1) % 20000
    port = str(_torch_port[0])
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GLOOCY_", "PMI_", "HYDRA_", "TORCHELASTIC_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                         "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"      # 4 ranks on this machine's cores
    args = [str(prog), coll, str(nbytes), str(calls), str(HERE), str(root)]
    logs, procs = [], []

    def start(cmd, env, first):
        log = tempfile.TemporaryFile()
        logs.append(log)
        procs.append(subprocess.Popen(
            cmd, env=env, stdin=subprocess.PIPE if first else subprocess.DEVNULL,
            stdout=subprocess.PIPE if first else subprocess.DEVNULL,
            stderr=log, text=True, start_new_session=True))

    for h in range(2):
        henv = dict(env, GLOO_SOCKET_IFNAME=hosts.veths[h])
        if launcher == "torchrun":
            torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
            start([*hosts.exec_prefix(h), torchrun, "--nnodes", "2",
                   "--node_rank", str(h), "--nproc_per_node", "2",
                   "--rdzv_backend", "static", "--master_addr", hosts.addrs[0],
                   "--master_port", port, "--local_addr", hosts.addrs[h],
                   "--max_restarts", "0", *args], henv, h == 0)
            continue
        for local in range(2):
            rank = 2 * h + local
            start([*hosts.exec_prefix(h), sys.executable, *args],
                  dict(henv, RANK=str(rank), WORLD_SIZE="4",
                       LOCAL_RANK=str(local), LOCAL_WORLD_SIZE="2",
                       GROUP_RANK=str(h), MASTER_ADDR=hosts.addrs[0],
                       MASTER_PORT=port), rank == 0)
    p = procs[0]

    def failed(what):
        tails = []
        for log in logs:
            log.seek(0)
            tails.append(log.read().decode(errors="replace")[-1500:])
        return RuntimeError(f"torch-gloo ({launcher}): {what}\n"
                            + "\n---\n".join(tails))

    try:
        line = p.stdout.readline()
        if line.strip() != "go":
            raise failed(repr(line))
        before = hosts.link_bytes()[0]
        p.stdin.write("\n")
        p.stdin.flush()
        line = p.stdout.readline()
        after = hosts.link_bytes()[0]
        if not line.strip():
            raise failed("no time")
        t = json.loads(line)
        p.stdin.write("\n")
        p.stdin.flush()
        for q in procs:
            q.communicate(timeout=60)
        if any(q.returncode for q in procs):
            raise failed(f"exit codes {[q.returncode for q in procs]}")
    finally:
        # SIGTERM first: a torchrun agent then stops its workers (they
        # run in sessions of their own).
        for q in procs:
            if q.poll() is None:
                os.killpg(q.pid, signal.SIGTERM)
        for q in procs:
            try:
                q.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(q.pid, signal.SIGKILL)
                q.wait()
        for log in logs:
            log.close()
    return t, (sum(after) - sum(before)) / calls


def gloocy_time(world, coll, nbytes, algorithm, calls, root=0, ran=None):
    """(slowest rank's seconds per call, bytes through host 0's link per
    call: the warm-up call and the timed ones); `ran`: a list that gets
    the algorithm rank 0 ran."""
    before = world.netns.link_bytes()[0]
    got = world.run(r_time, coll, nbytes, algorithm, calls, root,
                    timeout=600)
    after = world.netns.link_bytes()[0]
    if ran is not None:
        ran.append(got[0][1])
    return max(t for t, _ in got), (sum(after) - sum(before)) / (calls + 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="4,65536,1048576,16777216")
    ap.add_argument("--collectives", default=",".join(COLLECTIVES))
    ap.add_argument("--rate", default="1gbit", help="tbf rate of the limited run")
    ap.add_argument("--links", default="unlimited,limited")
    ap.add_argument("--mpich", action="store_true", help="also MPICH")
    ap.add_argument("--torch", action="store_true",
                    help="also torch.distributed's gloo backend")
    ap.add_argument("--torch-launcher", choices=("env", "torchrun"),
                    default="torchrun",
                    help="how torch's ranks start (see torch_time)")
    ap.add_argument("--root", type=int, default=0,
                    help="root of bcast, gather and scatter")
    ap.add_argument("--out", default=str(HERE / "results" / "hosts"))
    args = ap.parse_args()
    why = netns.missing()
    if why:
        sys.exit(f"bench/hosts.py: {why}")
    sizes = [int(s) for s in args.sizes.split(",")]
    colls = args.collectives.split(",")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prog = out / "_mpi_prog.py"
    tprog = out / "_torch_prog.py"
    rows = []
    with World(4, backend="processes", hosts=[2, 2], timeout=600,
               comm_timeout=600) as world:
        hosts = world.netns
        if args.mpich:
            prog.write_text(MPI_PROGRAM)
        if args.torch:
            tprog.write_text(TORCH_PROGRAM)
        for link in args.links.split(","):
            hosts.unlimit()
            if link == "limited":
                hosts.limit(args.rate)
            for coll in colls:
                for nbytes in sizes:
                    calls = calls_for(nbytes)
                    if link == "limited":
                        calls = max(3, calls // 4)
                    peers = {"two_level": lambda: gloocy_time(
                                 world, coll, nbytes, "two_level", calls,
                                 args.root),
                             "flat": lambda: gloocy_time(
                                 world, coll, nbytes, flat(coll, nbytes),
                                 calls, args.root)}
                    ran = []
                    peers["auto"] = lambda: gloocy_time(
                        world, coll, nbytes, None, calls, args.root, ran)
                    if args.mpich:
                        peers["mpich"] = lambda: mpich_time(
                            hosts, prog, coll, nbytes, calls, args.root)
                    if args.torch:
                        peers["torch"] = lambda: torch_time(
                            hosts, tprog, coll, nbytes, calls, args.root,
                            args.torch_launcher)
                    got = {k: [] for k in peers}
                    for _ in range(args.rounds):
                        for name, fn in peers.items():
                            got[name].append(fn())
                    row = {"link": link, "collective": coll, "bytes": nbytes,
                           "calls": calls, "root": args.root,
                           "auto_algorithm": ran[-1],
                           "load": os.getloadavg()[0]}
                    for name, runs in got.items():
                        row[f"{name}_s"] = statistics.median(t for t, _ in runs)
                        row[f"{name}_link_x"] = statistics.median(
                            b / nbytes for _, b in runs)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    prog.unlink(missing_ok=True)
    tprog.unlink(missing_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"hosts-{stamp}.json").write_text(json.dumps(rows, indent=1))
    peers = [("MPICH", "mpich")] * args.mpich + [("torch-gloo", "torch")] * args.torch
    head = ["link", "collective", "bytes", "flat ÷ two-level (time)"]
    head += [f"two-level ÷ {label} (time)" for label, _ in peers]
    head += ["auto runs", "flat ÷ auto (time)"]
    head += [f"auto ÷ {label} (time)" for label, _ in peers]
    head += ["link bytes ÷ size: " + " / ".join(
        ["two-level", "flat"] + [label for label, _ in peers]), "load"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["link"], r["collective"], str(r["bytes"]),
                 f"{r['flat_s'] / r['two_level_s']:.2f}"]
        cells += [f"{r['two_level_s'] / r[key + '_s']:.2f}" for _, key in peers]
        cells += [r["auto_algorithm"], f"{r['flat_s'] / r['auto_s']:.2f}"]
        cells += [f"{r['auto_s'] / r[key + '_s']:.2f}" for _, key in peers]
        cells.append(" / ".join(f"{r[key + '_link_x']:.2f}" for key in
                                ["two_level", "flat"] + [k for _, k in peers]))
        cells.append(f"{r['load']:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    (out / f"hosts-{stamp}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
