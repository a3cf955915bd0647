"""The embedded TCP store under many clients, side by side with torch's TCPStore.

    python bench/store.py [--impl gloocy torch] [--clients 64,512,4096]
                          [--procs 4] [--threads 16] [--ops 20000] [--out FILE]

For each implementation and client count N, a server runs in a process of
its own and ``--procs`` driver processes open N client connections between
them (one connection per simulated rank, as in a job). Each driver's
``--threads`` threads take turns over their connections; per connection
and round the mix is a rendezvous in small:

    set(own key) · get(the same key of a rank in the next process: often
    set later, so the get blocks in the server) · add(counter) · check(own key)

Then every thread of every driver blocks in get("gate") and one extra
client sets it: the wake-up latency of a key with P×T waiters.

Reported per point: connect time for N clients (the slowest driver's), ops/s of the mix, the
latency of one op (median and 99th percentile over all threads), the
server's CPU time per op (from /proc's schedstat, in ns: less sensitive
to a loaded machine than wall-clock), and its user and system parts (from
/proc's stat, in 10 ms ticks: coarse for short runs; the system part is
mostly loopback TCP sends), the gate's wake-up latency, and the server's threads,
open fds and resident memory with N clients connected. Every get's value
and the counter's final sum are checked. Implementations run interleaved
per client count; the ratio column is gloocy / torch (ops/s: > 1 is
gloocy faster). Not a test: asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta

SECRET = b"bench-store-secret-0123456789abcd"
HOST = "127.0.0.1"
TIMEOUT = 120.0


# -- the two implementations, behind one face ---------------------------------

def serve(impl: str) -> None:
    """Run a server, print its port, keep it until stdin closes."""
    if impl == "gloocy":
        from gloocy.rendezvous import TCPStoreServer
        server = TCPStoreServer(HOST, 0, secret=SECRET).start()
        port = server.port
    else:
        from torch.distributed import TCPStore
        server = TCPStore(HOST, 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=TIMEOUT), use_libuv=True)
        port = server.port
    print(port, flush=True)
    sys.stdin.read()


def client(impl: str, port: int):
    if impl == "gloocy":
        from gloocy.rendezvous import TCPStore
        return TCPStore(HOST, port, secret=SECRET, timeout=TIMEOUT)
    from torch.distributed import TCPStore
    return TCPStore(HOST, port, is_master=False, wait_for_workers=False,
                    timeout=timedelta(seconds=TIMEOUT))


# -- a driver process -----------------------------------------------------------

def drive(impl: str, port: int, proc: int, nprocs: int, nclients: int,
          nthreads: int, rounds: int) -> None:
    """Open ``nclients`` clients, then run the mix and the gate on the
    coordinator's word (a line on stdin); report on stdout as JSON."""
    client(impl, port).close() if impl == "gloocy" else client(impl, port)  # imports
    t0 = time.perf_counter()
    clients = [client(impl, port) for _ in range(nclients)]
    say({"connected": time.perf_counter() - t0})
    sys.stdin.readline()  # go

    nxt = (proc + 1) % nprocs
    lat: list[list[float]] = [[] for _ in range(nthreads)]
    errors: list[str] = []

    def mix(t: int) -> None:
        mine = range(t, nclients, nthreads)
        try:
            for r in range(rounds):
                for i in mine:
                    c = clients[i]
                    ops = (lambda: c.set(f"k/{proc}/{i}/{r}", f"{proc}/{i}/{r}".encode()),
                           lambda: c.get(f"k/{nxt}/{i}/{r}"),
                           lambda: c.add("counter", 1),
                           lambda: c.check([f"k/{proc}/{i}/{r}"]))
                    for j, op in enumerate(ops):
                        s = time.perf_counter()
                        v = op()
                        lat[t].append(time.perf_counter() - s)
                        if j == 1 and v != f"{nxt}/{i}/{r}".encode():
                            errors.append(f"get returned {v!r}")
        except Exception as e:  # reported, not hidden
            errors.append(repr(e))

    s = time.perf_counter()
    run_threads(mix, nthreads)
    elapsed = time.perf_counter() - s
    all_lat = [x for per in lat for x in per]
    say({"mix_s": elapsed, "ops": len(all_lat), "lat": sample(all_lat), "errors": errors[:3]})

    sys.stdin.readline()  # gate
    woke: list[float] = []

    def gate(t: int) -> None:
        v = clients[t % nclients].get("gate")
        woke.append(time.monotonic() - float(v))

    threads = [threading.Thread(target=gate, args=(t,)) for t in range(nthreads)]
    for th in threads:
        th.start()
    say({"parked": True})
    for th in threads:
        th.join()
    say({"gate": max(woke)})
    sys.stdin.readline()  # done
    for c in clients:
        if hasattr(c, "close"):
            c.close()


