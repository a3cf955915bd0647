"""A worker process of MPIPoolExecutor in spawn mode (started by it as
``python -m gloocy.futures.server``): serve the client's tasks until it
says stop."""

import sys


def main():
    from gloocy import MPI
    from gloocy.futures import _pool, _spawned
    from gloocy.futures.__main__ import _load_main

    parent = MPI.Comm.Get_parent()
    if not parent:
        print("gloocy.futures.server: not started by MPIPoolExecutor (this "
              "process has no parent)", file=sys.stderr)
        return 2
    _spawned._in_worker.append(True)
    merged = parent.Merge(high=True)
    try:
        program = merged.bcast(None, root=0)
        if program[0] != "-c":
            try:
                _load_main(program)
            except Exception as exc:    # served anyway: its tasks fail alone
                print(f"gloocy.futures.server: loading the client's program "
                      f"{program[-1]!r} failed: {type(exc).__name__}: {exc}",
                      file=sys.stderr, flush=True)
        _pool.serve(merged, 0)
    finally:
        merged.Free()
        parent.Disconnect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
