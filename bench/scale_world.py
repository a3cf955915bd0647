"""Thousands of thread ranks in one process, as gloocy.testing builds them
(issue 19's scale simulation, the way a user of gloocy.testing runs it):

    PYTHONPATH=. python bench/scale_world.py -n 1024 4096

Each world (the default transport: the ranks share the node segment, pairs
are made on first use) runs start-up, a barrier, an allreduce of 128 B (through
the segment, then forced to the ring and to recursive doubling), a bcast, a Split into 64 groups with an allreduce and a bcast in each, a
barrier, and
close. Prints the seconds of each phase from the test process (a run()
call: starting a thread per rank included) and inside the ranks (from the
first rank into the call to the last one out), connections per rank and
the process's open fds and proportional set size per rank after each
phase (counted from before World(n)). bench/scale.py runs ranks over TCP
in several processes instead.
"""

import argparse
import os
import resource
import time

import numpy as np

import gloocy
from gloocy.testing import World


# The allreduce again, forced to each of these algorithms (pairs made on
# first use: 2 a rank for the ring, log2 N for recursive doubling).
ALLREDUCE_FORCED = ("ring", "recursive_doubling")


def forced_that_fit(n):
    """(ALLREDUCE_FORCED but those whose pairs would not fit in this
    process's fds, a line on each left out). Rank threads of one process
    pair up in memory, with no fd (transport/inproc.py); with that turned
    off (GLOOCY_INPROC_PAIRS=0) a shared-memory pair holds a socket at each
    end: about n fds per pair a rank connects."""
    from gloocy.transport import inproc
    if inproc.enabled(os.environ.get("GLOOCY_TRANSPORT") or "auto"):
        return list(ALLREDUCE_FORCED), []
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    pairs = {"ring": 2, "recursive_doubling": (n - 1).bit_length() + 1}
    fit = [a for a in ALLREDUCE_FORCED if pairs[a] * n < 0.9 * limit]
    notes = [f"- allreduce {a} left out: about {pairs[a] * n} fds ({pairs[a]} "
             f"pairs a rank), over this process's limit of {limit}\n"
             for a in ALLREDUCE_FORCED if a not in fit]
    return fit, notes


def phases(comm, n, split_too, forced):
    """The calls, timed inside the rank: ({phase: (entered, left)},
    connections, {phase: (fds, PSS KiB)} at rank 0). After each phase an
    untimed barrier, then rank 0 counts the process's open fds and its
    proportional set size, so each phase starts with every rank out of
    the one before."""
    r = comm.Get_rank()
    at, held = {}, {}

    def timed(name, fn):
        t = time.monotonic()
        fn()
        at[name] = (t, time.monotonic())
        comm.Barrier()
        if r == 0:
            held[name] = (len(os.listdir("/proc/self/fd")), pss())

    timed("barrier", comm.Barrier)
    x = np.full(16, r, dtype=np.int64)
    timed("allreduce", lambda: comm.Allreduce(gloocy.IN_PLACE, x))
    assert (x == n * (n - 1) // 2).all()
    for algo in forced:                   # over the pairs, not the segment
        x = np.full(16, r, dtype=np.int64)
        timed(f"allreduce {algo}", lambda: comm.Allreduce(
            gloocy.IN_PLACE, x, algorithm=algo))
        assert (x == n * (n - 1) // 2).all()
    y = np.arange(64, dtype=np.int64) if r == 0 else np.zeros(64, np.int64)
    timed("bcast", lambda: comm.Bcast(y, root=0))
    assert (y == np.arange(64)).all()

    def split():
        sub = comm.Split(r % 64, r)
        z = np.ones(1)
        sub.Allreduce(gloocy.IN_PLACE, z)
        assert z[0] == sub.Get_size()
        last = sub.Get_size() - 1
        w = np.arange(8) if sub.Get_rank() == last else np.zeros(8, np.int64)
        sub.Bcast(w, root=last)
        assert (w == np.arange(8)).all()
        sub.Free()
    if split_too:
        timed("split 64", split)
    timed("barrier again", comm.Barrier)
    return at, len(comm._ctx.links.connected), held


def pss():
    """This process's proportional set size (KiB): pages mapped by several
    ranks (the node segment) counted once, as resident sets do not."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def one(n, timeout, split_too):
    forced, notes = forced_that_fit(n)
    pss0, fds0 = pss(), len(os.listdir("/proc/self/fd"))
    t0 = time.monotonic()
    w = World(n, timeout=timeout)
    t1 = time.monotonic()
    up = (len(os.listdir("/proc/self/fd")) - fds0) / n, (pss() - pss0) / n
    try:
        got = w.run(phases, n, split_too, forced)
        t2 = time.monotonic()
        peak = pss()
    finally:
        w.close()
    t3 = time.monotonic()
    grew = (peak - pss0) * 1024
    print(f"## {n} thread ranks in one process (gloocy.testing.World)\n")
    print(f"- start-up (World({n})): {t1 - t0:.2f} s; run() of the calls below: "
          f"{t2 - t1:.2f} s; close: {t3 - t2:.2f} s; after start-up: "
          f"{up[0]:.2f} fds and {up[1]:.0f} KiB (PSS) per rank\n")
    print("".join(notes), end="\n" if notes else "")
    held = got[0][2]
    print("| phase | first rank in → last rank out (s) | fds per rank after "
          "| PSS per rank after (KiB) |\n|---|---|---|---|")
    for name in got[0][0]:
        first = min(at[name][0] for at, _, _ in got)
        last = max(at[name][1] for at, _, _ in got)
        fds, kib = held[name]
        print(f"| {name} | {last - first:.2f} | {(fds - fds0) / n:.2f} "
              f"| {(kib - pss0) / n:.0f} |")
    conns = [c for _, c, _ in got]
    print(f"\n- connections per rank: max {max(conns)}, mean {sum(conns) / n:.1f}")
    print(f"- memory: {grew / n / 1024:.0f} KiB per rank (the process's "
          f"proportional set size grew by {grew / 2**20:.0f} MiB: each page "
          f"counted once, however many ranks map it)\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, nargs="+", default=[1024])
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--no-split", action="store_true",
                   help="leave the Split into 64 groups out")
    args = p.parse_args()
    # Thousands of rank threads hold tens of thousands of fds: raise the
    # limit as far as the system lets us (as root, past the hard limit).
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))
    except (ValueError, OSError):
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"- load average before: {os.getloadavg()[0]:.1f}\n")
    for n in args.n:
        one(n, args.timeout, not args.no_split)
    print(f"- load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
