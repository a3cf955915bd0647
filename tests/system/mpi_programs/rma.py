"""One-sided communication (MPI.Win): every window flavor, every kind of
epoch and every operation, printing what each rank's memory and fetches
hold, so that mpi4py on MPICH and gloocy.MPI can be compared line by
line: Put/Get/Accumulate under Fence, a PSCW ring, a counter at rank 0
under exclusive locks (values sorted), Fetch_and_op and Compare_and_swap
under Lock_all, a derived target datatype, Allocate_shared with
Shared_query, a dynamic window, the request forms and the window's
attributes."""
import numpy as np

from _world import MPI, comm, rank, say, size

right, left = (rank + 1) % size, (rank - 1) % size
I8 = MPI.LONG                     # NumPy's int64 here (Linux, LP64)


# --- Allocate: fence epochs
win = MPI.Win.Allocate(8 * (16 + 4 * size), 8, comm=comm)
mem = np.frombuffer(win.tomemory(), np.int64)
mem[:] = 0
say("attrs", win.Get_attr(MPI.WIN_SIZE), win.Get_attr(MPI.WIN_DISP_UNIT),
    win.Get_attr(MPI.WIN_CREATE_FLAVOR) == MPI.WIN_FLAVOR_ALLOCATE,
    win.group_size, win.group_rank)
win.Fence()
win.Put(np.arange(4, dtype=np.int64) + 10 * rank, right, 4 * rank)
win.Accumulate(np.full(4, rank + 1, np.int64), 0, [0, 4, I8], MPI.SUM)
win.Fence()
say("fence memory", mem.tolist())
got = np.zeros(16 + 4 * size, np.int64)
win.Get(got, left)
win.Fence(MPI.MODE_NOSUCCEED)
say("got from left", got.tolist())

# --- PSCW: a ring, each rank writes into its right neighbour
group = win.Get_group()
to_right, from_left = group.Incl([right]), group.Incl([left])
win.Post(from_left)
win.Start(to_right)
win.Put(np.array([100 + rank], np.int64), right, 1)
win.Complete()
win.Wait()
say("pscw", int(mem[1]))
for g in (group, to_right, from_left):
    g.Free()

# --- passive target: a counter at rank 0
comm.Barrier()
if rank == 0:
    mem[:] = 0
comm.Barrier()
mine = []
one, before = np.ones(1, np.int64), np.zeros(1, np.int64)
for _ in range(5):
    win.Lock(0, MPI.LOCK_EXCLUSIVE)
    win.Get_accumulate(one, before, 0, 2, MPI.SUM)
    win.Unlock(0)
    mine.append(int(before[0]))
values = sorted(sum(comm.allgather(mine), []))
say("counter", values == list(range(5 * size)), values[-1])

# --- Lock_all: Fetch_and_op and Compare_and_swap at rank 0
comm.Barrier()
win.Lock_all()
win.Fetch_and_op(np.array([rank + 1], np.int64), before, 0, 3, MPI.MAX)
old = np.zeros(1, np.int64)
win.Compare_and_swap(np.array([rank + 7], np.int64), np.zeros(1, np.int64), old, 0, 8)
win.Flush_all()
win.Unlock_all()
comm.Barrier()
if rank == 0:
    winner = int(mem[8]) - 7
    say("max", int(mem[3]), "cas winner ok", 0 <= winner < size)
won = comm.allgather(int(old[0]) == 0)
say("cas winners", sum(won))

# --- a derived target datatype: every other element of rank 0's window
comm.Barrier()
every_other = I8.Create_vector(2 * size, 1, 2).Commit()
win.Lock(0, MPI.LOCK_SHARED)
strided = np.zeros(2 * size, np.int64)
win.Get(strided, 0, [0, 1, every_other])
win.Unlock(0)
say("strided", strided[:4].tolist())
every_other.Free()

# --- request forms
comm.Barrier()
win.Lock(right)
req = win.Rput(np.array([rank], np.int64), right, 5)
req.Wait()
win.Flush(right)
got = np.zeros(1, np.int64)
req = win.Rget(got, right, 5)
req.Wait()
win.Unlock(right)
say("rput/rget", int(got[0]))
win.Free()

# --- Allocate_shared: every rank's part by loads and stores
node = comm.Split_type(MPI.COMM_TYPE_SHARED)
shared = MPI.Win.Allocate_shared(8 * (node.rank + 1), 8, comm=node)
part = np.frombuffer(shared.tomemory(), np.int64)
part[:] = node.rank
node.Barrier()
seen = []
for r in range(node.size):
    buf, unit = shared.Shared_query(r)
    seen.append((len(buf), unit, np.frombuffer(buf, np.int64).tolist()))
say("shared", seen)
shared.Free()
node.Free()

# --- Create over user memory, and a dynamic window
memory = MPI.Alloc_mem(16)
memory[:] = bytes(16)
created = MPI.Win.Create(memory, 1, comm=comm)
created.Fence()
created.Put(bytearray([rank + 1] * 4), right, 4)
created.Fence()
say("created", list(memory[4:8]), created.Get_attr(MPI.WIN_BASE) == MPI.Get_address(memory))
created.Free()
MPI.Free_mem(memory)

dynamic = MPI.Win.Create_dynamic(comm=comm)
region = np.zeros(4, np.int64)
dynamic.Attach(region)
addresses = comm.allgather(MPI.Get_address(region))
dynamic.Fence()
dynamic.Put(np.array([rank], np.int64), right, addresses[right] + 8)
dynamic.Fence()
say("dynamic", region.tolist(), dynamic.Get_attr(MPI.WIN_SIZE))
dynamic.Detach(region)
dynamic.Free()
say("done", win == MPI.WIN_NULL)
