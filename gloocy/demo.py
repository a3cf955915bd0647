"""gloocy's demo: check the collectives against closed forms, then time them.

    gloocy-run -n 4 python -m gloocy.demo

Rank 0 prints the report. A rank whose check fails raises AssertionError
naming the check and the rank, and the launcher stops the job. Each group of
checks ends in a Barrier, so an "ok" line means every rank passed it.
"""

import os
import statistics
import time

import numpy as np

import gloocy
from gloocy import MAX, MIN, PROD, SUM

OPS = (SUM, PROD, MIN, MAX)
ALGORITHMS = (None, "recursive_doubling", "ring")   # None: automatic
COUNTS = (7, 300_001)              # fewer elements than ranks; many segments
SIZES = (4, 4 << 10, 1 << 20, 16 << 20)
BUDGET = 1.0                       # seconds of timing per size


def check(comm, name, got, want):
    if not np.array_equal(np.asarray(got), np.asarray(want)):
        raise AssertionError(f"rank {comm.rank}: check {name!r} failed: "
                             f"got {got!r}, expected {want!r}")


def passed(comm, name):
    comm.Barrier()                 # raises here if another rank failed
    if comm.rank == 0:
        print(f"check {name:<56} ok")


def allreduce_input(op, rank, n, count, dtype):
    """This rank's input and the closed-form result on every rank."""
    i = np.arange(count)
    base = (rank + i) % n + 1      # over the ranks: a permutation of 1..n
    scale = i % 3 + 1
    if op is PROD:                 # bounded at any n: one rank -scale, rest 1
        return np.where(base == 1, -scale, 1).astype(dtype), -scale
    # ops are unhashable (as mpi4py's): looked up by name
    want = {SUM.name: scale * (n * (n + 1) // 2), MIN.name: scale,
            MAX.name: scale * n}[op.name]
    return (base * scale).astype(dtype), want


def check_collectives(comm):
    r, n = comm.rank, comm.size
    comm.Barrier()
    passed(comm, "Barrier")
    for root in range(n):
        for count in COUNTS:
            buf = (np.arange(count, dtype=np.float64) + 1000 * root if r == root
                   else np.zeros(count))
            comm.Bcast(buf, root=root)
            check(comm, f"Bcast root={root} count={count}", buf,
                  np.arange(count) + 1000 * root)
    passed(comm, "Bcast from every root")
    for algorithm in ALGORITHMS:
        label = algorithm or "automatic"
        for dtype in (np.float64, np.int32):
            for op in OPS:
                for count in COUNTS:
                    x, want = allreduce_input(op, r, n, count, dtype)
                    out = np.empty_like(x)
                    comm.Allreduce(x, out, op=op, algorithm=algorithm)
                    name = f"Allreduce {label} {np.dtype(dtype)} {op.name}"
                    check(comm, f"{name} count={count} out of place", out, want)
                    comm.Allreduce(gloocy.IN_PLACE, x, op=op, algorithm=algorithm)
                    check(comm, f"{name} count={count} in place", x, want)
            passed(comm, f"Allreduce {np.dtype(dtype)!s:<7} {label:<18} "
                         "SUM PROD MIN MAX")
    for root in range(n):
        obj = {"root": root, "data": list(range(root))} if r == root else None
        check(comm, f"bcast root={root}", comm.bcast(obj, root=root) ==
              {"root": root, "data": list(range(root))}, True)
    check(comm, "allreduce SUM", comm.allreduce(r + 1), n * (n + 1) // 2)
    check(comm, "allreduce MAX", comm.allreduce(r, op=MAX), n - 1)
    check(comm, "allreduce SUM of lists", comm.allreduce([r]), list(range(n)))
    check(comm, "allgather", comm.allgather(("rank", r, "x" * r)) ==
          [("rank", i, "x" * i) for i in range(n)], True)
    passed(comm, "objects: bcast, allreduce, allgather")
    check_more(comm)


def check_more(comm):
    """The rest of the set, each against its closed form."""
    r, n = comm.rank, comm.size
    mine = np.full(3, r + 1, dtype=np.int64)        # rank i holds i+1
    every = np.repeat(np.arange(1, n + 1), 3)       # what gathering gives
    out = np.zeros(3 * n, np.int64)
    comm.Allgather(mine, out)
    check(comm, "Allgather", out, every)
    for root in range(n):
        out = np.zeros(3 * n, np.int64) if r == root else None
        comm.Gather(mine, out, root=root)
        if r == root:
            check(comm, f"Gather root={root}", out, every)
        got = np.zeros(3, np.int64)
        comm.Scatter(every if r == root else None, got, root=root)
        check(comm, f"Scatter root={root}", got, mine)
        total = np.zeros(3, np.int64) if r == root else None
        comm.Reduce(mine, total, op=SUM, root=root)
        if r == root:
            check(comm, f"Reduce root={root}", total, np.full(3, n * (n + 1) // 2))
    send = np.arange(n, dtype=np.int64) + 100 * r   # block i goes to rank i
    recv = np.zeros(n, np.int64)
    comm.Alltoall(send, recv)
    check(comm, "Alltoall", recv, np.arange(n) * 100 + r)
    block = np.zeros(2, np.int64)
    comm.Reduce_scatter_block(np.arange(2 * n, dtype=np.int64), block)
    check(comm, "Reduce_scatter_block", block, np.arange(2 * r, 2 * r + 2) * n)
    prefix = np.zeros(3, np.int64)
    comm.Scan(mine, prefix)
    check(comm, "Scan", prefix, np.full(3, (r + 1) * (r + 2) // 2))
    passed(comm, "(All)gather Scatter Reduce Alltoall Reduce_scatter Scan")
    right, left = (r + 1) % n, (r - 1) % n
    got = np.zeros(3, np.int64)
    reqs = [comm.Irecv(got, source=left, tag=7), comm.Isend(mine, dest=right, tag=7)]
    gloocy.Waitall(reqs)
    check(comm, "Isend/Irecv ring", got, np.full(3, left + 1))
    x = np.full(4, float(r))
    req = comm.Iallreduce(gloocy.IN_PLACE, x, op=gloocy.AVG)
    req.Wait()
    check(comm, "Iallreduce AVG", x, np.full(4, (n - 1) / 2))
    passed(comm, "point-to-point and nonblocking")


def slowest_median(comm, call, budget=BUDGET):
    """Median seconds per call on the slowest rank; all ranks agree on the
    iteration count because it comes from a MAX-allreduced estimate."""
    call()                          # warm-up
    start = time.perf_counter()
    call()
    estimate = np.array([time.perf_counter() - start])
    comm.Allreduce(gloocy.IN_PLACE, estimate, op=MAX)
    iters = int(min(max(budget / max(estimate[0], 1e-9), 5), 2000))
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    median = np.array([statistics.median(times)])
    comm.Allreduce(gloocy.IN_PLACE, median, op=MAX)
    return median[0]


def measure(comm):
    n = comm.size
    rows = []
    for nbytes in SIZES:
        ones = np.ones(nbytes // 4, dtype=np.float32)
        out = np.empty_like(ones)
        t = slowest_median(comm, lambda: comm.Allreduce(ones, out))
        check(comm, f"timed Allreduce of {human(nbytes)}", out, np.full_like(out, n))
        rows.append((nbytes, t))
    return rows, slowest_median(comm, comm.Barrier)


def human(nbytes):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def main():
    comm = gloocy.init()
    n = comm.size
    if comm.rank == 0:
        links = comm._ctx.links
        kinds = {type(p).__name__ for p in links.pairs if p is not None}
        if "LazyPair" in kinds:     # connected on first use: say what they will be
            kinds.discard("LazyPair")
            kinds.add("ShmPair" if getattr(links.connector, "all_local", False)
                      else "connected on first use")
        transport = ({"ShmPair": "shared memory", "TcpPair": "tcp"}.get(k, k)
                     for k in sorted(kinds))
        transport = " + ".join(transport) or "none (one rank)"
        if comm._ctx.node is not None:
            transport += " (node collectives)"
        print(f"gloocy {gloocy.__version__} demo: {n} rank(s), "
              f"transport {transport}\n(buffers of {' and '.join(map(str, COUNTS))} "
              "elements; Allreduce in place and out of place)")
    check_collectives(comm)
    rows, barrier = measure(comm)
    if comm.rank == 0:
        factor = 2 * (n - 1) / n
        print(f"\n{'Allreduce':>10}  {'median latency':>15}  {'bus bandwidth':>14}")
        for nbytes, t in rows:
            bw = f"{factor * nbytes / t / 1e9:10.3f} GB/s" if n > 1 else f"{'-':>14}"
            print(f"{human(nbytes):>10}  {t * 1e6:12.1f} us  {bw}")
        print(f"{'Barrier':>10}  {barrier * 1e6:12.1f} us")


if __name__ == "__main__":
    main()
