# Local ranks kept on CPUs of their own (GLOOCY_SPREAD=1): node_spread,
# called before single copies (_cma.pxi), and the CPU each rank publishes
# as it arrives in the segment (node_arrive).

cdef extern from "<sched.h>" nogil:
    ctypedef struct cpu_set_t:
        pass
    int sched_getcpu()
    int sched_getaffinity(int pid, size_t size, cpu_set_t *mask)
    int sched_setaffinity(int pid, size_t size, const cpu_set_t *mask)
    void CPU_ZERO(cpu_set_t *s)
    void CPU_SET(int cpu, cpu_set_t *s)
    int CPU_ISSET(int cpu, const cpu_set_t *s)
    enum:
        CPU_SETSIZE

cdef enum:
    NODE_MOVE_EVERY_NS = 100000  # node_spread moves a rank at most this often


# Where every local rank has a CPU of its own, two of them on one CPU make
# each step a context switch, and a large copy run at half speed: the
# scheduler puts a rank woken from its futex next to its waker, and leaves
# it there while other jobs keep the other CPUs busy. At N = 2 on the
# project's 2-CPU machine (load 3-9 from other jobs), a 16 MiB alltoall
# took 2.3-2.6 ms in the jobs whose ranks shared a CPU, 1.6-1.7 in those
# that did not, and 4 MiB 404-454 against 247 us: the bimodal times from
# run to run. So after each wait at phase A, a rank that finds a
# lower-ranked one on its CPU (as each published on arriving) moves itself
# to a CPU of its affinity mask that no rank of the node is on (its mask
# narrowed to that CPU, which migrates it at once, then restored as it
# was), at most once per NODE_MOVE_EVERY_NS. Only before single copies
# (_cma.pxi), where each rank copies alone for long: in calls of many
# short steps under load, ranks moved apart each met another job's
# process on its CPU at every wait (an allreduce of 16 MiB at load 11:
# 21-29 ms moved, 3.4-7.3 not), where two on one CPU hand it to each
# other as they wait. And where other jobs keep every CPU busy, a rank
# moved before its single copy meets one of them too: at N = 2, load
# 140-150, alltoall of 4 MiB took 730-2548 us moved, 473-655 not (at load
# 3-4: 247 apart against 404-454 on one CPU). So it is asked for
# (GLOOCY_SPREAD=1), for hosts whose CPUs the job has to itself.

cdef int node_spread(Node nd) noexcept nogil:
    """1 if we moved to another CPU, else 0 (see above)."""
    cdef cpu_set_t mask, used, one
    cdef int j, k, cpu
    cdef int64_t t
    if not nd.spread:
        return 0
    cpu = sched_getcpu()
    for j in range(nd.rank):
        if nd.ctl[j].cpu == cpu:
            break
    else:
        return 0
    t = now_ns()
    if t - nd.moved_ns < NODE_MOVE_EVERY_NS or sched_getaffinity(0, sizeof(mask), &mask):
        return 0
    nd.moved_ns = t
    CPU_ZERO(&used)
    CPU_SET(cpu, &used)
    for j in range(nd.size):
        if j != nd.rank and 0 <= nd.ctl[j].cpu < CPU_SETSIZE:
            CPU_SET(nd.ctl[j].cpu, &used)
    for k in range(CPU_SETSIZE):
        if CPU_ISSET(k, &mask) and not CPU_ISSET(k, &used):
            CPU_ZERO(&one)
            CPU_SET(k, &one)
            if sched_setaffinity(0, sizeof(one), &one):
                return 0
            sched_setaffinity(0, sizeof(mask), &mask)
            nd.moves += 1
            return 1
    return 0
