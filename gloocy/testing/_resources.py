"""What a process holds (fds, Python threads, child processes), for the
leak checks of worlds and of gloocy's own test suite."""

from __future__ import annotations

import gc
import os
import threading
import time
from typing import NamedTuple

LEAK_WAIT = 2.0             # seconds a growth may take to go away (a thread ending)


class Resources(NamedTuple):
    """What a process holds: fds as (number, what /proc says it is),
    Python threads, child pids."""
    fds: frozenset = frozenset()
    threads: frozenset = frozenset()
    children: frozenset = frozenset()

    def __or__(self, other):
        return Resources(*(a | b for a, b in zip(self, other)))

    def __sub__(self, other):
        return Resources(*(a - b for a, b in zip(self, other)))


def _fds():
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            fds.add((int(name), os.readlink(f"/proc/self/fd/{name}")))
        except OSError:
            pass                  # the directory listdir itself had open
    return frozenset(fds)


def _children():
    pids = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids.update(int(p) for p in f.read().split())
        except OSError:
            pass                  # a thread that just ended
    return frozenset(pids)


def resources():
    """What this process holds now (see Resources)."""
    return Resources(_fds(), frozenset(threading.enumerate()), _children())


def _describe_child(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = "?"
    return f"{pid} ({cmd[:200] or 'a zombie'})"


def _growth_text(new):
    parts = []
    if new.fds:
        parts.append("fds " + ", ".join(f"{fd} -> {what}"
                                        for fd, what in sorted(new.fds)))
    if new.threads:
        parts.append("threads " + ", ".join(sorted(repr(t.name)
                                                   for t in new.threads)))
    if new.children:
        parts.append("child processes " + ", ".join(
            _describe_child(p) for p in sorted(new.children)))
    return "; ".join(parts)


def grown(before, allowed=lambda new: new, wait=LEAK_WAIT):
    """What this process holds now and did not in `before` (a Resources),
    as text ("" if nothing). `allowed(new)` returns the part of the growth
    `new` that is not legitimate. A growth gets `wait` seconds (and a
    garbage collection) to go away: a thread that is ending, an fd held
    by a cycle of garbage are not leaks."""
    deadline = time.monotonic() + wait
    while True:
        new = allowed(resources() - before)
        if not any(new) or time.monotonic() >= deadline:
            return _growth_text(new)
        gc.collect()
        time.sleep(0.05)
