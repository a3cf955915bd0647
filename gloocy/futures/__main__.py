"""``gloocy-run -n N python -m gloocy.futures script.py [args]`` (or
``-m module``, ``-c command``): rank 0 runs the program, whose
MPIPoolExecutor hands tasks to the other ranks; those serve them until the
program ends."""

import os
import runpy
import sys

USAGE = ("usage: python -m gloocy.futures <script.py | -m module | -c command> "
         "[args]")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 0 if argv else 2
    if argv[0] in ("-m", "-c") and len(argv) < 2:
        print(USAGE, file=sys.stderr)
        return 2

    from gloocy import MPI
    from gloocy import futures
    from gloocy.futures import _pool

    comm = MPI.COMM_WORLD.Dup()
    client = 0
    if comm.Get_rank() != client:
        try:
            _load_main(argv)
            _pool.serve(comm, client)
        finally:
            comm.Free()
        return 0

    pool = _pool.Pool(comm, client)
    futures._world.update(pool=pool, comm=comm)
    status = 0
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1]] + argv[2:]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c"] + argv[2:]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv = argv
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
    except BaseException as exc:                # noqa: B902 (reported, then exit 1)
        _pool.report(exc)
        status = 1
    finally:
        futures._world.update(pool=None, comm=None)
        pool.stop()
        comm.Free()
    return status


def _load_main(argv):
    """At a worker: the client's program as module __mp_main__, also
    standing for __main__, so that the functions it defines (pickled by
    name as __main__.f) are found. Its ``if __name__ == "__main__":`` part
    does not run here."""
    import types
    if argv[0] == "-c":
        return
    saved = sys.argv
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1]] + argv[2:]
            names = runpy.run_module(argv[1], run_name="__mp_main__")
        else:
            sys.argv = argv
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            names = runpy.run_path(argv[0], run_name="__mp_main__")
    finally:
        sys.argv = saved
    module = types.ModuleType("__mp_main__")
    module.__dict__.update(names)
    sys.modules["__mp_main__"] = sys.modules["__main__"] = module


if __name__ == "__main__":
    sys.exit(main())
