"""An intercommunicator pipeline: a group of producers hands work to a group
of consumers (point-to-point to remote ranks, any source), then the groups
exchange through the intercommunicator collectives (rooted ones with
MPI.ROOT / MPI.PROC_NULL), and finally merge into one intracommunicator."""
import sys
import numpy as np

from _world import MPI, comm as world, rank, say, size


if size < 2:
    say("a world of one has no second group")
    sys.exit(0)

nprod = (size + 1) // 2
producer = rank < nprod
local = world.Split(0 if producer else 1, key=rank)
inter = local.Create_intercomm(0, world, nprod if producer else 0, tag=11)
me, nlocal, nremote = inter.Get_rank(), inter.Get_size(), inter.Get_remote_size()
role = "producer" if producer else "consumer"
say(role, me, "of", nlocal, "remote", nremote, inter.Is_inter(),
    inter.Get_remote_group().Translate_ranks(None, world.Get_group()))

# -- work items: producer i sends item k to consumer (i + k) % nremote -------
ITEMS = 3
if producer:
    reqs = []
    for k in range(ITEMS):
        item = np.arange(4, dtype="f8") * (me + 1) + 10 * k
        reqs.append(inter.Isend(item, dest=(me + k) % nremote, tag=k))
    MPI.Request.Waitall(reqs)
else:
    expect = sum(1 for i in range(nremote) for k in range(ITEMS)
                 if (i + k) % nlocal == me)
    got = []
    for _ in range(expect):
        st = MPI.Status()
        buf = np.empty(4, dtype="f8")
        inter.Recv(buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st)
        got.append((st.Get_source(), st.Get_tag(), buf.tolist()))
    for source, tag, values in sorted(got):
        say("consumer", me, "item from producer", source, "tag", tag, values)
inter.Barrier()

# -- objects: a job description from the producers' leader ---------------------
if producer:
    job = inter.bcast({"job": "square", "n": 5} if me == 0 else None,
                      root=MPI.ROOT if me == 0 else MPI.PROC_NULL)
else:
    job = inter.bcast(None, root=0)
say(role, me, "job", job)
results = [i * i * (me + 1) for i in range(5)] if not producer else None
got = inter.gather(results, root=0 if not producer else
                   (MPI.ROOT if me == 0 else MPI.PROC_NULL))
say(role, me, "gathered", got)
say(role, me, "allgather", inter.allgather((role, me)))
say(role, me, "alltoall", inter.alltoall([f"{role}{me}->{d}" for d in range(nremote)]))
say(role, me, "allreduce", inter.allreduce(me + 1, op=MPI.SUM))

# -- buffers -------------------------------------------------------------------
mine = np.arange(3, dtype="i4") + 100 * (rank + 1)
total = np.zeros(3, dtype="i4")
inter.Allreduce(mine, total, op=MPI.SUM)
say(role, me, "Allreduce", total.tolist())
table = np.zeros((nremote, 3), dtype="i4")
inter.Allgather(mine, table)
say(role, me, "Allgather", table.tolist())
if producer:
    root = MPI.ROOT if me == 0 else MPI.PROC_NULL
    best = np.zeros(3, dtype="i4") if me == 0 else None
    inter.Reduce(None, best, op=MPI.MAX, root=root)
    scatter = (np.arange(2 * nremote, dtype="f8") if me == 0 else None)
    inter.Scatter(scatter, None, root=root)
    if me == 0:
        say("producer", me, "Reduce MAX", best.tolist())
else:
    inter.Reduce(mine, None, op=MPI.MAX, root=0)
    part = np.zeros(2, dtype="f8")
    inter.Scatter(None, part, root=0)
    say("consumer", me, "Scatter", part.tolist())
sendbuf = np.array([10 * rank + d for d in range(nremote)], dtype="i8")
recvbuf = np.zeros(nremote, dtype="i8")
inter.Alltoall(sendbuf, recvbuf)
say(role, me, "Alltoall", recvbuf.tolist())

# -- one intracommunicator again: consumers after producers ---------------------
merged = inter.Merge(high=not producer)
say(role, me, "merged rank", merged.Get_rank(), "of", merged.Get_size(),
    merged.allreduce(rank, op=MPI.MAX))
merged.Free()
inter.Free()
local.Free()
say("done")
