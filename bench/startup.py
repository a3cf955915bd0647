"""Start-up side by side with MPICH: N local processes each import the
library, run two barriers and exit (gloocy-run + `from gloocy import MPI`
against mpiexec + mpi4py), interleaved, medians.

    PYTHONPATH=. python bench/startup.py [-n 8 16 32 64 128] [--repeat 3]
        [--connect lazy|eager|both] [--launch fork|exec|both]

--launch: gloocy-run forks the ranks from its fork server (the default)
or starts each as a fresh interpreter (--no-fork-server).

Prints a markdown table: seconds from launch to the last exit, and the
most fds any rank held after its barriers. On 2 cores every N > 2 is
oversubscribed; the machine's load shows: compare ratios of one run.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PROGRAM = """
import os
from {lib} import MPI
comm = MPI.COMM_WORLD
comm.Barrier()
comm.Barrier()
fds = len(os.listdir("/proc/self/fd"))
fds = comm.reduce(fds, op=MPI.MAX, root=0)
if comm.Get_rank() == 0:
    print("FDS", fds, flush=True)
"""


def run(cmd, env):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, env=env, timeout=600)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed ({proc.returncode}): "
                           f"{proc.stderr.decode()[-2000:]}")
    fds = [int(line.split("FDS")[1]) for line in proc.stdout.decode().splitlines()
           if "FDS" in line]           # (gloocy-run prefixes "[rank] ")
    return took, fds[0] if fds else None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--connect", choices=("lazy", "eager", "both"), default="lazy")
    p.add_argument("--launch", choices=("fork", "exec", "both"), default="both")
    args = p.parse_args()
    # the mpich wheel's, beside this Python (a version manager's shim on
    # PATH would add its own start-up, ~0.3 s here, to MPICH's times)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        mpiexec = shutil.which("mpiexec")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [here] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])}
    connects = ("lazy", "eager") if args.connect == "both" else (args.connect,)
    launches = ("fork", "exec") if args.launch == "both" else (args.launch,)
    modes = [(c, l) for c in connects for l in launches]
    with tempfile.TemporaryDirectory() as tmp:
        scripts = {}
        for lib in ("gloocy", "mpi4py"):
            scripts[lib] = os.path.join(tmp, f"{lib}_start.py")
            with open(scripts[lib], "w") as f:
                f.write(PROGRAM.format(lib=lib))
        cols = [f"gloocy {c} {l}" for c, l in modes] + ["MPICH"]
        print("| N | " + " | ".join(f"{c} s" for c in cols)
              + " | " + " | ".join(f"{c} fds" for c in cols)
              + " | " + " | ".join(f"{c} / MPICH" for c in cols[:-1]) + " |")
        print("|---" * (1 + 3 * len(cols) - 1) + "|")
        for n in args.n:
            times = {c: [] for c in cols}
            fds = {}
            for _ in range(args.repeat):          # interleaved
                for c, l in modes:
                    t, f = run([sys.executable, "-m", "gloocy.run", "-n", str(n),
                                "--fork-server" if l == "fork" else "--no-fork-server",
                                sys.executable, scripts["gloocy"]],
                               {**env, "GLOOCY_CONNECT": c})
                    times[f"gloocy {c} {l}"].append(t)
                    fds[f"gloocy {c} {l}"] = f
                t, f = run([mpiexec, "-n", str(n), sys.executable, scripts["mpi4py"]], env)
                times["MPICH"].append(t)
                fds["MPICH"] = f
            med = {c: statistics.median(v) for c, v in times.items()}
            print(f"| {n} | " + " | ".join(f"{med[c]:.2f}" for c in cols)
                  + " | " + " | ".join(str(fds[c]) for c in cols)
                  + " | " + " | ".join(f"{med[c] / med['MPICH']:.2f}" for c in cols[:-1])
                  + " |", flush=True)


if __name__ == "__main__":
    main()
