"""Intercommunicators on real processes, world sizes 2-5, over every split
of the world into two groups worth trying (groups of one, uneven groups,
interleaved groups): every collective (buffer, object and nonblocking
forms), point-to-point across the groups, Merge, Dup, Split, Create and the
errors. Every value a rank sends is a closed-form function of its world
rank, so the test process computes with NumPy what each rank must get."""

import numpy as np
import pytest

from gloocy.communicator import Intercomm, Intracomm
from gloocy.constants import ANY_SOURCE, PROC_NULL, ROOT
from gloocy.errors import ArgumentError, ERR_RANK, ERR_ROOT
from gloocy.groups import CONGRUENT
from gloocy.status import Status
import gloocy
from conftest import long_runs

# The intercommunicator layer sits above the pairs: "mix" (shared memory
# within a pretend host, TCP across) carries both kinds in one world, and
# test_p2p/test_collectives run each transport alone; --long runs all three.
TRANSPORTS = ("shm", "tcp", "mix") if long_runs() else ("mix",)


def splits(n):
    """Group A (world ranks) of each split of a world of n tried."""
    out = [list(range(k)) for k in range(1, n)]
    if n >= 4:
        out.append(list(range(0, n, 2)))          # interleaved
    if n == 5:
        out.append([1, 4])                        # scattered, uneven
    return out


CASES = [(n, a) for n in (2, 3, 4, 5) for a in splits(n)]


def groups(size, a, p):
    """(our group, the other group) of world rank p, as world ranks."""
    b = [r for r in range(size) if r not in a]
    return (a, b) if p in a else (b, a)


def data(p, n, dtype=np.float64, salt=0):
    """What world rank p sends: n values of dtype."""
    return (np.arange(n) + 7 * p + 1 + salt).astype(dtype)


def make(comm, a):
    """(local intracomm, intercomm) of this rank for split a; the leaders
    are each group's last rank, found through the world."""
    mine, theirs = groups(comm.size, a, comm.rank)
    local = comm.Split(0 if comm.rank in a else 1, mine.index(comm.rank))
    ic = local.Create_intercomm(len(mine) - 1, comm, theirs[-1])
    return local, ic


def order(size, a):
    """The two groups in the order every rank walks them."""
    return [a, [r for r in range(size) if r not in a]]


