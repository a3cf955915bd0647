"""Communicator and group management: Dup/Clone/Split/Split_type/Create/
Create_group, Compare, groups, names, Free."""
from _world import MPI, comm as world, rank, say, size


RESULTS = ["IDENT", "CONGRUENT", "SIMILAR", "UNEQUAL"]


def cmp_name(value):
    return next(n for n in RESULTS if getattr(MPI, n) == value)


say("world", world.Get_rank(), world.Get_size(), world.rank, world.size)
say("self", MPI.COMM_SELF.Get_rank(), MPI.COMM_SELF.Get_size())
say("names", world.Get_name(), MPI.COMM_SELF.Get_name())
say("intra", world.Is_intra(), world.Is_inter())

# Dup / Clone: same group, new context
dup = world.Dup()
clone = world.Clone()
say("Dup", dup.Get_rank(), dup.Get_size(), cmp_name(MPI.Comm.Compare(world, dup)),
    cmp_name(world.Compare(world)), cmp_name(clone.Compare(dup)))
say("Dup allreduce", dup.allreduce(rank + 1), clone.allreduce(1))
dup.Set_name("my-dup")
say("Set_name", dup.Get_name(), world.Get_name())

# messages on a duplicate never match receives on the original
if size >= 2:
    if rank == 0:
        dup.send("on dup", dest=1, tag=0)
        world.send("on world", dest=1, tag=0)
    elif rank == 1:
        say("world first", world.recv(source=0, tag=0), dup.recv(source=0, tag=0))

# Split by parity, key reverses the order
half = world.Split(color=rank % 2, key=-rank)
say("Split parity", half.Get_rank(), half.Get_size(), half.allgather(rank),
    cmp_name(world.Compare(half)))
# same members, reversed order
rev = world.Split(color=0, key=size - rank)
say("Split reversed", rev.Get_rank(), cmp_name(world.Compare(rev)))
# key ties keep the parent order
tie = world.Split(color=0, key=0)
say("Split ties", tie.Get_rank(), cmp_name(world.Compare(tie)))
# UNDEFINED color gives COMM_NULL
part = world.Split(color=MPI.UNDEFINED if rank == 0 else 1, key=rank)
if rank == 0:
    say("Split UNDEFINED", part == MPI.COMM_NULL)
else:
    say("Split others", part.Get_rank(), part.Get_size(), part.allreduce(rank))
    part.Free()
# split of a split
if half.Get_size() >= 2:
    quarter = half.Split(color=half.Get_rank() // 2, key=half.Get_rank())
    say("Split of split", quarter.Get_rank(), quarter.Get_size(), quarter.allgather(rank))
    quarter.Free()

# Split_type: every rank shares this host's memory
shared = world.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
say("Split_type shared", shared.Get_rank(), shared.Get_size(), cmp_name(world.Compare(shared)))
shared.Free()

# groups
g = world.Get_group()
say("group", g.Get_size(), g.Get_rank(), g.size, g.rank, cmp_name(MPI.Group.Compare(g, dup.Get_group())))
evens = g.Incl(list(range(0, size, 2)))
odds = g.Excl(list(range(0, size, 2)))
say("Incl", evens.Get_size(), evens.Get_rank() if evens.Get_rank() != MPI.UNDEFINED else "UNDEFINED")
say("Excl", odds.Get_size(), odds.Get_rank() if odds.Get_rank() != MPI.UNDEFINED else "UNDEFINED")
tr = MPI.Group.Translate_ranks(evens, list(range(evens.Get_size())), g)
say("Translate evens->world", tr)
tr = MPI.Group.Translate_ranks(g, list(range(size)), odds)
say("Translate world->odds", ["U" if r == MPI.UNDEFINED else r for r in tr])
rg = g.Incl(list(reversed(range(size))))
say("reversed group", rg.Get_rank(), cmp_name(MPI.Group.Compare(g, rg)))
u = MPI.Group.Union(odds, evens)
i = MPI.Group.Intersection(g, evens)
d = MPI.Group.Difference(g, evens)
say("Union", u.Get_size(), cmp_name(MPI.Group.Compare(u, g)),
    "Intersection", i.Get_size(), cmp_name(MPI.Group.Compare(i, evens)),
    "Difference", d.Get_size(), cmp_name(MPI.Group.Compare(d, odds)))
say("GROUP_EMPTY", MPI.GROUP_EMPTY.Get_size(), MPI.GROUP_EMPTY.Get_rank() == MPI.UNDEFINED,
    cmp_name(MPI.Group.Compare(odds, MPI.GROUP_EMPTY)) if size == 1 else "-")

# Create (collective over world): non-members get COMM_NULL
ce = world.Create(evens)
if rank % 2 == 0:
    say("Create member", ce.Get_rank(), ce.Get_size(), ce.allreduce(rank))
    ce.Free()
else:
    say("Create non-member", ce == MPI.COMM_NULL)
# Create_group: only the members call it
if rank % 2 == 1:
    co = world.Create_group(odds, tag=7)
    say("Create_group", co.Get_rank(), co.Get_size(), co.allgather(rank))
    co.Free()
# Create with the reversed group: ranks follow the group's order
cr = world.Create(rg)
say("Create reversed", cr.Get_rank(), cmp_name(world.Compare(cr)), cr.bcast(rank, root=0))
cr.Free()

# the group of a communicator matches
say("half group", cmp_name(MPI.Group.Compare(half.Get_group(),
                                              g.Incl([r for r in range(size) if r % 2 == rank % 2]))))

for grp in (g, evens, odds, rg, u, i, d):
    grp.Free()
say("group freed", g == MPI.GROUP_NULL, evens == MPI.GROUP_NULL)

# Free turns the handle into COMM_NULL
for c in (dup, clone, half, rev, tie):
    c.Free()
say("freed", dup == MPI.COMM_NULL, clone == MPI.COMM_NULL, half == MPI.COMM_NULL)
say("world still works", world.allreduce(1))
