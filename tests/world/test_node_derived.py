"""The node (shared-memory segment) algorithms on derived communicators:
Dup, Split by parity, Split_type(COMM_TYPE_SHARED) and Create_group with
holes get a node segment of their own when their members share a host,
and every collective runs through it, against NumPy.

Over "shm" every derived communicator is on one host; over "mix" the ranks
alternate between two pretend hosts, so the parity split and Split_type
give one node communicator per host while the others span both (and keep
the pair algorithms). Each rank rebuilds every member's input from the
case's seed and checks its own output against NumPy; a rank returns what
went wrong (an empty list: nothing).

Also: single-copy transfers (process_vm_readv, gloocy/_cma.pxi) for large
bcast and allgather, their forced fallback (GLOOCY_CMA=0), the fallback
when the kernel refuses (a seccomp filter making process_vm_readv fail
with EPERM on one rank), and a rank killed during single-copy transfers.
"""

import ctypes
import errno
import os
import threading
import time
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gloocy
from gloocy import MPI
from conftest import long_runs
from gloocy.testing.processes import ProcessWorld as World

TRANSPORTS = ("shm", "mix")
# gather and scatter take the node segment only when forced (see
# _node_exchange.pxi); the others take it automatically.
FORCE_ROOTED = {"GLOOCY_ALGORITHM_GATHER": "shm",
                "GLOOCY_ALGORITHM_SCATTER": "shm"}
TINY_SLOTS = {"GLOOCY_SHM_CHUNK_BYTES": 4096}   # many steps per call
# single copies from 64 KiB (the default is 2 MiB): small, fast tests
CMA_SMALL = {"GLOOCY_CMA_MIN_BYTES": 65536}


def _rng(*key):
    return np.random.default_rng([zlib.crc32(repr(key).encode())])


def _input(n, seed, rank, what):
    """Rank `rank`'s int64 input of n elements (exact sums in any order)."""
    return _rng(seed, rank, what).integers(-1000, 1000, n).astype(np.int64)


def _derived(world, how):
    """(communicator, whether its members are all on our pretend host);
    COMM_NULL where we are not a member."""
    r = world.rank
    if how == "dup":
        comm = world.Dup()
    elif how == "parity":
        comm = world.Split(r % 2, -r)          # reversed order as well
    elif how == "shared":
        comm = world.Split_type(MPI.COMM_TYPE_SHARED, key=r)
    else:                                      # a group with holes
        holes = [m for m in range(world.size) if m % 3 == 1]
        comm = world.Create_group(world.Get_group().Excl(holes))
    return comm


def _same_host(comm):
    hosts = comm.allgather(gloocy.transport.shm.host_identity())
    return len(set(hosts)) == 1


