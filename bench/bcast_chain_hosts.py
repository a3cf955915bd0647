"""bcast "chain" against "binomial" (and "auto") over N network-namespace
hosts of one rank each (gloocy.testing.netns), with 1 Gbit/s tbf links and
over the unlimited veth; the algorithms in turn, 3 rounds; the figure is the
median over rounds of the slowest rank's mean time per back-to-back call.

    sudo python bench/bcast_chain_hosts.py [N]     (default 4)

Timings only; asserts nothing about speed.
"""
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hosts import r_time                    # noqa: E402
from gloocy.testing import World            # noqa: E402

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
sizes = [1 << 20, 4 << 20, 16 << 20]
with World(n, backend="processes", hosts=[1] * n, timeout=600, comm_timeout=600) as world:
    for link in ("limited", "unlimited"):
        world.netns.unlimit()
        if link == "limited":
            world.netns.limit("1gbit")
        for nbytes in sizes:
            calls = max(3, (16 << 20) // nbytes) if link == "limited" else max(5, (64 << 20) // nbytes)
            got = {"binomial": [], "chain": [], "auto": []}
            for _ in range(3):
                for algo in got:
                    res = world.run(r_time, "bcast", nbytes, None if algo == "auto" else algo, calls, 0, timeout=600)
                    got[algo].append((max(t for t, _ in res), res[0][1]))
            med = {a: statistics.median(t for t, _ in v) for a, v in got.items()}
            print(f"n={n} {link:9s} {nbytes >> 20:3d} MiB " + "  ".join(
                f"{a} {med[a]*1e3:8.2f} ms" for a in got)
                + f"  binomial/chain {med['binomial']/med['chain']:.2f}  auto ran {got['auto'][0][1]}", flush=True)
