"""Building the libibverbs stand-in (ibmock.c) and checking gloocy's own
declarations of the verbs ABI (gloocy/transport/_ibv_abi.h) against the
system's <infiniband/verbs.h>. Both need a C compiler and the verbs headers
(libibverbs-dev); `missing()` names what is absent."""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ABI_HEADER = HERE.parent.parent / "gloocy" / "transport" / "_ibv_abi.h"
VERBS_H = "infiniband/verbs.h"

_built = {}


def missing():
    """What building the stand-in lacks ('' when nothing)."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        return "no C compiler (cc)"
    probe = subprocess.run([cc, "-E", "-x", "c", "-"], input=f"#include <{VERBS_H}>\n",
                           capture_output=True, text=True)
    if probe.returncode:
        return f"no <{VERBS_H}> (install libibverbs-dev)"
    return ""


def build(outdir=None):
    """Compile the stand-in into `outdir` (a temporary directory by default,
    once per process) as libibverbs.so.1; returns that directory."""
    if outdir is None and "lib" in _built:
        return _built["lib"]
    out = Path(outdir or tempfile.mkdtemp(prefix="gloocy-ibmock-"))
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O2", "-g", "-Wall", "-fPIC", "-shared", "-fvisibility=hidden",
                    f"-Wl,--version-script={HERE / 'libibverbs.map'}",
                    "-Wl,-soname,libibverbs.so.1", "-o", str(out / "libibverbs.so.1"),
                    str(HERE / "ibmock.c"), str(HERE / "ibmock_serve.c"), "-lpthread"],
                   check=True, capture_output=True, text=True)
    if outdir is None:
        _built["lib"] = out
    return out


def env(libdir, sockdir, **faults):
    """The environment of a rank process that uses the stand-in."""
    paths = [str(libdir)] + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    e = {"LD_LIBRARY_PATH": ":".join(paths), "GLOOCY_IBMOCK_DIR": str(sockdir)}
    e.update({f"GLOOCY_IBMOCK_{k.upper()}": str(v) for k, v in faults.items()})
    return e


def session_env():
    """Build the stand-in once per process (into a temporary directory,
    removed at exit) and return the environment its ranks need."""
    if "env" not in _built:
        import atexit
        root = Path(tempfile.mkdtemp(prefix="gloocy-ibmock-"))
        atexit.register(shutil.rmtree, root, True)
        (root / "sock").mkdir()
        _built["env"] = env(build(root), root / "sock")
    return dict(_built["env"])


def held_fds():
    """In a rank process: the fds the stand-in holds for its live verbs
    objects (ibmock_held_fds in ibmock.c), an empty set when it is not
    loaded. A real HCA's objects hold none of ours (they live in the
    kernel), so a world's leak check counts these as the connections'
    (GLOOCY_TEST_HELD_FDS, gloocy.testing.processes); at close they must
    be gone like every other fd."""
    import ctypes
    try:
        lib = ctypes.CDLL("libibverbs.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        fn = lib.ibmock_held_fds
    except (OSError, AttributeError):
        return set()              # not loaded, or the real library
    out = (ctypes.c_int * 4096)()
    n = fn(out, len(out))
    return set(out[:n])
