"""A mixed world across real network namespaces standing in for hosts:
`auto` picks shared memory between the ranks of one namespace and ibverbs
(the libibverbs stand-in, tests/ibmock) between namespaces, after the TCP
handshake crossed the namespaces' bridge."""

import os
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import ibmock                                   # noqa: E402
from test_multihost import hosts, pytestmark as _needs_root   # noqa: E402,F401

MISSING = ibmock.missing()
pytestmark = [_needs_root, pytest.mark.skipif(
    bool(MISSING), reason=f"the ibverbs stand-in cannot be built here: {MISSING}")]

PROGRAM = textwrap.dedent("""
    import numpy as np
    from gloocy import MPI
    comm = MPI.COMM_WORLD
    x = np.arange(300_000, dtype=np.float64) + comm.rank
    comm.Allreduce(MPI.IN_PLACE, x)
    n = comm.size
    ok = bool(np.array_equal(x, n * np.arange(300_000.0) + n * (n - 1) / 2))
    for k in range(1, n):                 # every pair, connected on first use
        got = comm.sendrecv(comm.rank, dest=(comm.rank + k) % n,
                            source=(comm.rank - k) % n)
        ok = ok and got == (comm.rank - k) % n
    kinds = [type(p).__name__ if p is not None else "-" for p in comm._ctx.links.pairs]
    print(comm.rank, ok, ",".join(kinds), flush=True)
""")


def test_shared_memory_within_a_host_ibverbs_across(hosts, tmp_path):
    tag, names, addrs, _ = hosts
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    env = {**os.environ, **ibmock.session_env(), "GLOOCY_SECRET": "cd" * 16,
           "GLOOCY_TRANSPORT": "auto"}
    procs = [subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "gloocy.run",
         "--nnodes", "2", "--node-rank", str(k), "--store", f"{addrs[0]}:29571",
         "-n", "2", sys.executable, str(prog)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for k, ns in enumerate(names)]
    lines = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=90)
            assert p.returncode == 0, err.decode()[-3000:]
            lines += out.decode().split("\n")
    finally:
        for p in procs:
            p.kill()
    got = sorted(line.split("] ", 1)[1] for line in lines if line.strip())
    host = {0: 0, 1: 0, 2: 1, 3: 1}            # --node-rank k holds ranks 2k, 2k+1
    want = sorted(f"{r} True " + ",".join(
        "-" if p == r else "ShmPair" if host[p] == host[r] else "IbvPair"
        for p in range(4)) for r in range(4))
    assert got == want