def r_every_collective(world, how, n, seed):
    """Every collective on the `how` communicator; a list of what went
    wrong (empty: all right), whether it had a node segment, and whether
    its members share one host."""
    comm = _derived(world, how)
    if comm == MPI.COMM_NULL:
        return None
    bad = []
    try:
        size, r = comm.size, comm.rank
        root = seed % size
        xs = [_input(n, seed, j, "x") for j in range(size)]
        x = xs[r]
        total = np.sum(xs, axis=0)

        def check(name, got, want):
            if not np.array_equal(got, want):
                bad.append(f"{how} rank {r}/{size} {name} n={n} root={root}")

        b = x.copy() if r == root else np.zeros(n, np.int64)
        comm.Bcast(b, root=root)
        check("Bcast", b, xs[root])
        out = np.zeros(n, np.int64)
        comm.Allreduce(x, out, op=MPI.SUM)
        check("Allreduce", out, total)
        out = np.zeros(n, np.int64) if r == root else None
        comm.Reduce(x, out, op=MPI.SUM, root=root)
        if r == root:
            check("Reduce", out, total)
        out = np.zeros(n, np.int64)
        comm.Scan(x, out, op=MPI.SUM)
        check("Scan", out, np.sum(xs[:r + 1], axis=0))
        out = np.full(n, -7, np.int64)
        comm.Exscan(x, out, op=MPI.SUM)
        check("Exscan", out, np.sum(xs[:r], axis=0) if r else np.full(n, -7))
        out = np.zeros(n * size, np.int64)
        comm.Allgather(x, out)
        check("Allgather", out, np.concatenate(xs))
        # ragged blocks: rank j gives (n + j) % 5 + j elements
        counts = [(n + j) % 5 + j for j in range(size)]
        mine = _input(counts[r], seed, r, "v")
        out = np.zeros(sum(counts), np.int64)
        comm.Allgatherv(mine, [out, counts])
        check("Allgatherv", out, np.concatenate(
            [_input(counts[j], seed, j, "v") for j in range(size)]))
        out = np.zeros(n * size, np.int64) if r == root else None
        comm.Gather(x, out, root=root)
        if r == root:
            check("Gather", out, np.concatenate(xs))
        out = np.zeros(sum(counts), np.int64) if r == root else None
        comm.Gatherv(mine, [out, counts] if r == root else None, root=root)
        if r == root:
            check("Gatherv", out, np.concatenate(
                [_input(counts[j], seed, j, "v") for j in range(size)]))
        whole = _input(n * size, seed, root, "s")
        out = np.zeros(n, np.int64)
        comm.Scatter(whole if r == root else None, out, root=root)
        check("Scatter", out, whole[r * n:(r + 1) * n])
        wholev = _input(sum(counts), seed, root, "sv")
        out = np.zeros(counts[r], np.int64)
        comm.Scatterv([wholev, counts] if r == root else None, out, root=root)
        start = sum(counts[:r])
        check("Scatterv", out, wholev[start:start + counts[r]])
        sends = [_input(n * size, seed, j, "a") for j in range(size)]
        out = np.zeros(n * size, np.int64)
        comm.Alltoall(sends[r], out)
        check("Alltoall", out, np.concatenate(
            [sends[j][r * n:(r + 1) * n] for j in range(size)]))
        # alltoallv: rank s sends rank d (s + 2d + n) % 4 elements
        def cnt(s, d):
            return (s + 2 * d + n) % 4
        sv = _input(sum(cnt(r, d) for d in range(size)), seed, r, "av")
        rcounts = [cnt(s, r) for s in range(size)]
        out = np.zeros(sum(rcounts), np.int64)
        comm.Alltoallv([sv, [cnt(r, d) for d in range(size)]], [out, rcounts])
        want = []
        for s in range(size):
            svs = _input(sum(cnt(s, d) for d in range(size)), seed, s, "av")
            at = sum(cnt(s, d) for d in range(r))
            want.append(svs[at:at + cnt(s, r)])
        check("Alltoallv", out, np.concatenate(want))
        ins = [_input(n * size, seed, j, "rs") for j in range(size)]
        out = np.zeros(n, np.int64)
        comm.Reduce_scatter_block(ins[r], out, op=MPI.SUM)
        check("Reduce_scatter_block", out,
              np.sum(ins, axis=0)[r * n:(r + 1) * n])
        insv = [_input(sum(counts), seed, j, "rsv") for j in range(size)]
        out = np.zeros(counts[r], np.int64)
        comm.Reduce_scatter(insv[r], out, counts, op=MPI.SUM)
        check("Reduce_scatter", out,
              np.sum(insv, axis=0)[start:start + counts[r]])
        comm.Barrier()
        return bad, comm._ctx.node is not None, _same_host(comm)
    finally:
        comm.Free()


@settings(max_examples=20 if long_runs() else 2, deadline=None)   # --long: more
@given(n=st.integers(0, 1500), seed=st.integers(0, 2**20))
@pytest.mark.parametrize("how", ["dup", "parity", "shared", "group"])
@pytest.mark.parametrize("env", [{}, {**FORCE_ROOTED, **TINY_SLOTS}],
                         ids=["auto", "forced-tiny-slots"])
def test_every_collective_on_derived_communicators(world, how, env, n, seed):
    size = 5
    got = world(size, **env).run(r_every_collective, how, n, seed)
    members = [g for g in got if g is not None]
    assert members, "no rank was a member"
    for bad, has_node, same_host in members:
        assert bad == [], bad
        # A node segment exactly where every member shares a host.
        assert has_node == same_host


