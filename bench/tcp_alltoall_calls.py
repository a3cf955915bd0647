"""gloocy:tcp's alltoall (or bcast) call by call, against torch-gloo's
all_to_all_single (broadcast) in the same job (both libraries initialised
in every rank, blocks of calls alternating), with what each rank's kernel
says about the calls: CPU time run and waited for (/proc/self/schedstat),
context switches (getrusage) and the TCP socket buffers.

    GLOOCY_TRANSPORT=tcp python -m gloocy.run -n 2 python bench/tcp_alltoall_calls.py \\
        --sizes 1M,4M,16M --calls 20 --blocks 5 [--port 29517] [--out FILE.json] \\
        [--collective bcast] [--variants base,yield=0,algo=chain+seg=4M,sync]

Rank 0 prints a line per (size, library, block): its median, min and max
call in µs, each rank's CPU time per call (all its threads), the time its
calling thread waited for a CPU while runnable, voluntary and involuntary
context switches per call, and in how many calls some two ranks' calling
threads ended on one CPU (where the scheduler stacked them: see
bench/results/tcp-alltoall-swing-2026-12-05.md). --variants runs gloocy
once per variant, each block with knobs set on the communicator's context
(the pipeline segment, spin and yield times, a bcast algorithm, a barrier
after each call). --out keeps every call's time and CPU (the bench's
figure, the slowest rank's median per block: bench/results/
tcp-n4-2026-12-06/probe_blocks.py). Timings only; asserts nothing about
speed.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import resource
import socket
import time

import numpy as np


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def schedstat() -> tuple[int, int, int]:
    """(ns run, ns waiting to run, time slices) of this thread so far."""
    with open("/proc/thread-self/schedstat") as f:
        run, wait, slices = f.read().split()
    return int(run), int(wait), int(slices)


def switches() -> tuple[int, int]:
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    return ru.ru_nvcsw, ru.ru_nivcsw


def tcp_buffers() -> list[tuple[int, int]]:
    """(SO_SNDBUF, SO_RCVBUF) of this process's connected TCP sockets."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = os.dup(int(name))
        except OSError:
            continue
        try:
            s = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            continue
        with s:
            if s.type != socket.SOCK_STREAM:
                continue
            try:
                s.getpeername()
            except OSError:
                continue
            out.append((s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                        s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)))
    return out


_libc = ctypes.CDLL(None, use_errno=True)


def migrations() -> int:
    """How often the scheduler has moved this thread between CPUs."""
    with open("/proc/thread-self/sched") as f:
        for line in f:
            if line.startswith("se.nr_migrations"):
                return int(line.split(":")[1])
    return 0


def block(call, calls: int) -> dict:
    times = np.empty(calls)
    cpus = np.empty(calls, dtype=np.int64)
    m0 = migrations()
    s0, c0, p0 = schedstat(), switches(), time.process_time()
    for i in range(calls):
        t = time.perf_counter()
        call()
        times[i] = time.perf_counter() - t
        cpus[i] = _libc.sched_getcpu()
    s1, c1, p1 = schedstat(), switches(), time.process_time()
    return dict(times_us=(times * 1e6).tolist(),
                cpu_us=(p1 - p0) * 1e6 / calls,
                cpus=cpus.tolist(), migrations=migrations() - m0,
                run_us=(s1[0] - s0[0]) / 1e3 / calls,
                waitcpu_us=(s1[1] - s0[1]) / 1e3 / calls,
                vcsw=(c1[0] - c0[0]) / calls, ivcsw=(c1[1] - c0[1]) / calls)


# --variants: the gloocy knobs a variant sets on the communicator's
# context for its calls, as Context attributes (see _context.pxd, _links.pxd)
KNOBS = {"seg": lambda ctx, v: setattr(ctx, "segment", parse_size(v)),
         "spin": lambda ctx, v: setattr(ctx, "spin_ns", int(v) * 1000),
         "yield": lambda ctx, v: setattr(ctx.links, "yield_ns", int(v) * 1000)}


def with_knobs(comm, spec, call):
    """call() with the knobs of `spec` ("seg=4M+yield=0"; "base": none)
    set on the communicator's context, then set back."""
    ctx = comm._ctx
    saved = (ctx.segment, ctx.spin_ns, ctx.links.yield_ns)
    sets = [kv.split("=") for kv in spec.split("+") if kv != "base"]
    sync = ["sync"] in sets                  # a barrier after each call
    sets = [kv for kv in sets if kv != ["sync"]]
    algo = dict(sets).pop("algo", None)
    sets = [(k, v) for k, v in sets if k != "algo"]

    def run():
        for k, v in sets:
            KNOBS[k](ctx, v)
        try:
            call(algorithm=algo) if algo else call()
            if sync:
                comm.Barrier()
        finally:
            ctx.segment, ctx.spin_ns, ctx.links.yield_ns = saved
    return run


