"""Build the Cython extensions: the core and one module per transport."""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

# -O3 is portable; -march=native is faster here but can SIGILL elsewhere.
# -g0 drops debug info, a third of the compile time of _core;
# GLOOCY_CFLAGS=-g brings it back (later flags win).
CFLAGS = ["-O3", "-fwrapv", "-g0"] + os.environ.get("GLOOCY_CFLAGS", "").split()

# Cython and the C compiler run on every core (_core, the longest, first:
# the transports build beside it).
JOBS = os.cpu_count() or 1

extensions = [
    Extension("gloocy._core", ["gloocy/_core.pyx"], include_dirs=["gloocy"],
              extra_compile_args=CFLAGS),
    Extension("gloocy.datatypes", ["gloocy/datatypes.pyx"],
              include_dirs=["gloocy"], extra_compile_args=CFLAGS),
    Extension("gloocy.ops", ["gloocy/ops.pyx"], include_dirs=["gloocy"],
              extra_compile_args=CFLAGS),
    Extension("gloocy.memory", ["gloocy/memory.pyx"],
              extra_compile_args=CFLAGS),
    Extension("gloocy._msg", ["gloocy/_msg.pyx"], include_dirs=["gloocy"],
              extra_compile_args=CFLAGS),
    Extension("gloocy.status", ["gloocy/status.pyx"],
              extra_compile_args=CFLAGS),
    Extension("gloocy.requests", ["gloocy/requests.pyx"],
              include_dirs=["gloocy"], extra_compile_args=CFLAGS),
    Extension("gloocy.communicator", ["gloocy/communicator.pyx"],
              include_dirs=["gloocy"], extra_compile_args=CFLAGS),
    Extension("gloocy.transport._stream", ["gloocy/transport/_stream.pyx"],
              extra_compile_args=CFLAGS),
    Extension("gloocy.transport._tcp", ["gloocy/transport/_tcp.pyx"],
              extra_compile_args=CFLAGS),
    Extension("gloocy.transport._shm", ["gloocy/transport/_shm.pyx"],
              include_dirs=["gloocy"], extra_compile_args=CFLAGS),
    # the torch backend's allreduce on a tensor's address (imports no torch)
    Extension("gloocy.torch._raw", ["gloocy/torch/_raw.pyx"],
              include_dirs=["gloocy"], extra_compile_args=CFLAGS),
    # ibverbs: libibverbs.so.1 is dlopen'ed at run time (_ibv_abi.h), so
    # this builds and imports without rdma-core.
    Extension("gloocy.transport._ibverbs", ["gloocy/transport/_ibverbs.pyx"],
              include_dirs=["gloocy", "gloocy/transport"], libraries=["dl"],
              extra_compile_args=CFLAGS),
]

setup(
    ext_modules=cythonize(
        extensions,
        nthreads=JOBS,
        compiler_directives={"language_level": "3", "embedsignature": True},
    ),
    options={"build_ext": {"parallel": JOBS}},
)