def r_node_scan(comm, n):
    """scan and exscan through the node segment of a Dup, forced, in
    place too: what each rank got, and the algorithm that ran."""
    dup = comm.Dup()
    try:
        ctx = dup._ctx
        x = np.arange(n, dtype=np.int64) * (dup.rank + 1)
        out = np.zeros(n, np.int64)
        ctx.scan(x, out, MPI.SUM.code, algorithm="shm")
        ran = ctx.last_algorithm
        y = x.copy()
        dup.Scan(MPI.IN_PLACE, y, op=MPI.MAX)
        z = np.full(n, -1, np.int64)
        dup.Exscan(x, z, op=MPI.SUM)
        return out.tolist(), y.tolist(), z.tolist(), ran
    finally:
        dup.Free()


@pytest.mark.transports("shm")
def test_node_scan_forced_and_in_place(world):
    size, n = 4, 2000              # 4 KiB slots: several steps
    got = world(size, **TINY_SLOTS).run(r_node_scan, n)
    xs = [np.arange(n, dtype=np.int64) * (j + 1) for j in range(size)]
    for r, (out, y, z, ran) in enumerate(got):
        assert ran == "shm"
        assert out == np.sum(xs[:r + 1], axis=0).tolist()
        assert y == np.max(xs[:r + 1], axis=0).tolist()
        if r:
            assert z == np.sum(xs[:r], axis=0).tolist()
        else:
            assert z == [-1] * n


# -- single-copy transfers (cross-memory attach) ---------------------------------

def r_large(comm, nbytes, how):
    """Large bcasts (every root), an allgather, an alltoall, a gather and
    a scatter on the world or a derived communicator: (all right,
    node.cma, calls done by single copy, communicator size)."""
    c = comm if how == "world" else _derived(comm, how)
    if c == MPI.COMM_NULL:
        return None
    try:
        ok = True
        for root in range(c.size):
            b = (np.arange(nbytes, dtype=np.uint8) * (root + 3) if c.rank == root
                 else np.zeros(nbytes, np.uint8))
            c.Bcast(b, root=root)
            ok &= bool((b == np.arange(nbytes, dtype=np.uint8) * (root + 3)).all())
        k = nbytes // 8
        out = np.zeros(k * c.size, np.int64)
        c.Allgather(np.arange(k, dtype=np.int64) + c.rank, out)
        ok &= all((out[j * k:(j + 1) * k] == np.arange(k) + j).all()
                  for j in range(c.size))
        # alltoall: block d of rank s holds s * 1000 + d + arange
        send = np.concatenate([np.arange(k, dtype=np.int64) + c.rank * 1000 + d
                               for d in range(c.size)])
        out = np.zeros_like(send)
        c.Alltoall(send, out)
        ok &= all((out[s * k:(s + 1) * k] == np.arange(k) + s * 1000 + c.rank).all()
                  for s in range(c.size))
        root = c.size - 1
        out = np.zeros(k * c.size, np.int64) if c.rank == root else None
        c.Gather(np.arange(k, dtype=np.int64) * (c.rank + 2), out, root=root)
        if c.rank == root:
            ok &= all((out[j * k:(j + 1) * k] == np.arange(k) * (j + 2)).all()
                      for j in range(c.size))
        whole = np.arange(k * c.size, dtype=np.int64) * 3
        out = np.zeros(k, np.int64)
        c.Scatter(whole if c.rank == root else None, out, root=root)
        ok &= bool((out == whole[c.rank * k:(c.rank + 1) * k]).all())
        node = c._ctx.node
        return ok, node.cma, node.cma_calls, c.size
    finally:
        if c is not comm:
            c.Free()


@pytest.mark.transports("shm")
@pytest.mark.parametrize("how", ["world", "parity"])
def test_large_calls_move_by_single_copy(world, how):
    # parity: two communicators of 2; blocks longer than a slot (1 MiB
    # where 4 ranks share 2 CPUs), so that gather goes past its first step
    size, nbytes = 4, (1 << 20) + 4096
    # gather and scatter take the node segment only when forced
    for got in world(size, **CMA_SMALL, **FORCE_ROOTED).run(r_large, nbytes, how):
        if got is None:
            continue
        ok, cma, calls, n = got
        # every bcast, the allgather, alltoall, gather and scatter
        assert ok and cma == 1 and calls == n + 4, got


