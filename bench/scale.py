"""Thousands of ranks on one machine: ranks as threads spread over a few
processes (issue 19's scale simulation).

    PYTHONPATH=. python bench/scale.py -n 1024 --procs 4
    PYTHONPATH=. python bench/scale.py -n 4096 --procs 8
    PYTHONPATH=. python bench/scale.py -n 4096 --procs 8 --stop-after allreduce
    PYTHONPATH=. python bench/scale.py -n 4096 --procs 8 --host-per-process
    PYTHONPATH=. python bench/scale.py -n 4096 --procs 8 --transport auto

The parent serves a TCP store; each worker process raises its fd limit,
starts its share of the ranks as threads, and each rank runs, timed by
phase: start-up (gloocy.connect, lazy connections), a barrier, an
allreduce of 128 B as gloocy chooses (recursive doubling) and then by
ring, a bcast, a Split into 64 groups (with an allreduce in each), and
Free. Ranks connect over TCP (--transport tcp, the default:
GLOOCY_TRANSPORT=tcp), or as gloocy chooses (--transport auto: every rank
on this host, so the node segment serves the world's collectives). With
--host-per-process each worker process stands for a host of its own
(GLOOCY_HOST_ID, the transport left to gloocy): its ranks share memory,
the processes talk over TCP, as ranks of a batch job on several nodes.
Prints a markdown table: seconds per phase (the slowest rank: phases end
with a barrier-like collective), the seconds from the first rank's
connect() until the last rank is through rendezvous, the barrier and the
allreduce, connections per rank, store operations
in total and per rank (at start-up and in all), and resident memory per
rank (the processes' RSS over their ranks).
"""

import argparse
import collections
import json
import math
import os
import re
import resource
import secrets
import subprocess
import sys
import threading
import time

import numpy as np

PHASES = ("start-up", "barrier", "allreduce", "allreduce ring", "bcast",
          "split 64", "free")
PHASE_NAMES = {"start-up": "rendezvous", "barrier": "barrier", "allreduce": "allreduce"}


class CountingStore:
    """A store client that counts its operations: a batch's each, and each
    key a get_many reads (rank 0 reads every rank's host where they span
    hosts: N in one request)."""

    COUNTED = ("set", "get", "add", "wait", "check", "delete", "clear",
               "compare_set", "batch", "get_many")

    def __init__(self, inner):
        self.inner, self.ops, self.trips = inner, 0, 0   # operations, requests

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name not in self.COUNTED:
            return attr

        def counted(*args, **kwargs):
            self.ops += len(args[0]) if name in ("batch", "get_many") else 1
            self.trips += 1
            return attr(*args, **kwargs)
        return counted


