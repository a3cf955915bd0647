"""The dialer's side of the handshake in C without the GIL (_tcp.DialAuth,
HMAC by libcrypto: _hmac.pxi): its HMAC-SHA-256 against Python's hmac module, and its steps
against a listener played by hand over a real socket pair."""

import errno
import hmac
import os
import socket
import threading
import time

import pytest

from gloocy.transport import _tcp

SECRET = b"job-secret" * 4
HELLO = os.urandom(88)


@pytest.mark.parametrize("key_len", [0, 1, 32, 63, 64, 65, 200])
def test_hmac_matches_pythons(key_len):
    if not _tcp.have_c_hmac:
        pytest.skip("no libcrypto could be opened: the dial uses Python's hmac")
    for data_len in (0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 1000):
        key, data = os.urandom(key_len), os.urandom(data_len)
        assert _tcp.hmac_sha256_now(key, data) == hmac.digest(key, data, "sha256")


def acceptor_proof(secret, nonce):
    return hmac.digest(secret, b"acceptor" + HELLO + nonce, "sha256")


def recv_all(sock, n):
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        assert chunk, "closed early"
        got += chunk
    return got


def run_to_end(auth, within=10.0):
    until = time.monotonic() + within
    while time.monotonic() < until:
        done = auth.run(0.5)
        if done:
            return done
    raise AssertionError("DialAuth did not finish")


@pytest.mark.parametrize("pieces", [1, 3])
def test_an_honest_listener_gets_our_proof_and_after(pieces):
    ours, theirs = socket.socketpair()
    nonce = os.urandom(32)
    heard = {}

    def listener():
        reply = nonce + acceptor_proof(SECRET, nonce)
        step = -(-len(reply) // pieces)
        for i in range(0, len(reply), step):       # (in pieces, with pauses)
            theirs.sendall(reply[i:i + step])
            time.sleep(0.02)
        heard["proof"] = recv_all(theirs, 32)
        heard["after"] = recv_all(theirs, 5)
        theirs.sendall(b"\x01")
    t = threading.Thread(target=listener)
    t.start()
    auth = _tcp.DialAuth(ours.fileno(), SECRET, HELLO, b"hosts")
    assert run_to_end(auth) == 1
    t.join()
    assert auth.authentic and auth.verdict == 1
    assert heard["proof"] == hmac.digest(SECRET, b"connector" + HELLO + nonce, "sha256")
    assert heard["after"] == b"hosts"
    ours.close()
    theirs.close()


def test_a_listener_without_the_secret_is_found_out_and_told_nothing():
    ours, theirs = socket.socketpair()
    nonce = os.urandom(32)
    theirs.sendall(nonce + acceptor_proof(b"another secret", nonce))
    auth = _tcp.DialAuth(ours.fileno(), SECRET, HELLO, b"hosts")
    assert run_to_end(auth) == 1
    assert not auth.authentic and auth.verdict == -1
    theirs.setblocking(False)
    with pytest.raises(BlockingIOError):      # no proof was sent
        theirs.recv(1)
    ours.close()
    theirs.close()


def test_a_listener_that_hangs_up_is_told_apart_from_a_silent_one():
    ours, theirs = socket.socketpair()
    auth = _tcp.DialAuth(ours.fileno(), SECRET, HELLO)
    began = time.monotonic()
    assert auth.run(0.1) == 0                 # silent: not yet, after the slice
    assert time.monotonic() - began >= 0.09
    theirs.sendall(os.urandom(10))
    theirs.close()
    assert auth.run(5.0) == -1                # then gone mid-challenge
    ours.close()


def test_a_failed_connection_is_an_oserror():
    ours, theirs = socket.socketpair()
    nonce = os.urandom(32)
    theirs.sendall(nonce + acceptor_proof(SECRET, nonce))
    theirs.close()                            # our proof goes to a closed end
    auth = _tcp.DialAuth(ours.fileno(), SECRET, HELLO, b"x" * 4096)
    with pytest.raises(OSError):
        for _ in range(20):
            assert auth.run(0.5) != 1
    ours.close()


def dial_a_listener_saying(verdict):
    """handshake.dial_fd (rank 0 dialing rank 1) against a listener played
    by hand that authenticates, then answers `verdict`."""
    from gloocy.transport import handshake
    server = socket.create_server(("127.0.0.1", 0))

    def listener():
        conn, _ = server.accept()
        with conn:
            hello = recv_all(conn, handshake.HELLO_BYTES)
            nonce = os.urandom(32)
            conn.sendall(nonce + hmac.digest(SECRET, b"acceptor" + hello + nonce,
                                             "sha256"))
            recv_all(conn, 32)
            conn.sendall(verdict)
            conn.shutdown(socket.SHUT_WR)
            conn.recv(1)                  # (till the dialer closes)
    t = threading.Thread(target=listener)
    t.start()
    try:
        return handshake.dial_fd(server.getsockname(), SECRET, 0, 1, 2,
                                 handshake.job_tag("j"), time.monotonic() + 20,
                                 refusable=True)
    finally:
        t.join()
        server.close()


@pytest.mark.parametrize("err, says", [(errno.EMFILE, "ulimit -n"),
                                       (errno.ENFILE, "system-wide")])
def test_a_listener_out_of_fds_is_named_by_the_dialer(err, says):
    from gloocy.errors import RendezvousError
    from gloocy.transport.handshake import OUT_OF_FDS
    with pytest.raises(RendezvousError, match="rank 1") as e:
        dial_a_listener_saying(OUT_OF_FDS[err])
    assert "out of file descriptors" in str(e.value) and says in str(e.value)


def test_an_unknown_verdict_is_a_protocol_error():
    from gloocy.errors import ProtocolError, RendezvousError
    with pytest.raises(ProtocolError, match="unknown verdict") as e:
        dial_a_listener_saying(b"\x07")
    assert not isinstance(e.value, RendezvousError)


def test_a_refusal_returns_none():
    assert dial_a_listener_saying(b"\x02") is None