def calls(a, comm, n, torch):
    """{library: call} for `n` float32 per rank, and check(name, call),
    which runs a call once and exits if its result is wrong."""
    rank, size = comm.rank, comm.size
    if a.collective == "alltoall":
        send = np.arange(n, dtype=np.float32) + rank * n
        recv = np.empty_like(send)
        want = np.concatenate([np.arange(n, dtype=np.float32)[
            rank * (n // size):(rank + 1) * (n // size)] + r * n
            for r in range(size)])
        libs = {"gloocy:tcp": lambda: comm.Alltoall(send, recv)}
        if torch is not None:
            import torch.distributed as dist
            ts, tr = torch.from_numpy(send), torch.from_numpy(recv)
            libs["torch-gloo"] = lambda: dist.all_to_all_single(tr, ts)
    else:
        recv = np.empty(n, dtype=np.float32)
        want = np.arange(n, dtype=np.float32)
        libs = {"gloocy:tcp": lambda algorithm=None: comm.Bcast(
            recv, root=0, algorithm=algorithm)}
        if torch is not None:
            import torch.distributed as dist
            tr = torch.from_numpy(recv)
            libs["torch-gloo"] = lambda: dist.broadcast(tr, src=0)
    if a.variants:
        gloocy_call = libs.pop("gloocy:tcp")
        libs = {**{f"g:{v}": with_knobs(comm, v, gloocy_call)
                   for v in a.variants.split(",")}, **libs}

    def check(name, call):
        recv[:] = want if a.collective == "bcast" and rank == 0 else -1
        call()
        if not np.array_equal(recv, want):
            raise SystemExit(f"rank {rank}: {name} gave a wrong result")
    return libs, check


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1M,4M,16M",
                   help="send buffer bytes per rank, comma-separated (K, M, G)")
    p.add_argument("--calls", type=int, default=20, help="calls per block")
    p.add_argument("--blocks", type=int, default=5, help="blocks per library")
    p.add_argument("--port", type=int, default=29517, help="torch's rendezvous port")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--collective", default="alltoall", choices=("alltoall", "bcast"))
    p.add_argument("--variants", default="",
                   help="gloocy variants, comma-separated, each 'base' or knobs "
                        "joined by '+': seg=BYTES, spin=US, yield=US, algo=NAME (bcast), sync (a barrier after each call; e.g. "
                        "base,yield=0,seg=4M+yield=0); default: the job's")
    p.add_argument("--out", default="", help="rank 0 writes the figures here (JSON)")
    a = p.parse_args()

    import gloocy
    comm = gloocy.init()
    rank, size = comm.rank, comm.size
    libs = {}
    if not a.no_torch:
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                                rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=120))
    rows = []
    for text in a.sizes.split(","):
        n = parse_size(text) // 4 // size * size
        libs, check = calls(a, comm, n, torch if not a.no_torch else None)
        for name, call in libs.items():         # checked once, warmed up
            check(name, call)
            for _ in range(3):
                call()
        for b in range(a.blocks):
            for name, call in libs.items():
                comm.Barrier()
                r = block(call, a.calls)
                r.update(lib=name, size=n * 4, block=b, rank=rank,
                         buffers=tcp_buffers() if name.startswith("gloocy") else [])
                rows.append(r)
    every = comm.gather(rows, root=0)
    if rank == 0:
        for r0 in every[0]:
            peers = [next(x for x in rs if x["lib"] == r0["lib"] and
                          x["size"] == r0["size"] and x["block"] == r0["block"])
                     for rs in every]
            t = np.array(r0["times_us"])
            same = sum(len(set(c)) < len(c) for c in zip(*(x["cpus"] for x in peers)))
            print(f"{r0['size'] >> 10:>6} KiB {r0['lib']:<12} b{r0['block']} "
                  f"med {np.median(t):7.0f} min {t.min():7.0f} max {t.max():7.0f} us"
                  f" | cpu/call " + " ".join(f"{x['cpu_us']:6.0f}" for x in peers)
                  + " waiting for a CPU " + " ".join(f"{x['waitcpu_us']:6.0f}" for x in peers)
                  + " vcsw/call " + " ".join(f"{x['vcsw']:5.1f}" for x in peers)
                  + " ivcsw/call " + " ".join(f"{x['ivcsw']:5.1f}" for x in peers)
                  + f" | shared a CPU {same}/{len(t)}", flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(every, f)
    if not a.no_torch:
        dist.destroy_process_group()
    comm.Free()


if __name__ == "__main__":
    main()