def process_cpu():
    """CPU seconds (user + system) of this process so far, and its context
    switches: every rank thread's, the listener's, the store client's."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_nvcsw + r.ru_nivcsw, r.ru_nvcsw


def cpu_through(results, procs, which=0):
    """CPU seconds the worker processes spent in rendezvous, the barrier
    and the allreduce: per process, from its first rank's connect() (the
    least CPU reading) to the last of its ranks through each phase (the
    most), summed. Immune to other jobs' load, unlike the seconds.
    `which`: 1 for the context switches instead, 2 for the voluntary ones
    (a thread blocking; the others are preemptions, more under others' load)."""
    spent = dict.fromkeys(("start-up", "barrier", "allreduce"), 0.0)
    for ranks in procs:
        got = [results[r]["cpu"] for r in ranks if "cpu" in results[r]]
        if not got:
            return None
        spent = {ph: n for ph, n in spent.items()       # (--stop-after)
                 if all(ph in c for c in got)}
        before = min(c["begin"][which] for c in got)
        for ph in spent:
            end = max(c[ph][which] for c in got)
            spent[ph] += end - before
            before = end
    return spent


def rank_main(rank, size, url, secret, job, out, timeout, stop_after=None, gate=None):
    import gloocy
    from gloocy import rendezvous

    t, at = {}, {}                # seconds per phase; when each ended (monotonic)
    cpu = {}                      # the process's CPU seconds when each ended
    ran = {}                      # the algorithm each phase's last call ran
    comm = store = None
    try:
        at["thread"] = time.monotonic()
        store = CountingStore(rendezvous.connect(url, secret=secret, timeout=timeout))
        t0 = at["begin"] = time.monotonic()
        cpu["begin"] = process_cpu()
        comm = gloocy.connect(rank, size, store, secret=secret, job=job,
                              timeout=timeout)
        at["start-up"] = time.monotonic()
        cpu["start-up"] = process_cpu()
        t["start-up"] = at["start-up"] - t0
        startup_ops = (store.ops, store.trips)     # (operations, requests)
        if stop_after == "start-up":
            # The process's other ranks through start-up before any dials
            # (its CPU until then is rendezvous's alone).
            gate.wait(timeout)
            return stop_early(rank, comm, t, at, cpu, store, startup_ops, out, ran)

        def phase(name, fn):
            s = time.monotonic()
            fn()
            at[name] = time.monotonic()
            cpu[name] = process_cpu()
            t[name] = at[name] - s
            ran[name] = comm._ctx.last_algorithm

        phase("barrier", comm.Barrier)
        if stop_after == "barrier":
            return stop_early(rank, comm, t, at, cpu, store, startup_ops, out, ran)
        x = np.full(16, rank, dtype=np.int64)
        # the algorithm gloocy picks for 128 B (recursive doubling), then ring
        phase("allreduce", lambda: comm.Allreduce(gloocy.IN_PLACE, x))
        assert (x == size * (size - 1) // 2).all()
        if stop_after == "allreduce":
            return stop_early(rank, comm, t, at, cpu, store, startup_ops, out, ran)
        x[:] = rank
        phase("allreduce ring", lambda: comm.Allreduce(gloocy.IN_PLACE, x,
                                                       algorithm="ring"))
        assert (x == size * (size - 1) // 2).all()
        y = np.arange(64, dtype=np.int64) if rank == 0 else np.zeros(64, np.int64)
        phase("bcast", lambda: comm.Bcast(y, root=0))
        assert (y == np.arange(64)).all()
        conns = len(comm._ctx.links.connected)   # after barrier+allreduce+bcast
        kinds = pair_kinds(comm)
        c = comm._ctx.links.connector
        dials = dict(dialed=c.dialed, accepted=c.accepted,
                     refused=getattr(c, "refused", 0))   # (older gloocy: none)

        def split():
            sub = comm.Split(rank % 64, rank)
            z = np.ones(1)
            sub.Allreduce(gloocy.IN_PLACE, z)
            assert z[0] == sub.Get_size()
            sub.Free()
        phase("split 64", split)
        conns_all = len(comm._ctx.links.connected)
        s = time.monotonic()
        comm.Free()
        comm = None
        t["free"] = time.monotonic() - s
        out[rank] = dict(t=t, at=at, cpu=cpu, conns=conns, conns_all=conns_all, dials=dials,
                         kinds=kinds, startup_ops=startup_ops, ops=store.ops, ran=ran)
    except BaseException as e:      # noqa: B036 -- reported
        out[rank] = dict(error=f"{type(e).__name__}: {e}", at=at)
        if gate is not None:
            gate.abort()          # (the others at the gate: none will come)
        if comm is not None:
            comm.Free()
    finally:
        if store is not None:
            store.close()


def pair_kinds(comm):
    """{pair class name: how many} of the rank's connections."""
    links = comm._ctx.links
    return dict(collections.Counter(type(links.pairs[p]).__name__
                                    for p in links.connected))


def stop_early(rank, comm, t, at, cpu, store, startup_ops, out, ran):
    """--stop-after: the phases so far, the connections made, and Free
    once every rank is through (the first ranks' Free, their store
    operations and goodbyes, would slow the others' last phase)."""
    conns, kinds = len(comm._ctx.links.connected), pair_kinds(comm)
    c = comm._ctx.links.connector
    dials = dict(dialed=c.dialed, accepted=c.accepted, refused=getattr(c, "refused", 0))
    comm.Barrier()                      # (untimed)
    s = time.monotonic()
    comm.Free()
    t["free"] = time.monotonic() - s
    out[rank] = dict(t=t, at=at, cpu=cpu, conns=conns, conns_all=conns, dials=dials,
                     kinds=kinds, startup_ops=startup_ops, ops=store.ops, ran=ran)


def worker(args):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    threading.stack_size(512 << 10)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    if args.host_per_process:     # (the transport: gloocy's choice)
        os.environ["GLOOCY_HOST_ID"] = f"{args.job}-host-{args.first}"
    elif args.transport != "auto":
        os.environ["GLOOCY_TRANSPORT"] = args.transport
    ranks = range(args.first, args.first + args.count)
    out = {}
    gate = threading.Barrier(args.count)
    threads = [threading.Thread(target=rank_main, daemon=True,
                                args=(r, args.n, args.store, bytes.fromhex(args.secret),
                                      args.job, out, args.timeout, args.stop_after, gate))
               for r in ranks]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    json.dump(dict(out=out, rss=rss), sys.stdout)


def through(ranks):
    """The seconds from the first rank's connect() call until the last
    rank was through rendezvous, the barrier and the allreduce (as far as
    every rank got: a later phase may have failed)."""
    ranks = list(ranks)
    # (CLOCK_MONOTONIC is one clock for every process of the host)
    if len(ranks) == 0 or not all("begin" in v["at"] for v in ranks):
        return "Not every rank began connect()"
    first = min(v["at"]["begin"] for v in ranks)
    parts = []
    for ph, name in (("start-up", "rendezvous"), ("barrier", "+ barrier"),
                     ("allreduce", "+ allreduce")):
        if not all(ph in v["at"] for v in ranks):
            parts.append(f"{name}: not every rank got through")
            break
        parts.append(f"{name} {max(v['at'][ph] for v in ranks) - first:.2f}")
    began = sorted(v["at"]["begin"] - first for v in ranks)
    return ("Seconds from the first rank's connect() call until the last rank "
            "was through: " + ", ".join(parts)
            + f" (the ranks' threads called connect() over {began[-1]:.2f} s, "
            f"half of them by {began[len(began) // 2]:.2f})")


def kernel_limits():
    """The host's limits on pending connections and loopback packets (read
    only: gloocy needs no sysctl changed)."""
    got = {}
    for name in ("net/core/somaxconn", "net/ipv4/tcp_max_syn_backlog",
                 "net/core/netdev_max_backlog"):
        try:
            with open(f"/proc/sys/{name}") as f:
                got[name.rsplit("/", 1)[1]] = int(f.read())
        except (OSError, ValueError):
            pass
    return got


def drop_counters():
    """Packets the host dropped so far: the backlog of received packets
    (softnet, loopback included), listen queue overflows and drops."""
    got = {"softnet dropped": 0}
    try:
        with open("/proc/net/softnet_stat") as f:
            for line in f:
                got["softnet dropped"] += int(line.split()[1], 16)
        with open("/proc/net/netstat") as f:
            lines = f.read().splitlines()
        for head, vals in zip(lines[::2], lines[1::2]):
            if head.startswith("TcpExt:"):
                row = dict(zip(head.split()[1:], map(int, vals.split()[1:])))
                for key in ("ListenOverflows", "ListenDrops", "TCPTimeouts",
                            "TCPAbortOnTimeout"):
                    got[key] = row.get(key, 0)
    except (OSError, ValueError, IndexError):
        pass
    return got


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=1024)
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--switch-interval", type=float, default=0.0,
                   help="the workers' sys.setswitchinterval (seconds; 0: "
                        "Python's default, 0.005): how soon a thread waiting "
                        "for the GIL takes it from a running one (diagnostic)")
    p.add_argument("--stop-after", choices=PHASES[:3], default=None,
                   help="end every rank (Free) after this phase: a short run "
                        "measuring rendezvous, or it and the barrier, alone "
                        "(start-up: a process's ranks wait for each other "
                        "before any dial, so its CPU is rendezvous's alone)")
    p.add_argument("--times", default="",
                   help="write every rank's phase end times (monotonic s) "
                        "to this JSON file (diagnostic)")
    p.add_argument("--host-per-process", action="store_true",
                   help="each worker process a host of its own (GLOOCY_HOST_ID): "
                        "shared memory within, TCP between (default: all TCP)")
    p.add_argument("--transport", choices=("tcp", "auto"), default="tcp",
                   help="GLOOCY_TRANSPORT of the ranks (one host): tcp, or "
                        "auto, gloocy's default (the node segment); "
                        "--host-per-process leaves it to gloocy")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--store", default="", help=argparse.SUPPRESS)
    p.add_argument("--secret", default="", help=argparse.SUPPRESS)
    p.add_argument("--job", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)

    from gloocy.rendezvous import TCPStoreServer
    secret = secrets.token_bytes(32)
    server = TCPStoreServer(secret=secret).start()
    job = "scale-" + secrets.token_hex(4)
    per = math.ceil(args.n / args.procs)
    drops0 = drop_counters()
    load0 = os.getloadavg()
    t0 = time.monotonic()
    procs, ranges = [], []
    for first in range(0, args.n, per):
        ranges.append(range(first, min(first + per, args.n)))
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--worker", "-n", str(args.n),
             "--first", str(first), "--count", str(min(per, args.n - first)),
             "--store", server.url, "--secret", secret.hex(), "--job", job,
             "--timeout", str(args.timeout),
             "--switch-interval", str(args.switch_interval),
             "--transport", args.transport]
            + (["--stop-after", args.stop_after] if args.stop_after else [])
            + (["--host-per-process"] if args.host_per_process else []),
            stdout=subprocess.PIPE))
    results, rss = {}, 0
    for proc in procs:
        data = json.loads(proc.communicate()[0] or b'{"out": {}, "rss": 0}')
        results.update({int(k): v for k, v in data["out"].items()})
        rss += data["rss"]
    wall = time.monotonic() - t0
    server.close()
    if args.times:
        with open(args.times, "w") as f:
            json.dump({r: v.get("at", {}) for r, v in results.items()}, f)
    drops = {k: v - drops0.get(k, 0) for k, v in drop_counters().items()}
    print(f"- host: load average {load0[0]:.1f} before, {os.getloadavg()[0]:.1f} "
          f"after; kernel limits {kernel_limits()}; dropped during the run "
          f"{drops}\n")
    errors = {r: v["error"] for r, v in results.items() if "error" in v}
    if errors or len(results) != args.n:
        first = sorted(errors.items())[:5]
        print(f"FAILED: {len(errors)} ranks failed, {args.n - len(results)} "
              f"did not report; first: {first}")
        # the kinds of error, rank numbers left out: the root cause is
        # usually the rarest
        kinds = collections.Counter(re.sub(r"\d+", "#", e)[:200]
                                    for e in errors.values())
        for kind, count in sorted(kinds.items(), key=lambda kv: kv[1])[:8]:
            print(f"{count:6d} x {kind}")
        if len(results) == args.n:
            print(through(results.values()))
        return 1
    ok = list(results.values())
    bound = 2 * math.ceil(math.log2(args.n)) + 2
    ran = [ph for ph in PHASES if all(ph in v["t"] for v in ok)]
    slowest = {ph: max(v["t"][ph] for v in ok) for ph in ran}
    conns = [v["conns"] for v in ok]
    ops = [v["ops"] for v in ok]
    sops = [v["startup_ops"][0] for v in ok]
    strips = [v["startup_ops"][1] for v in ok]
    layout = ("a host per process: shared memory within, TCP between"
              if args.host_per_process else "TCP" if args.transport == "tcp"
              else "one host, gloocy's default transport: the node segment")
    print(f"## {args.n} ranks as threads in {len(procs)} processes "
          f"({layout}; loaded 2-core machine)\n")
    print("| phase | seconds (slowest rank) |\n|---|---|")
    for ph in ran:
        print(f"| {ph} | {slowest[ph]:.2f} |")
    print(f"| whole run, processes included | {wall:.2f} |\n")
    print(through(ok) + "\n")
    spent = cpu_through(results, ranges)
    if spent is not None:
        made = sum(conns) / 2
        if made < len(ok) / 2:        # (per connection: meaningless then)
            made = 0
        used = spent.get("barrier", 0) + spent.get("allreduce", 0)
        sw = cpu_through(results, ranges, 1)
        vol = cpu_through(results, ranges, 2)
        print("- CPU seconds of the worker processes (all their threads): "
              + ", ".join(f"{PHASE_NAMES[ph]} {n:.2f}" for ph, n in spent.items())
              + (f"; per connection made {1e6 * used / made:.0f} µs" if made else ""))
        print("- context switches of the worker processes: "
              + ", ".join(f"{PHASE_NAMES[ph]} {n:.0f}" for ph, n in sw.items())
              + (f"; per connection made {(sw.get('barrier', 0) + sw.get('allreduce', 0)) / made:.1f}"
                 f" ({(vol.get('barrier', 0) + vol.get('allreduce', 0)) / made:.1f} "
                 "voluntary: a thread blocked)" if made else ""))
        if made and "barrier" in spent:   # (the allreduce makes none, at a power of two)
            print(f"- the barrier alone, per connection made: "
                  f"{1e6 * spent['barrier'] / made:.0f} µs, "
                  f"{sw['barrier'] / made:.1f} switches")
    print(f"- connections per rank after barrier + allreduce + bcast: max "
          f"{max(conns)}, mean {sum(conns) / len(conns):.1f} (bound 2⌈log2 N⌉+2 "
          f"= {bound}); after the Split too: max "
          f"{max(v['conns_all'] for v in ok)}")
    algos = collections.Counter(f"{ph} {name}" for v in ok
                                for ph, name in v.get("ran", {}).items())
    print("- algorithms run, ranks each: "
          + ", ".join(f"{k} {n}" for k, n in sorted(algos.items())))
    kinds = collections.Counter()
    for v in ok:
        kinds.update(v.get("kinds", {}))
    print("- pairs by kind, in all (each counted at both ends): "
          + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    d = {k: sum(v["dials"][k] for v in ok) for k in ("dialed", "accepted", "refused")}
    print(f"- dials (barrier + allreduce + bcast), in all: {d['dialed']} made, "
          f"{d['refused']} refused (the peer dialed us at the same time: its "
          f"dial won), {d['accepted']} accepted")
    print(f"- store operations: {sum(ops)} in total; per rank at start-up max "
          f"{max(sops)} (in {max(strips)} requests: a batch is one), in all max "
          f"{max(ops)}, mean {sum(ops) / len(ops):.1f}")
    print(f"- memory: {rss / args.n / 1024:.0f} KiB resident per rank "
          f"({rss / 2**20:.0f} MiB over {len(procs)} processes)")
    return 0 if max(conns) <= bound else 2


if __name__ == "__main__":
    sys.exit(main())
