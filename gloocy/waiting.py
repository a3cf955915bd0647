"""How ranks on this host should wait: what the host gives us, and the
spin and yield times that follow from it.

A waiting rank looks for its peers' progress, first spinning, then yielding
the CPU between looks, then sleeps (see _engine.pxi, _node.pxi). Spinning
pays only while every rank on the host has a CPU of its own: where ranks
outnumber CPUs, a spinning rank may hold the very CPU its peer waits for,
and yielding between looks lets that peer run at once.
"""

from __future__ import annotations

import math
import os

__all__ = ["usable_cpus", "cgroup_cpu_limit", "wait_tuning",
           "SPIN_US", "YIELD_US"]

SPIN_US = 50        # spin before sleeping, where every rank has a CPU
YIELD_US = 200      # look, yielding between looks, before sleeping, where
                    # ranks outnumber CPUs: a round of 8 ranks taking turns
                    # on 2 CPUs fits in it. Longer costs the other processes
                    # of a busy host: a looking rank stays runnable, where
                    # a sleeper leaves the CPUs to whoever has work (on the
                    # project's machine, loaded 7x over by other jobs, 4
                    # ranks' small calls took ~2x longer with 1000 than
                    # with 0; alone, yielding made them ~8x faster)


def cgroup_cpu_limit(proc_cgroup="/proc/self/cgroup", root="/sys/fs/cgroup"):
    """The CPUs our cgroup v2 quota allows (cpu.max "quota period", the
    tightest along the path up to the root), rounded up; None if none is set
    or there is no cgroup v2 here."""
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    path = next((line[3:] for line in lines if line.startswith("0::")), None)
    if path is None:
        return None
    limit = None
    parts = [p for p in path.strip("/").split("/") if p]
    for depth in range(len(parts), -1, -1):
        try:
            with open(os.path.join(root, *parts[:depth], "cpu.max")) as f:
                quota, _, period = f.read().partition(" ")
        except OSError:
            continue
        if quota.strip() == "max":
            continue
        try:
            cpus = int(quota) / int(period)
        except (ValueError, ZeroDivisionError):
            continue
        cpus = max(1, math.ceil(cpus))
        limit = cpus if limit is None else min(limit, cpus)
    return limit


def usable_cpus():
    """CPUs this process may run on: its affinity mask, capped by its
    cgroup's CPU quota."""
    cpus = len(os.sched_getaffinity(0))
    quota = _process_cpu_limit()
    return cpus if quota is None else max(1, min(cpus, quota))


_limits = {}    # pid -> cgroup_cpu_limit()


def _process_cpu_limit():
    """cgroup_cpu_limit(), read once per process: a world of thousands of
    rank threads would otherwise read the cgroup files once per rank, each
    read letting the GIL go to the others (a pid's entry: a forked child
    reads its own)."""
    pid = os.getpid()
    if pid not in _limits:
        _limits[pid] = cgroup_cpu_limit()
    return _limits[pid]


def env_us(name, env):
    """The environment variable `name` of `env` as microseconds >= 0, or
    None when unset."""
    text = env.get(name, "")
    if text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"environment variable {name}={text!r} is not an "
                         "integer") from None
    if value < 0:
        raise ValueError(f"environment variable {name}={text!r} is negative")
    return value


def wait_tuning(local_size, cpus=None, env=None):
    """{"spin_us", "yield_us"} for `local_size` ranks on this host with
    `cpus` usable CPUs (default: usable_cpus()). GLOOCY_SPIN_US and
    GLOOCY_YIELD_US force either."""
    env = os.environ if env is None else env
    cpus = usable_cpus() if cpus is None else cpus
    crowded = local_size > cpus
    spin = env_us("GLOOCY_SPIN_US", env)
    yield_us = env_us("GLOOCY_YIELD_US", env)
    return dict(
        spin_us=(0 if crowded else SPIN_US) if spin is None else spin,
        yield_us=(YIELD_US if crowded else 0) if yield_us is None else yield_us)
