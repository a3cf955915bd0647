"""The listener's first two handshake steps in C (_tcp.Answerer, on a thread
of its own): it answers a HELLO with handshake.py's challenge, checks the
dialer's proof, counts the dial as coming until it is judged, and hands
only proven dials (or the ones given up after their HELLO) to Python;
strangers are closed unseen. The oracle for the MACs is Python's hmac;
the lazy connections made through it are checked against NumPy, with
and without it (the all-Python listener stays for machines without
libcrypto)."""

import hashlib
import hmac
import os
import select
import socket
import struct

import numpy as np
import pytest

import gloocy
from gloocy.testing import World
from gloocy.transport import _tcp
from gloocy.transport.listener import Listener

pytestmark = pytest.mark.skipif(not _tcp.have_c_hmac,
                                reason="no libcrypto could be opened: no Answerer")

HELLO = struct.Struct("<8sIiiI16s32s")    # handshake.py's wire, written out
SECRET, JOB, SIZE = b"s" * 32, "answered", 4
TAG = hashlib.sha256(JOB.encode()).digest()[:16]


@pytest.fixture
def answerer():
    """An Answerer on a loopback socket for rank 1 of a job of SIZE ranks."""
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    a = _tcp.Answerer(server.fileno(), TAG, 10.0)
    a.register(1, SECRET, SIZE, 10.0)
    yield a, server.getsockname()[1]
    a.close()
    server.close()


def hello(peer=0, wanted=1, size=SIZE, tag=TAG, magic=b"GLCYHELO"):
    return HELLO.pack(magic, 1, peer, wanted, size, tag, os.urandom(32))


def dial(port, message):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(message)
    return s


def recv_exact(s, n):
    got = b""
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            return got
        got += chunk
    return got


def events(a, timeout=10.0):
    assert select.select([a.event_fd], [], [], timeout)[0], "no event came"
    return a.take()


def test_a_dial_is_challenged_counted_coming_and_handed_over_once_proven(answerer):
    a, port = answerer
    h = hello()
    s = dial(port, h)
    try:
        answer = recv_exact(s, 64)
        nonce, mac = answer[:32], answer[32:]
        assert mac == hmac.digest(SECRET, b"acceptor" + h + nonce, "sha256")
        assert a.coming(1, 0) and not a.coming(1, 2) and not a.coming(2, 0)
        s.sendall(hmac.digest(SECRET, b"connector" + h + nonce, "sha256"))
        [(kind, fd, wanted, peer, address)] = events(a)
        assert (kind, wanted, peer) == ("proven", 1, 0)
        assert address == "127.0.0.1:%d" % s.getsockname()[1]
        assert a.coming(1, 0)             # until the verdict
        a.judged(1, 0)
        assert not a.coming(1, 0)
        os.write(fd, b"ok")               # the proven dial's fd is ours now
        assert recv_exact(s, 2) == b"ok"
        os.close(fd)
    finally:
        s.close()


def test_a_wrong_proof_is_dropped_and_no_longer_coming(answerer):
    a, port = answerer
    s = dial(port, hello())
    try:
        assert len(recv_exact(s, 64)) == 64
        assert a.coming(1, 0)
        s.sendall(b"\0" * 32)
        [(kind, fd, wanted, peer, _)] = events(a)
        assert (kind, fd, wanted, peer) == ("given up", -1, 1, 0)
        assert not a.coming(1, 0)
        assert recv_exact(s, 1) == b""    # closed on the dialer
    finally:
        s.close()


@pytest.mark.parametrize("bad", [
    dict(wanted=2),                       # no rank 2 here
    dict(tag=b"x" * 16),                  # another job
    dict(size=SIZE + 1),                  # another size
    dict(peer=1),                         # itself
    dict(peer=SIZE),                      # no such rank
    dict(magic=b"GLCYHELX"),              # not a HELLO
])
def test_a_strangers_hello_is_closed_unanswered_and_unseen(answerer, bad):
    a, port = answerer
    s = dial(port, hello(**bad))
    try:
        assert recv_exact(s, 64) == b""   # closed, no challenge
        assert not a.coming(1, 0)
        assert not select.select([a.event_fd], [], [], 0.2)[0]
        assert a.take() == []
    finally:
        s.close()


def test_a_dial_hanging_up_after_its_hello_is_given_up(answerer):
    a, port = answerer
    s = dial(port, hello(peer=3))
    assert len(recv_exact(s, 64)) == 64
    assert a.coming(1, 3)
    s.close()
    [(kind, _, wanted, peer, _)] = events(a)
    assert (kind, wanted, peer) == ("given up", 1, 3)
    assert not a.coming(1, 3)


@pytest.mark.parametrize("in_c", [True, False])
def test_lazy_connections_through_either_listener(monkeypatch, in_c):
    monkeypatch.setattr(Listener, "in_c", in_c)
    size = 9
    data = np.random.default_rng(19).normal(size=(size, 33))

    def run(comm):
        comm.Barrier()
        x = data[comm.Get_rank()].copy()
        comm.Allreduce(gloocy.IN_PLACE, x)
        listener = comm._ctx.links.connector.listener
        return x, listener.answerer is not None

    with World(size, transport="tcp", timeout=60.0) as w:
        results = w.run(run)
    for x, answered_in_c in results:
        np.testing.assert_allclose(x, data.sum(axis=0))
        assert answered_in_c == in_c
