"""The libibverbs stand-in (tests/ibmock) itself, checked against what an
HCA does, by a C program compiled against the real <infiniband/verbs.h>:
its inline ibv_post_send/ibv_post_recv/ibv_poll_cq dispatch into the
stand-in exactly as gloocy's calls through context->ops do. The QP state
machine, SEND(_WITH_IMM), RDMA WRITE(_WITH_IMM) and READ, the completion
channel's fd, and the failures: remote access (read-only region, out of
bounds, a QP without remote access), a bad lkey, flushes after an error,
receiver-not-ready with a bounded and an unbounded rnr_retry."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ibmock                                  # noqa: E402

MISSING = ibmock.missing()


@pytest.mark.skipif(bool(MISSING), reason=f"the stand-in cannot be built: {MISSING}")
def test_the_stand_in_behaves_like_an_hca(tmp_path):
    lib = ibmock.build(tmp_path)
    exe = tmp_path / "selftest"
    subprocess.run([os.environ.get("CC", "cc"), "-Wall", "-Werror", "-o", str(exe),
                    str(ibmock.HERE / "selftest.c"), f"-L{lib}", "-l:libibverbs.so.1"],
                   check=True, capture_output=True, text=True)
    sock = tmp_path / "sock"
    sock.mkdir()
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **ibmock.env(lib, sock)})
    assert run.returncode == 0 and run.stdout.rstrip().endswith("0 failures"), \
        run.stdout + run.stderr
    assert run.stdout.count("\nok ") >= 20
    assert not list(sock.iterdir())            # the socket file is gone with the device
