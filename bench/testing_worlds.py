"""gloocy.testing's figures: how fast a thread world starts, how many
hypothesis examples of a user's function run in a given time, thread
against process back end.

    PYTHONPATH=. python bench/testing_worlds.py [--examples 200] [--quick]

Prints a markdown table: medians of start-up times (the kinds of world
interleaved), the examples' wall time, and the load average, which
matters (take the figures on a quiet machine, or say how loaded it was).
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "world"))

import gloocy                                               # noqa: E402
from gloocy.testing import World, Worlds                    # noqa: E402


def one_allreduce(comm):
    x = np.ones(4)
    comm.Allreduce(gloocy.IN_PLACE, x)
    return x[0]


def start_and_allreduce(size, transport):
    """Seconds from World() to the end of its first allreduce (then closed)."""
    t0 = time.perf_counter()
    w = World(size, transport=transport)
    assert w.run(one_allreduce) == [float(size)] * size
    took = time.perf_counter() - t0
    w.close()
    return took


def start_times(sizes, transports, repeat):
    """{(size, transport): [seconds]}, the kinds interleaved in each round
    so that a busy spell of the machine falls on all of them alike."""
    times = {(n, t): [] for n in sizes for t in transports}
    for _ in range(repeat):
        for key in times:
            times[key].append(start_and_allreduce(*key))
    return times


def hypothesis_run(examples, backend, max_size=8):
    """Seconds for `examples` hypothesis examples of the worked example's
    property (mean and variance over worlds of 1..max_size ranks). The
    examples are derandomized: every back end runs the same ones."""
    from hypothesis import HealthCheck, given, settings
    from test_example_mean_variance import check, mean_and_variance, spread_values

    worlds = Worlds(backend=backend)

    @settings(max_examples=examples, deadline=None, database=None,
              derandomize=True, suppress_health_check=list(HealthCheck))
    @given(spread_values(max_size))
    def prop(data):
        check(worlds.get, mean_and_variance, data)
    t0 = time.perf_counter()
    prop()
    took = time.perf_counter() - t0
    worlds.close()
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="fewer repeats and examples")
    a = ap.parse_args()
    if a.quick:
        a.examples, a.repeat = 40, 5
    rows = []
    times = start_times((2, 4, 8), ("tcp", "auto"), a.repeat)
    for (size, transport), t in times.items():
        default = " (the default)" if transport == "auto" else ""
        rows.append((f"thread world of {size}, {transport}{default}, + 1 allreduce",
                     f"{statistics.median(t) * 1e3:.1f} ms (min {min(t) * 1e3:.1f}, "
                     f"max {max(t) * 1e3:.1f})"))
    t = hypothesis_run(a.examples, "threads")
    rows.append((f"{a.examples} hypothesis examples, sizes 1-8, threads", f"{t:.1f} s"))
    n = max(a.examples // 4, 10)
    tt = hypothesis_run(n, "threads")
    tp = hypothesis_run(n, "processes")
    rows.append((f"the same {n} examples, threads vs processes",
                 f"{tt:.1f} s vs {tp:.1f} s (processes {tp / tt:.1f}x slower)"))
    with open("/proc/loadavg") as f:
        rows.append(("load average (1, 5, 15 min) at the end", " ".join(f.read().split()[:3])))
    print("| what | figure |\n|---|---|")
    for what, fig in rows:
        print(f"| {what} | {fig} |")


if __name__ == "__main__":
    main()
