"""The optional peers some tests compare with or launch under: torch
(torch.distributed, torchrun), mpi4py on MPICH (mpiexec), and a real
redis-server (RedisServer: the store tests and the ranks meeting through it).

The suite passes without them (`pip install -e ".[test]"`); a test that
needs one skips, saying what to install. `.ci/run` installs them all.
"""

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

TORCH = ("torch: pip install torch==2.13.0 "
         "--index-url https://download.pytorch.org/whl/cpu (the CPU build)")
MPI = "mpi4py and MPICH: pip install mpi4py mpich"
MATPLOTLIB = "matplotlib: pip install matplotlib"


def installed(module):
    return importlib.util.find_spec(module) is not None


def mpiexec():
    """MPICH's launcher: the one pip put next to this Python, else one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.access(beside, os.X_OK) else shutil.which("mpiexec")


# torchrun of this Python's torch (a `torchrun` on PATH may be another Python's).
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]

needs_torch = pytest.mark.skipif(not installed("torch"), reason=f"needs {TORCH}")
needs_mpi = pytest.mark.skipif(not installed("mpi4py") or mpiexec() is None,
                               reason=f"needs {MPI}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- a real redis-server --------------------------------------------------------

REDIS_SERVER = shutil.which("redis-server")


def redis_cmd(port, *args, password=None, db=0):
    """One command on a fresh connection (hiredis over a socket)."""
    import hiredis

    cmds = ([("AUTH", password)] if password else []) + ([("SELECT", db)] if db else [])
    cmds.append(args)
    reader = hiredis.Reader(notEnoughData=Ellipsis)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"".join(hiredis.pack_command(c) for c in cmds))
        replies = []
        while len(replies) < len(cmds):
            reply = reader.gets()
            if reply is Ellipsis:
                reader.feed(s.recv(65536))
            else:
                replies.append(reply)
    for r in replies:
        if isinstance(r, hiredis.ReplyError):
            raise r
    return replies[-1]


class RedisServer:
    """A redis-server of its own on a free loopback port, until stop()."""

    def __init__(self, tmp, *extra):
        for _ in range(3):  # the free port may be taken before redis binds it
            self.port = free_port()
            self.proc = subprocess.Popen(
                [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port),
                 "--save", "", "--appendonly", "no", "--dir", str(tmp), *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                        return
                except OSError:
                    time.sleep(0.02)
            self.stop()
        raise RuntimeError("could not start redis-server")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