def run_threads(fn, n: int) -> None:
    threads = [threading.Thread(target=fn, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def sample(xs: list[float], k: int = 2000) -> list[float]:
    xs = sorted(xs)
    step = max(1, len(xs) // k)
    return xs[::step]


def say(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


# -- the coordinator -----------------------------------------------------------

def proc_stats(pid: int) -> dict:
    status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return {"threads": int(status["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
            "user_s": int(stat[11]) / tick, "sys_s": int(stat[12]) / tick,
            # all of its threads' time on a CPU, in ns (stat counts 10 ms ticks)
            "cpu_s": sum(int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
                         for t in os.listdir(f"/proc/{pid}/task")) / 1e9}


def point(impl: str, nclients: int, nprocs: int, nthreads: int, ops: int) -> dict:
    me = os.path.abspath(__file__)
    # The children import the gloocy of this checkout, not an installed one.
    root = os.path.dirname(os.path.dirname(me))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
    server = subprocess.Popen([sys.executable, me, "--serve", impl], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    drivers = []
    try:
        port = int(server.stdout.readline())
        nprocs = min(nprocs, nclients)
        per = [nclients // nprocs + (p < nclients % nprocs) for p in range(nprocs)]
        threads = [min(nthreads, n) for n in per]
        rounds = max(1, ops // (4 * nclients))
        drivers = [subprocess.Popen(
            [sys.executable, me, "--drive", impl, str(port), str(p), str(nprocs),
             str(per[p]), str(threads[p]), str(rounds)], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for p in range(nprocs)]

        def hear(d):
            line = d.stdout.readline()
            if not line:
                raise RuntimeError(f"{impl} driver died (exit {d.wait()})")
            return json.loads(line)

        def tell(d):
            d.stdin.write("\n")
            d.stdin.flush()

        connect_s = max(hear(d)["connected"] for d in drivers)
        idle = proc_stats(server.pid)
        for d in drivers:
            tell(d)
        mixes = [hear(d) for d in drivers]
        busy = proc_stats(server.pid)
        for d in drivers:
            tell(d)
        [hear(d) for d in drivers]  # parked (server-side: within a moment)
        time.sleep(0.3)
        setter = client(impl, port)
        setter.set("gate", repr(time.monotonic()).encode())
        gate = max(hear(d)["gate"] for d in drivers)
        total = setter.add("counter", 0)
        for d in drivers:
            tell(d)
        for d in drivers:
            d.wait(timeout=60)
        if hasattr(setter, "close"):
            setter.close()
    finally:
        for d in drivers:
            if d.poll() is None:
                d.kill()
                d.wait()
        server.stdin.close()
        server.wait(timeout=30)

    nops = sum(m["ops"] for m in mixes)
    lat = sorted(x for m in mixes for x in m["lat"])
    errors = [e for m in mixes for e in m["errors"]]
    expected = nclients * rounds
    if total != expected:
        errors.append(f"counter is {total}, expected {expected}")
    return {"impl": impl, "clients": nclients, "procs": nprocs, "threads": sum(threads),
            "rounds": rounds, "connect_s": connect_s,
            "ops": nops, "ops_per_s": nops / max(m["mix_s"] for m in mixes),
            "lat_p50_us": 1e6 * lat[len(lat) // 2],
            "lat_p99_us": 1e6 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            "server_cpu_us_per_op": 1e6 * (busy["cpu_s"] - idle["cpu_s"]) / nops,
            "server_user_us_per_op": 1e6 * (busy["user_s"] - idle["user_s"]) / nops,
            "server_sys_us_per_op": 1e6 * (busy["sys_s"] - idle["sys_s"]) / nops,
            "gate_ms": 1e3 * gate, "server_threads": idle["threads"],
            "server_fds": idle["fds"], "server_rss_mib": idle["rss_mib"],
            "errors": errors}


def ratio(a: dict, b: dict, key: str) -> str:
    return f"{a[key] / b[key]:.2f}×" if b[key] else "–"


def table(results: list[dict], impls: list[str]) -> str:
    cols = [("connect_s", "connect s", "{:.2f}"), ("ops_per_s", "ops/s", "{:.0f}"),
            ("lat_p50_us", "p50 µs", "{:.0f}"), ("lat_p99_us", "p99 µs", "{:.0f}"),
            ("server_cpu_us_per_op", "srv CPU µs/op", "{:.1f}"),
            ("server_user_us_per_op", "srv user µs/op", "{:.1f}"),
            ("server_sys_us_per_op", "srv sys µs/op", "{:.1f}"),
            ("gate_ms", "gate ms", "{:.1f}"), ("server_threads", "srv thr", "{}"),
            ("server_fds", "srv fds", "{}"), ("server_rss_mib", "srv MiB", "{:.0f}")]
    head = "| clients | impl | " + " | ".join(c[1] for c in cols) + " | ok |"
    lines = [head, "|" + "---|" * (len(cols) + 3)]
    by = {(r["impl"], r["clients"]): r for r in results}
    for n in sorted({r["clients"] for r in results}):
        for impl in impls:
            r = by.get((impl, n))
            if r:
                lines.append(f"| {n} | {impl} | " + " | ".join(
                    f.format(r[k]) for k, _, f in cols) + f" | {'yes' if not r['errors'] else r['errors'][0]} |")
        if "gloocy" in impls and "torch" in impls and ("gloocy", n) in by and ("torch", n) in by:
            g, t = by["gloocy", n], by["torch", n]
            lines.append(f"| {n} | gloocy/torch | {g['connect_s'] / t['connect_s']:.2f}× | "
                         f"{g['ops_per_s'] / t['ops_per_s']:.2f}× | "
                         f"{g['lat_p50_us'] / t['lat_p50_us']:.2f}× | "
                         f"{g['lat_p99_us'] / t['lat_p99_us']:.2f}× | "
                         f"{ratio(g, t, 'server_cpu_us_per_op')} | "
                         f"{ratio(g, t, 'server_user_us_per_op')} | "
                         f"{ratio(g, t, 'server_sys_us_per_op')} | "
                         f"{g['gate_ms'] / t['gate_ms']:.2f}× | | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", nargs="+", default=["gloocy", "torch"], choices=["gloocy", "torch"])
    ap.add_argument("--clients", default="64,512,4096",
                    help="comma-separated client counts (default 64,512,4096)")
    ap.add_argument("--procs", type=int, default=4, help="driver processes (default 4)")
    ap.add_argument("--threads", type=int, default=16, help="threads per driver (default 16)")
    ap.add_argument("--ops", type=int, default=20000, help="ops per point, about (default 20000)")
    ap.add_argument("--torch-max", type=int, default=512,
                    help="most clients to give torch (default 512): its connections "
                         "stall 5 s every ~26 here, so 4096 take over 10 minutes")
    ap.add_argument("--out", help="write the results as JSON lines here")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--drive", nargs=7, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.serve:
        serve(a.serve)
        return 0
    if a.drive:
        impl, *nums = a.drive
        drive(impl, *map(int, nums))
        return 0
    results = []
    for n in (int(x) for x in a.clients.split(",")):
        for impl in a.impl:
            if impl == "torch" and n > a.torch_max:
                print(f"torch skipped at {n} clients (over --torch-max {a.torch_max})",
                      file=sys.stderr)
                continue
            r = point(impl, n, a.procs, a.threads, a.ops)
            results.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    print(table(results, a.impl))
    if a.out:
        with open(a.out, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