def r_collectives(comm, a):
    local, ic = make(comm, a)
    p, size = comm.rank, comm.size
    mine, theirs = groups(size, a, p)
    me, rs = ic.rank, ic.remote_size
    out = {"shape": (ic.rank, ic.size, rs, ic.Is_inter(), ic.Is_intra(),
                     ic.Get_remote_group().Translate_ranks(),
                     ic.Get_group().Translate_ranks())}
    ic.Barrier()
    for gi, g in enumerate(order(size, a)):
        for rr in range(len(g)):
            here = g is mine or g == mine
            root = (ROOT if me == rr else PROC_NULL) if here else rr
            at_root, leaf = root == ROOT, not here
            # Bcast
            buf = data(p, 4) if at_root else (np.zeros(4) if leaf else None)
            ic.Bcast(buf, root)
            if leaf:
                out["bcast", gi, rr] = buf.tolist()
            # Gather / Gatherv
            rbuf = np.zeros((rs, 3)) if at_root else None
            ic.Gather(data(p, 3) if leaf else None, rbuf, root)
            if at_root:
                out["gather", gi, rr] = rbuf.tolist()
            counts = [i + 1 for i in range(rs)]
            rbuf = np.zeros(sum(counts), np.int32) if at_root else None
            ic.Gatherv(data(p, me + 1, np.int32) if leaf else None,
                       [rbuf, counts] if at_root else None, root)
            if at_root:
                out["gatherv", gi, rr] = rbuf.tolist()
            # Scatter / Scatterv
            sbuf = (np.concatenate([data(p, 3, salt=100 * i) for i in range(rs)])
                    if at_root else None)
            rbuf = np.zeros(3) if leaf else None
            ic.Scatter(sbuf, rbuf, root)
            if leaf:
                out["scatter", gi, rr] = rbuf.tolist()
            sbuf = (np.concatenate([data(p, i + 1, np.int64, 100 * i)
                                    for i in range(rs)]) if at_root else None)
            rbuf = np.zeros(me + 1, np.int64) if leaf else None
            ic.Scatterv([sbuf, counts] if at_root else None, rbuf, root)
            if leaf:
                out["scatterv", gi, rr] = rbuf.tolist()
            # Reduce: SUM on floats, MAX on ints
            rbuf = np.zeros(4) if at_root else None
            ic.Reduce(data(p, 4) if leaf else None, rbuf, gloocy.SUM, root)
            if at_root:
                out["reduce", gi, rr] = rbuf.tolist()
            rbuf = np.zeros(4, np.int32) if at_root else None
            ic.Reduce(data(p, 4, np.int32) if leaf else None, rbuf,
                      gloocy.MAX, root)
            if at_root:
                out["reduce max", gi, rr] = rbuf.tolist()
            # objects
            got = ic.bcast(("obj", p) if at_root else None, root)
            out["obj bcast", gi, rr] = got
            got = ic.gather(("g", p) if leaf else None, root)
            out["obj gather", gi, rr] = got
            got = ic.scatter([("s", p, i) for i in range(rs)] if at_root
                             else None, root)
            out["obj scatter", gi, rr] = got
            got = ic.reduce(p if leaf else None, gloocy.SUM, root)
            out["obj reduce", gi, rr] = got
    # Allgather / Allgatherv / Alltoall / Alltoallv
    rbuf = np.zeros((rs, 2))
    ic.Allgather(data(p, 2), rbuf)
    out["allgather"] = rbuf.tolist()
    counts = [i + 1 for i in range(rs)]
    rbuf = np.zeros(sum(counts), np.int16)
    ic.Allgatherv(data(p, me + 1, np.int16), [rbuf, counts])
    out["allgatherv"] = rbuf.tolist()
    rbuf = np.zeros((rs, 2))
    ic.Alltoall(np.concatenate([data(p, 2, salt=100 * i) for i in range(rs)]),
                rbuf)
    out["alltoall"] = rbuf.tolist()
    scounts = [(me + i) % 3 for i in range(rs)]
    rcounts = [(me + j) % 3 for j in range(rs)]
    sbuf = np.concatenate([data(p, scounts[i], salt=100 * i)
                           for i in range(rs)])
    rbuf = np.zeros(sum(rcounts))
    ic.Alltoallv([sbuf, scounts], [rbuf, rcounts])
    out["alltoallv"] = rbuf.tolist()
    # Allreduce, Reduce_scatter(_block)
    rbuf = np.zeros(5)
    ic.Allreduce(data(p, 5), rbuf, gloocy.SUM)
    out["allreduce"] = rbuf.tolist()
    rbuf = np.zeros(5, np.int32)
    ic.Allreduce(data(p, 5, np.int32), rbuf, gloocy.MIN)
    out["allreduce min"] = rbuf.tolist()
    total = 120                   # splits into 1..5 equal blocks
    rbuf = np.zeros(total // ic.size)
    ic.Reduce_scatter_block(data(p, total), rbuf, gloocy.SUM)
    out["reduce_scatter_block"] = rbuf.tolist()
    rcounts = uneven(total, ic.size)
    rbuf = np.zeros(rcounts[me])
    ic.Reduce_scatter(data(p, total), rbuf, rcounts, gloocy.SUM)
    out["reduce_scatter"] = rbuf.tolist()
    # a user op that does not commute (rank order counts), and AVG
    rbuf = np.zeros(3, np.int64)
    ic.Allreduce(100 + data(p, 3, np.int64), rbuf,
                 gloocy.ops.Op.create(concat, commute=False))
    out["allreduce user"] = rbuf.tolist()
    rbuf = np.zeros(3)
    ic.Allreduce(data(p, 3), rbuf, gloocy.AVG)
    out["allreduce avg"] = rbuf.tolist()
    # objects between the groups
    out["obj allgather"] = ic.allgather(("a", p))
    out["obj alltoall"] = ic.alltoall([("t", p, i) for i in range(rs)])
    out["obj allreduce"] = ic.allreduce(p, gloocy.MAX)
    ic.barrier()
    # nonblocking forms
    rbuf = np.zeros(5)
    req = ic.Iallreduce(data(p, 5), rbuf)
    req.Wait()
    out["iallreduce"] = rbuf.tolist()
    rbuf = np.zeros((rs, 2))
    ic.Iallgather(data(p, 2), rbuf).Wait()
    out["iallgather"] = rbuf.tolist()
    root0 = mine is a or mine == a
    buf = (data(p, 4) if me == 0 else None) if root0 else np.zeros(4)
    ic.Ibcast(buf, (ROOT if me == 0 else PROC_NULL) if root0 else 0).Wait()
    if not root0:
        out["ibcast"] = buf.tolist()
    ic.Ibarrier().Wait()
    ic.Free()
    local.Free()
    return out


def concat(invec, inoutvec):
    """Non-commutative, associative (as MPI asks of user ops): the base-100
    digits of invec then of inoutvec, after each number's leading 1 (which
    only marks where its digits start)."""
    p = np.ones_like(inoutvec)
    while np.any(p * 100 <= inoutvec):
        p = np.where(p * 100 <= inoutvec, p * 100, p)
    inoutvec[:] = invec * p + inoutvec - p


def uneven(total, n):
    """n block sizes adding up to total, not all equal."""
    rest = [i % 3 for i in range(1, n)]
    return [total - sum(rest)] + rest


def expected(size, a, p):
    """What world rank p must return from r_collectives (NumPy only)."""
    mine, theirs = groups(size, a, p)
    me, rs = mine.index(p), len(theirs)
    out = {"shape": (me, len(mine), rs, True, False, theirs, mine)}
    for gi, g in enumerate(order(size, a)):
        for rr in range(len(g)):
            root_p = g[rr]
            here = g == mine
            if not here:
                out["bcast", gi, rr] = data(root_p, 4).tolist()
                out["scatter", gi, rr] = data(root_p, 3, salt=100 * me).tolist()
                out["scatterv", gi, rr] = data(root_p, me + 1, np.int64,
                                               100 * me).tolist()
                out["obj bcast", gi, rr] = ("obj", root_p)
                out["obj scatter", gi, rr] = ("s", root_p, me)
                for key in ("obj gather", "obj reduce"):
                    out[key, gi, rr] = None
            elif me == rr:
                out["gather", gi, rr] = [data(q, 3).tolist() for q in theirs]
                out["gatherv", gi, rr] = np.concatenate(
                    [data(q, i + 1, np.int32) for i, q in enumerate(theirs)]
                ).tolist()
                out["reduce", gi, rr] = sum(data(q, 4) for q in theirs).tolist()
                out["reduce max", gi, rr] = np.max(
                    [data(q, 4, np.int32) for q in theirs], axis=0).tolist()
                out["obj bcast", gi, rr] = None
                out["obj gather", gi, rr] = [("g", q) for q in theirs]
                out["obj scatter", gi, rr] = None
                out["obj reduce", gi, rr] = sum(theirs)
            else:
                for key in ("obj bcast", "obj gather", "obj scatter",
                            "obj reduce"):
                    out[key, gi, rr] = None
    out["allgather"] = [data(q, 2).tolist() for q in theirs]
    out["allgatherv"] = np.concatenate(
        [data(q, i + 1, np.int16) for i, q in enumerate(theirs)]).tolist()
    out["alltoall"] = [data(q, 2, salt=100 * me).tolist() for q in theirs]
    out["alltoallv"] = np.concatenate(
        [data(q, (j + me) % 3, salt=100 * me) for j, q in enumerate(theirs)]
    ).tolist()
    out["allreduce"] = sum(data(q, 5) for q in theirs).tolist()
    out["allreduce min"] = np.min([data(q, 5, np.int32) for q in theirs],
                                  axis=0).tolist()
    total = 120                   # splits into 1..5 equal blocks
    full = sum(data(q, total) for q in theirs)
    block = total // len(mine)
    out["reduce_scatter_block"] = full[me * block:(me + 1) * block].tolist()
    counts = uneven(total, len(mine))
    start = sum(counts[:me])
    out["reduce_scatter"] = full[start:start + counts[me]].tolist()
    acc = np.ones(3, np.int64)
    for q in theirs:
        acc = 100 * acc + data(q, 3, np.int64)
    out["allreduce user"] = acc.tolist()
    out["allreduce avg"] = (sum(data(q, 3) for q in theirs) / rs).tolist()
    out["obj allgather"] = [("a", q) for q in theirs]
    out["obj alltoall"] = [("t", q, me) for q in theirs]
    out["obj allreduce"] = max(theirs)
    out["iallreduce"] = out["allreduce"]
    out["iallgather"] = out["allgather"]
    if mine != a:
        out["ibcast"] = data(a[0], 4).tolist()
    return out


@pytest.mark.parametrize("size,a", CASES)
def test_every_collective_across_the_groups(world, size, a):
    results = world(size).run(r_collectives, a)
    for p, got in enumerate(results):
        want = expected(size, a, p)
        assert set(got) == set(want), p
        for key in want:
            assert got[key] == want[key], (p, key)


def r_p2p(comm, a):
    """Each rank sends to every remote rank (buffers and objects), then
    receives from any source: sources are remote ranks."""
    local, ic = make(comm, a)
    p, rs = comm.rank, ic.remote_size
    reqs = [ic.Isend(data(p, 3), dest=i, tag=ic.rank) for i in range(rs)]
    got = []
    for _ in range(rs):
        st = Status()
        buf = np.zeros(3)
        ic.Recv(buf, ANY_SOURCE, status=st)
        got.append((st.source, st.tag, buf.tolist()))
    for r in reqs:
        r.Wait()
    ic.Barrier()            # no message of the next phase meets ANY_TAG
    for i in range(rs):
        ic.send(("o", p, i), dest=i, tag=7)
    objs = [ic.recv(source=i, tag=7) for i in range(rs)]
    # the leaders swap an object; the others send and receive nothing
    peer = 0 if ic.rank == 0 else PROC_NULL
    out = sorted(got), objs, ic.sendrecv(p, dest=peer, source=peer)
    ic.Free()
    local.Free()
    return out


@pytest.mark.parametrize("size,a", [c for c in CASES if c[0] in (2, 4, 5)])
def test_point_to_point_addresses_the_remote_group(world, size, a):
    for p, (got, objs, first) in enumerate(world(size).run(r_p2p, a)):
        mine, theirs = groups(size, a, p)
        me = mine.index(p)
        assert got == [(j, j, data(q, 3).tolist())
                       for j, q in enumerate(theirs)], p
        assert objs == [("o", q, me) for q in theirs], p
        assert first == (theirs[0] if me == 0 else None), p


def r_p2p_modes(comm, a, rounds):
    """Synchronous and standard sends to every remote rank, taken by matched
    probes from any source (buffers, then objects), then the leaders swap
    through Isendrecv: each round's messages are matched in its own phase."""
    local, ic = make(comm, a)
    p, rs = comm.rank, ic.remote_size
    out = []
    for k in range(rounds):
        reqs = [(ic.Issend if i % 2 else ic.Isend)(data(p, 3, salt=k), i, k)
                for i in range(rs)]
        got = []
        for _ in range(rs):
            st = Status()
            msg = ic.Mprobe(ANY_SOURCE, k, st)
            buf = np.zeros(3)
            msg.Recv(buf)
            got.append((st.source, buf.tolist()))
        for r in reqs:
            r.Wait()
        # a tag of their own: a fast sender's object must not meet the
        # buffer probes above
        reqs = [ic.issend(("o", p, k), dest=i, tag=100 + k)
                for i in range(rs)]
        objs = []
        for _ in range(rs):
            st = Status()
            obj = ic.mprobe(ANY_SOURCE, 100 + k, st).recv()
            objs.append((st.source, obj))
        for r in reqs:
            r.wait()
        ic.Barrier()            # the swap below meets no probe of this round
        peer = 0 if ic.rank == 0 else PROC_NULL
        y = np.zeros(2)
        ic.Isendrecv(np.full(2, float(p + k)), peer, k, y, peer, k).Wait()
        out.append((sorted(got), sorted(objs), y.tolist()))
    ic.Free()
    local.Free()
    return out


@pytest.mark.parametrize("size,a", [(2, [0]), (3, [0]), (4, [0, 2]),
                                    (4, [0])])
def test_send_modes_and_matched_probes_across_the_groups(world, size, a):
    rounds = 6
    for p, got in enumerate(world(size).run(r_p2p_modes, a, rounds)):
        mine, theirs = groups(size, a, p)
        for k, (bufs, objs, y) in enumerate(got):
            assert bufs == [(j, data(q, 3, salt=k).tolist())
                            for j, q in enumerate(theirs)], (p, k)
            assert objs == [(j, ("o", q, k)) for j, q in enumerate(theirs)]
            first = mine.index(p) == 0
            assert y == ([float(theirs[0] + k)] * 2 if first else [0.0, 0.0])


def r_new_communicators(comm, a, high_a):
    local, ic = make(comm, a)
    p = comm.rank
    out = {}
    merged = ic.Merge(high=(high_a if p in a else not high_a))
    out["merge"] = (merged.rank, merged.allgather(p))
    merged.Free()
    back = Intercomm.fromint(ic.toint())
    out["handle"] = (type(back).__name__, back == ic, back.remote_size)
    new, req = ic.Idup()
    req.Wait()
    out["idup"] = (type(new).__name__, new.remote_size, new.allgather(p),
                   new.Compare(ic))
    new.Free()
    x, y = np.full(2, float(p)), np.zeros(2)
    persistent = ic.Allreduce_init(x, y)
    for k in range(2):
        x += k
        persistent.Start()
        persistent.Wait()
        out["persistent", k] = y.tolist()
    dup = ic.Dup()
    out["dup"] = (dup.remote_size, dup.allgather(p), dup.Compare(ic))
    dup.Free()
    part = ic.Split(ic.rank % 2, -ic.rank)
    out["split"] = None if not part else (part.rank, part.allgather(p))
    if part:
        part.Free()
    g = ic.Get_group().Incl([ic.size - 1])
    sub = ic.Create(g)
    out["create"] = None if not sub else (sub.size, sub.allgather(p))
    if sub:
        sub.Free()
    ic.Free()
    local.Free()
    return out


@pytest.mark.parametrize("size,a", [(2, [0]), (3, [0]), (4, [0, 2]),
                                    (5, [0, 1, 2]), (5, [1, 4])])
@pytest.mark.parametrize("high_a", [False, True])
def test_merge_dup_split_create(world, size, a, high_a):
    b = [r for r in range(size) if r not in a]
    for p, got in enumerate(world(size).run(r_new_communicators, a, high_a)):
        mine, theirs = groups(size, a, p)
        me = mine.index(p)
        whole = b + a if high_a else a + b
        assert got["merge"] == (whole.index(p), whole), p
        assert got["handle"] == ("Intercomm", True, len(theirs)), p
        assert got["idup"] == ("Intercomm", len(theirs), theirs,
                               CONGRUENT), p
        assert got["persistent", 0] == [float(sum(theirs))] * 2, p
        assert got["persistent", 1] == [float(sum(theirs) + len(theirs))] * 2
        assert got["dup"] == (len(theirs), theirs, CONGRUENT), p
        # Split: parity of the local rank, ranked by descending local rank
        ours = [q for i, q in enumerate(mine) if i % 2 == me % 2][::-1]
        other = [q for i, q in enumerate(theirs) if i % 2 == me % 2][::-1]
        assert got["split"] == ((ours.index(p), other) if other else None), p
        # Create: each group's last rank, together
        assert got["create"] == ((1, [theirs[-1]]) if p == mine[-1]
                                 else None), p


def r_errors(comm):
    a = list(range(comm.size // 2))
    mine, theirs = groups(comm.size, a, comm.rank)
    local = comm.Split(0 if comm.rank in a else 1, 0)
    out = {}
    for args in ((local.size, comm, theirs[0]), (-1, comm, theirs[0]),
                 (0, comm, comm.size), (0, comm, mine[0])):
        try:
            local.Create_intercomm(*args)
        except ArgumentError as e:
            out.setdefault("create", []).append((e.error_class, str(e)))
    ic = local.Create_intercomm(0, comm, theirs[0])
    for root in (-2, ic.remote_size, 99):
        for call in (lambda: ic.Bcast(np.zeros(1), root),
                     lambda: ic.reduce(1, gloocy.SUM, root),
                     lambda: ic.Gather(np.zeros(1), np.zeros(9), root)):
            try:
                call()
            except ArgumentError as e:
                out.setdefault("root", []).append((e.error_class, str(e)))
    out["peer"] = []
    rs = ic.remote_size
    for call in (lambda: ic.Send(np.zeros(1), rs), lambda: ic.send(1, dest=rs),
                 lambda: ic.Isend(np.zeros(1), -3),
                 lambda: ic.Recv(np.zeros(1), source=rs),
                 lambda: ic.irecv(source=rs + 1), lambda: ic.Iprobe(rs),
                 lambda: ic.Sendrecv(np.zeros(1), 0, 0, np.zeros(1), rs)):
        try:
            call()
        except ArgumentError as e:
            out["peer"].append((e.error_class, str(e)))
    out["scan"] = []
    for name in ("Scan", "Exscan", "scan", "exscan", "Iscan"):
        try:
            getattr(ic, name)
        except AttributeError as e:
            out["scan"].append(str(e))
    try:
        Intracomm(ic)
    except TypeError as e:
        out["intracomm"] = str(e)
    try:
        Intercomm(local)
    except TypeError as e:
        out["intercomm"] = str(e)
    ic.Barrier()                # still usable after the refused calls
    ic.Free()
    local.Free()
    return out


@pytest.mark.parametrize("size", [2, 3, 4])
def test_errors_are_clear_and_local(world, size):
    for p, got in enumerate(world(size).run(r_errors)):
        create = got["create"]
        assert [c for c, _ in create] == [ERR_RANK] * 4, p
        assert "local_leader" in create[0][1] and "local_leader" in create[1][1]
        assert "remote_leader" in create[2][1]
        assert "remote_leader" in create[3][1]
        assert [c for c, _ in got["root"]] == [ERR_ROOT] * 9, p
        assert all("root" in m and "remote group" in m for _, m in got["root"])
        assert [c for c, _ in got["peer"]] == [ERR_RANK] * 7, p
        assert all("remote group" in m for _, m in got["peer"])
        assert len(got["scan"]) == 5 and all(
            "intercommunicator" in m for m in got["scan"])
        assert "intracommunicator" in got["intracomm"]
        assert "intercommunicator" in got["intercomm"]
