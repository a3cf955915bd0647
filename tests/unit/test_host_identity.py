"""shm.host_identity() is read once per process (every rank thread of a
process would read the same file and link): what it returns is what a
fresh read returns, GLOOCY_HOST_ID still wins, and a forked child in
another network namespace reads its own."""

import ctypes
import os
import socket
import threading

import pytest

from gloocy.transport import shm

CLONE_NEWNET = 0x40000000


def fresh_identity():
    """The identity read by hand: host name, boot id, network namespace."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    return "/".join([socket.gethostname(), boot, os.readlink("/proc/self/ns/net")])


def test_the_cached_identity_is_a_fresh_read(monkeypatch):
    monkeypatch.delenv("GLOOCY_HOST_ID", raising=False)
    got = [None] * 16

    def ask(i):
        got[i] = shm.host_identity()
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [fresh_identity()] * 16
    assert shm.host_identity() == fresh_identity()


def test_gloocy_host_id_wins_over_the_cache(monkeypatch):
    monkeypatch.delenv("GLOOCY_HOST_ID", raising=False)
    shm.host_identity()                       # (cached)
    monkeypatch.setenv("GLOOCY_HOST_ID", "node-17")
    assert shm.host_identity() == "node-17"
    monkeypatch.delenv("GLOOCY_HOST_ID")
    assert shm.host_identity() == fresh_identity()


def test_a_forked_child_in_another_namespace_reads_its_own(monkeypatch):
    monkeypatch.delenv("GLOOCY_HOST_ID", raising=False)
    ours = shm.host_identity()                # cached in the parent
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                              # the child: a namespace of its own
        code = 3
        try:
            os.close(r)
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(CLONE_NEWNET) != 0:
                code = 2                      # not allowed here
            else:
                text = f"{shm.host_identity()}\n{fresh_identity()}"
                os.write(w, text.encode())
                code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 2:
        pytest.skip("unshare(CLONE_NEWNET) is not allowed here (needs root)")
    assert os.waitstatus_to_exitcode(status) == 0
    child_cached, child_fresh = text.split("\n")
    assert child_cached == child_fresh
    assert child_cached != ours               # another namespace: another host
