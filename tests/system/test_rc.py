"""mpi4py's runtime configuration (mpi4py.rc, MPI4PY_RC_*) as gloocy.MPI
reads it: a program that sets rc.initialize = False before importing MPI
initializes it itself; an unexpected value warns and falls back to the
default. Each program runs twice, in a process of its own (a world of one):
with real mpi4py (the oracle) and with gloocy.MPI under mpi4py's name (a
package `mpi4py` whose rc is a plain namespace and whose MPI is gloocy's),
and prints the same lines."""

import os
import subprocess
import sys
import textwrap

import pytest

from peers import MPI as INSTALL_MPI, installed

SHIM_INIT = '''
import sys, types
rc = types.SimpleNamespace(initialize=True, threads=True, thread_level="multiple",
                           finalize=None, fast_reduce=True, recv_mprobe=True,
                           irecv_bufsz=32768, errors="exception")
sys.modules["mpi4py.rc"] = rc
'''
SHIM_MPI = '''
import sys
import gloocy.MPI
sys.modules[__name__] = gloocy.MPI
'''

PROGRAMS = {
    "initialize-false": '''
        from mpi4py import rc
        rc.initialize = False
        from mpi4py import MPI
        print("imported", MPI.Is_initialized(), MPI.Is_finalized())
        print("Init_thread", MPI.Init_thread() == MPI.Query_thread())
        print("world", MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank())
        print("initialized", MPI.Is_initialized(), MPI.Is_finalized())
        MPI.Finalize()
        print("finalized", MPI.Is_initialized(), MPI.Is_finalized())
    ''',
    "unexpected-values": '''
        import warnings
        from mpi4py import rc
        rc.initialize, rc.thread_level, rc.irecv_bufsz = 7, "lots", -1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from mpi4py import MPI
        print(sorted(str(w.message) for w in caught if
                     str(w.message).startswith("mpi4py.rc")))
        print("initialized", MPI.Is_initialized())
    ''',
    "environment": '''
        import os
        os.environ["MPI4PY_RC_INITIALIZE"] = "no"
        os.environ["MPI4PY_RC_IRECV_BUFSZ"] = "2048"
        from mpi4py import rc
        from mpi4py import MPI
        print("rc", rc.initialize, rc.irecv_bufsz, MPI.Is_initialized())
        MPI.Init()
        print("initialized", MPI.Is_initialized())
    ''',
}


def _run(program, shim_dir):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GLOOCY_", "PMI_", "HYDRA_", "MPI4PY_"))}
    if shim_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(shim_dir)] + [p for p in sys.path if p])
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(program)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.skipif(not installed("mpi4py"), reason=f"needs {INSTALL_MPI}")
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_rc_as_mpi4py(name, tmp_path):
    package = tmp_path / "mpi4py"
    package.mkdir()
    (package / "__init__.py").write_text(SHIM_INIT)
    (package / "MPI.py").write_text(SHIM_MPI)
    want = _run(PROGRAMS[name], None)
    assert _run(PROGRAMS[name], tmp_path) == want
