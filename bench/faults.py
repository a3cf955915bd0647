"""What every rank sees when something goes wrong, and how long it takes.

    python bench/faults.py [-n 4] [--transport shm tcp mix] [--repeat 3]

Starts N ranks by hand (`gloocy.init(rank=, size=, store=)`, rank 0 serving
the store: no launcher stops the survivors), makes one fault happen at a
known moment, and prints a markdown table: per fault and transport, what
each rank raised and how long after the fault (the median over --repeat
runs, [min-max]). README's fault table is made with it. The link cut, the
launcher's death and hostile bytes need namespaces or foreign processes:
tests/system/test_link_cut.py, tests/system/test_run.py and
tests/unit/test_fuzz_wire.py measure and check those.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap

# Each fault: the rank program's body. `T0()` prints the fault's moment;
# `seen(e)` prints what this rank raised and when.
PRELUDE = """
import json, os, signal, sys, threading, time
import numpy as np
import gloocy
rank, size = int(sys.argv[1]), int(sys.argv[2])
if sys.argv[4] == "mix":
    os.environ["GLOOCY_HOST_ID"] = f"host-{rank % 2}"
comm = gloocy.init(rank=rank, size=size, store=sys.argv[3], secret=b"x" * 32)
def T0():
    print(json.dumps({"t0": time.time()}), flush=True)
def seen(e):
    print(json.dumps({"rank": rank, "error": type(e).__name__,
                      "origin": getattr(e, "origin", None),
                      "message": str(e), "t": time.time()}), flush=True)
x = np.ones(1 << 14)
comm.Barrier()
try:
"""

FAULTS = {
    "a rank killed (SIGKILL) during an allreduce": """
    if rank == size - 1:
        time.sleep(0.3); T0(); os.kill(os.getpid(), signal.SIGKILL)
    comm.Allreduce(gloocy.IN_PLACE, x, timeout=60)
""",
    "a rank frozen (SIGSTOP), 2 s deadline": """
    if rank == size - 1:
        T0(); os.kill(os.getpid(), signal.SIGSTOP)
    comm.Allreduce(gloocy.IN_PLACE, x, timeout=2)
""",
    "a rank leaves cleanly before the call (exit 0)": """
    if rank == size - 1:
        time.sleep(0.3); T0(); sys.exit(0)
    comm.Allreduce(gloocy.IN_PLACE, x, timeout=60)
""",
    "rank 0 calls bcast, the others allreduce": """
    T0() if rank == 0 else None
    if rank == 0:
        comm.Bcast(x, root=0, timeout=60)
    else:
        comm.Allreduce(gloocy.IN_PLACE, x, timeout=60)
""",
    "ranks disagree on the count": """
    T0() if rank == 0 else None
    comm.Allreduce(gloocy.IN_PLACE, x[:100 + rank], timeout=60)
""",
    "Ctrl-C at rank 0 while it waits": """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if rank == 0:
        threading.Timer(0.3, lambda: (T0(), os.kill(os.getpid(), signal.SIGINT))).start()
    if rank == size - 1:
        time.sleep(1.0)
    comm.Allreduce(gloocy.IN_PLACE, x, timeout=60)
    comm.Barrier(timeout=60)
""",
}
EPILOGUE = """
except (gloocy.errors.GloocyError, KeyboardInterrupt) as e:
    seen(e)
else:
    print(json.dumps({"rank": rank, "error": None, "t": time.time()}), flush=True)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(body, n, transport, timeout=60):
    """{rank: (error name, seconds after the fault, message)} of one run."""
    env = dict(os.environ, GLOOCY_TRANSPORT="auto" if transport == "mix" else transport)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(PRELUDE + textwrap.indent(textwrap.dedent(body), "    ") + EPILOGUE)
    store = f"tcp://127.0.0.1:{free_port()}"
    procs = [subprocess.Popen([sys.executable, f.name, str(r), str(n), store, transport],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env=env, text=True) for r in range(n)]
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs[:-1]]
        try:
            outs.append(procs[-1].communicate(timeout=3)[0])
        except subprocess.TimeoutExpired:      # the frozen rank
            procs[-1].kill()
            outs.append(procs[-1].communicate()[0])
    finally:
        for p in procs:
            p.kill()
        os.unlink(f.name)
    lines = [json.loads(line) for out in outs for line in out.splitlines()
             if line.startswith("{")]
    t0 = min(line["t0"] for line in lines if "t0" in line)
    return {line["rank"]: (line["error"] or "no error", line["t"] - t0, line.get("message", ""))
            for line in lines if "rank" in line}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("--transport", nargs="+", default=["shm", "tcp", "mix"])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"| fault | transport | what each rank raised (N = {args.n}) | seconds after the fault, median [min-max] |")
    print("|---|---|---|---|")
    for fault, body in FAULTS.items():
        for transport in args.transport:
            runs = [run_once(body, args.n, transport) for _ in range(args.repeat)]
            per_rank = {}
            for run in runs:
                for rank, (name, t, _) in run.items():
                    per_rank.setdefault(rank, []).append((name, t))
            seen = "; ".join(
                f"{rank}: {'/'.join(sorted({name for name, _ in got}))}"
                for rank, got in sorted(per_rank.items()))
            times = [t for got in per_rank.values() for name, t in got if name != "no error"]
            when = (f"{statistics.median(times):.2f} [{min(times):.2f}-{max(times):.2f}]"
                    if times else "-")
            print(f"| {fault} | {transport} | {seen} | {when} |", flush=True)
    example = run_once(FAULTS["a rank frozen (SIGSTOP), 2 s deadline"], args.n, "tcp")
    print("\nMessages of one frozen-rank run over tcp:")
    for rank, (name, _, message) in sorted(example.items()):
        print(f"- rank {rank}: {name}: {message}")


if __name__ == "__main__":
    main()
