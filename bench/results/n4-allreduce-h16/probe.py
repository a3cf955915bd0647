"""Where a node allreduce's (or reduce_scatter's) time goes, inside one
job: per call, the slowest rank's wall time, the CPU time of all ranks
summed, their context switches (voluntary: a rank slept; involuntary: it
yielded or was preempted), and how the ranks sat on the CPUs at the call's
end (the most ranks on one CPU). Settings are environments for Dups of the
world, whose node segments take the environment as it is at their first
collective; calls alternate between them (A B B A ...), a barrier before
each.

    python -m gloocy.run -n 4 python probe.py 4,16 20 NAME=VAR:VALUE,VAR:VALUE ...
    PROBE_MPI=1 mpiexec -n 4 python probe.py 4,16 20 mpi=

(sizes in MiB, iterations; PROBE_COLL=reduce_scatter for that collective;
PROBE_MPI=1 runs it on mpi4py's COMM_WORLD instead.)"""
import os, sys, time, resource
import numpy as np, ctypes
CPU = ctypes.CDLL(None).sched_getcpu

SETTINGS = {}
for arg in sys.argv[3:]:
    name, _, envs = arg.partition("=")
    SETTINGS[name] = dict(kv.split(":") for kv in envs.split(",") if kv)

def main():
    if os.environ.get("PROBE_MPI"):
        from mpi4py import MPI
        world = MPI.COMM_WORLD
    else:
        import gloocy
        from gloocy import MPI
        world = gloocy.init()
    sizes = [int(s) << 20 for s in sys.argv[1].split(",")]
    iters = int(sys.argv[2])
    comms = {}
    base = dict(os.environ)
    for name, env in SETTINGS.items():
        os.environ.clear(); os.environ.update(base); os.environ.update(env)
        comms[name] = world.Dup(); comms[name].Barrier()
    os.environ.clear(); os.environ.update(base)
    names = list(comms)
    coll = os.environ.get("PROBE_COLL", "allreduce")
    for size in sizes:
        cnt = size // 4
        n = world.size
        if coll == "allreduce":
            bufs = {k: np.ones(cnt, np.float32) for k in names}
            f = lambda k: comms[k].Allreduce(MPI.IN_PLACE, bufs[k])
        else:
            sb = np.ones(cnt, np.float32); d = np.empty(cnt // n, np.float32)
            f = lambda k: comms[k].Reduce_scatter_block(sb, d)
        rec = {k: [] for k in names}
        for k in names:
            for _ in range(2): f(k)
        for i in range(iters):
            for k in (names if i % 2 == 0 else names[::-1]):
                world.Barrier()
                r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter()
                c0 = CPU()
                f(k)
                t1 = time.perf_counter(); r1 = resource.getrusage(resource.RUSAGE_SELF)
                rec[k].append((t1 - t0, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
                               r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw, c0, CPU()))
        allrec = world.gather(rec, root=0)
        if world.rank == 0:
            for k in names:
                a = np.array([r[k] for r in allrec])  # ranks x iters x 4
                wall = a[:, :, 0].max(0) * 1e6
                cpu = a[:, :, 1].sum(0) * 1e6     # summed over ranks
                vcs = a[:, :, 2].sum(0); ivcs = a[:, :, 3].sum(0)
                ends = a[:, :, 5]   # ranks x iters: CPU at the end of the call
                split = np.array([max(np.sum(ends[:, i] == 0), np.sum(ends[:, i] != 0)) for i in range(ends.shape[1])])
                by = " ".join(f"{m}:{len(wall[split == m])}x{np.median(wall[split == m]):.0f}" for m in (2, 3, 4) if np.any(split == m))
                print(f"{coll} {size>>20} MiB {k:>8}: placement(most on one CPU:calls x median us) {by}", flush=True)
                print(f"{coll} {size>>20} MiB {k:>8}: wall p10/med {np.percentile(wall,10):7.0f} {np.median(wall):7.0f} us"
                      f"  cpu(all ranks) med {np.median(cpu):7.0f} us  vol-cs med {np.median(vcs):5.0f}  invol-cs med {np.median(ivcs):4.0f}", flush=True)
    world.Barrier()

main()