@pytest.mark.transports("shm")
def test_forced_fallback_runs_through_the_slots():
    # GLOOCY_CMA=0 on one rank only: every rank must take the slots.
    with World(3, env={"GLOOCY_TRANSPORT": "shm", **CMA_SMALL}) as w:
        w.run(_set_env, "GLOOCY_CMA", "0", ranks=[2])
        got = w.run(r_large, 1 << 20, "dup")     # the Dup's node reads it
    for ok, cma, calls, _ in got:
        assert ok and cma == -1 and calls == 0


def _set_env(comm, name, value):
    os.environ[name] = value


def _refuse_cross_memory_attach():
    """A seccomp filter: process_vm_readv/writev fail with EPERM in this
    process (what Yama or a container does), every other call allowed."""
    libc = ctypes.CDLL(None, use_errno=True)
    # struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}
    filt = [(0x20, 0, 0, 4),                  # A = seccomp_data.arch
            (0x15, 1, 0, 0xC000003E),         # AUDIT_ARCH_X86_64 ? skip : allow
            (0x06, 0, 0, 0x7FFF0000),         # allow (another arch: no filter)
            (0x20, 0, 0, 0),                  # A = seccomp_data.nr
            (0x15, 2, 0, 310),                # process_vm_readv
            (0x15, 1, 0, 311),                # process_vm_writev
            (0x06, 0, 0, 0x7FFF0000),         # allow
            (0x06, 0, 0, 0x00050000 | errno.EPERM)]  # SECCOMP_RET_ERRNO
    arr = (ctypes.c_uint64 * len(filt))()
    for i, (code, jt, jf, k) in enumerate(filt):
        arr[i] = code | (jt << 16) | (jf << 24) | (k << 32)

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    prog = Prog(len(filt), ctypes.cast(arr, ctypes.c_void_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0:                     # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:    # PR_SET_SECCOMP filter
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def r_refused(comm, nbytes):
    if comm.rank == 1:
        _refuse_cross_memory_attach()
    return r_large(comm, nbytes, "dup")


@pytest.mark.transports("shm")
def test_refused_cross_memory_attach_falls_back_on_every_rank():
    # Only rank 1 is refused; every rank must learn it and take the slots.
    with World(3, env={"GLOOCY_TRANSPORT": "shm", **CMA_SMALL}) as w:
        got = w.run(r_refused, 1 << 20, timeout=60)
    for ok, cma, calls, _ in got:
        assert ok and cma == -1 and calls == 0, got


def r_bcast_forever(comm, nbytes, root, started):
    """Large bcasts from `root` until a peer is lost (the file `started`
    made after the first): (rank named, when, single-copy calls)."""
    b = np.zeros(nbytes, np.uint8)
    try:
        while True:
            comm.Bcast(b, root=root)
            if comm.rank == 0 and not os.path.exists(started):
                open(started, "w").close()
    except gloocy.errors.PeerLostError as e:
        return e.rank, time.monotonic(), comm._ctx.node.cma_calls


@pytest.mark.transports("shm")
def test_a_rank_killed_during_single_copy_transfers_is_named(tmp_path):
    size, nbytes = 3, 16 << 20
    started = str(tmp_path / "started")
    with World(size, env={"GLOOCY_TRANSPORT": "shm"}) as w:
        killed_at = []

        def kill():                        # the root, read from, mid-stream
            deadline = time.monotonic() + 25
            while not os.path.exists(started) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)
            killed_at.append(time.monotonic())
            w.kill(size - 1)
        killer = threading.Thread(target=kill)
        killer.start()
        try:
            got = w.run(r_bcast_forever, nbytes, size - 1, started, timeout=30,
                        check=False)
        finally:
            killer.join()
    for lost, noticed, calls in got[:size - 1]:     # the survivors
        assert lost == size - 1, got
        assert calls >= 1, got             # single copies ran before
        assert 0 <= noticed - killed_at[0] < 3.0
