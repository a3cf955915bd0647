"""How fast one cross-memory-attach call copies, against a memcpy, on this
machine: the per-byte price of a single copy between local ranks
(gloocy/_cma.pxi), by size (cache-warm up to a few MiB, cold beyond) and
with or without transparent huge pages on either side.

    python bench/cma_rate.py [--reps 15]

A child process holds the source; the parent reads it with
process_vm_readv (through ctypes: the same system call the core makes),
then copies it with NumPy (a memcpy) between its own buffers. Printed:
GB/s, best and median of --reps calls.
"""

import argparse
import ctypes
import mmap
import os
import time

import numpy as np

libc = ctypes.CDLL(None, use_errno=True)
MADV_HUGEPAGE, MADV_NOHUGEPAGE = 14, 15
SIZES = [1 << 20, 2 << 20, 4 << 20, 16 << 20, 64 << 20]


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def buffer(n, huge):
    """n bytes at a 2 MiB boundary, advised to use huge pages or not, touched."""
    m = mmap.mmap(-1, n + (2 << 20))
    a = np.frombuffer(m, np.uint8)
    off = (-a.ctypes.data) % (2 << 20)
    b = a[off:off + n]
    libc.madvise(ctypes.c_void_p(b.ctypes.data), ctypes.c_size_t(n),
                 MADV_HUGEPAGE if huge else MADV_NOHUGEPAGE)
    b[:] = 1
    return m, b


def rates(n, huge, reps):
    _, src = buffer(n, huge)
    _, dst = buffer(n, huge)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                     # the owner: holds src until told to go
        os.read(r, 1)
        os._exit(0)
    try:
        mine, theirs = Iovec(dst.ctypes.data, n), Iovec(src.ctypes.data, n)
        cma, copy = [], []
        for _ in range(reps):
            t = time.perf_counter()
            got = libc.process_vm_readv(pid, ctypes.byref(mine), 1,
                                        ctypes.byref(theirs), 1, 0)
            cma.append(time.perf_counter() - t)
            if got != n:
                raise OSError(ctypes.get_errno(), "process_vm_readv")
        for _ in range(reps):
            t = time.perf_counter()
            np.copyto(dst, src)
            copy.append(time.perf_counter() - t)
    finally:
        os.write(w, b"x")
        os.waitpid(pid, 0)
    gbs = lambda ts: (n / min(ts) / 1e9, n / float(np.median(ts)) / 1e9)
    return gbs(cma), gbs(copy)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("| bytes | huge pages | process_vm_readv GB/s best / median "
          "| memcpy GB/s best / median | memcpy / readv (best) |")
    print("|---:|---|---:|---:|---:|")
    for huge in (False, True):
        for n in SIZES:
            (cb, cm), (mb, mm) = rates(n, huge, args.reps)
            print(f"| {n >> 20} MiB | {'yes' if huge else 'no'} | {cb:.1f} / {cm:.1f} "
                  f"| {mb:.1f} / {mm:.1f} | {mb / cb:.1f} |", flush=True)


if __name__ == "__main__":
    main()
