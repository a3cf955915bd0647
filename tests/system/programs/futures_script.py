"""A script for ``-m mpi4py.futures`` / ``-m gloocy.futures``: only the
client (rank 0) runs its main part; functions defined here run at the
workers, which load this file as a module."""
import os
import sys

if os.environ.get("USE_GLOOCY"):
    from gloocy.futures import MPIPoolExecutor
else:
    from mpi4py.futures import MPIPoolExecutor


def work(x):
    return sum(i * i for i in range(x))


def fails(x):
    raise ZeroDivisionError(f"task {x}")


SEEN = []


def note(tag):
    SEEN.append(tag)


def seen(_):
    return list(SEEN)


if __name__ == "__main__":
    with MPIPoolExecutor() as executor:
        print("map", list(executor.map(work, range(30))))
        print("unordered", sorted(executor.map(work, range(10), unordered=True)))
        print("starmap", list(executor.starmap(pow, [(2, i) for i in range(8)])))
        try:
            executor.submit(fails, 4).result()
        except ZeroDivisionError as e:
            print("raised", type(e).__name__, e)
    with MPIPoolExecutor(initializer=note, initargs=("init",)) as executor:
        print("initialized", all(s == ["init"] for s in executor.map(seen, range(4))))
    print("argv", sys.argv[1:])
    sys.exit(3)
