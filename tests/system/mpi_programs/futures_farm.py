"""A task farm with MPICommExecutor (every rank runs this program; root 0
hands out the tasks, the other ranks run them): map in order and unordered,
starmap, submit, an exception raised by a task, executors one after the
other, and a root other than 0."""
import os

from _world import comm, rank, say, size

if os.environ.get("USE_GLOOCY"):
    from gloocy.futures import MPICommExecutor, as_completed
else:
    from mpi4py.futures import MPICommExecutor, as_completed


def collatz(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def fails(x):
    raise KeyError(f"task {x} failed")


with MPICommExecutor(comm, root=0) as executor:
    if executor is not None:
        say("map", list(executor.map(collatz, range(1, 40))))
        say("unordered", sorted(executor.map(collatz, range(1, 40), unordered=True)))
        say("starmap", list(executor.starmap(divmod, [(i * 7, 3) for i in range(12)])))
        futures = [executor.submit(pow, 3, i) for i in range(10)]
        say("as_completed", sorted(f.result() for f in as_completed(futures)))
        try:
            executor.submit(fails, 5).result()
        except KeyError as e:
            say("task raised", type(e).__name__, e)
say("after first farm")

root = size - 1
with MPICommExecutor(comm, root=root) as executor:
    if executor is not None:
        say("root", root, "big", sum(executor.map(collatz, range(1, 300), chunksize=7)))
say("after second farm")
comm.Barrier()
