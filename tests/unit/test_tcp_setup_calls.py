"""The set-up's non-blocking socket calls that keep the GIL (_tcp.pyx:
connect_now, accept_now, recv_now, send_now, wait_fd, connect_error),
checked against Python's own sockets at the other end, and tcp_pair made
from a bare fd."""

import socket
import threading
import time

import pytest

from gloocy.transport import _tcp


@pytest.fixture(params=["127.0.0.1", "::1"])
def server(request):
    family = socket.AF_INET6 if ":" in request.param else socket.AF_INET
    try:
        s = socket.create_server((request.param, 0), family=family)
    except OSError as e:
        pytest.skip(f"cannot listen on {request.param}: {e}")
    s.setblocking(False)
    with s:
        yield s


def test_a_dial_and_an_accept_carry_bytes_both_ways(server):
    host, port = server.getsockname()[:2]
    fd = _tcp.connect_now(host, port)
    try:
        assert _tcp.wait_fd(fd, True, 5.0)
        assert _tcp.connect_error(fd) is None
        assert _tcp.send_now(fd, b"hello") == 5
        assert _tcp.wait_fd(server.fileno(), False, 5.0)
        got = _tcp.accept_now(server.fileno())
        assert got is not None
        theirs, address = got
        # the address is the dialer's own end, as its socket names it
        with socket.socket(fileno=_dup(fd)) as ours:
            h, p = ours.getsockname()[:2]
        assert address == (f"[{h}]:{p}" if ":" in h else f"{h}:{p}")
        assert _tcp.accept_now(server.fileno()) is None     # nothing more waits
        assert _tcp.wait_fd(theirs, False, 5.0)
        assert _tcp.recv_now(theirs, 100) == b"hello"
        assert _tcp.recv_now(theirs, 100) is None           # nothing yet
        assert _tcp.send_now(theirs, b"world!") == 6
        assert _tcp.wait_fd(fd, False, 5.0)
        assert _tcp.recv_now(fd, 3) == b"wor"               # at most n
        assert _tcp.recv_now(fd, 100) == b"ld!"
        _tcp.close_now(fd)
        fd = -1
        assert _tcp.wait_fd(theirs, False, 5.0)
        assert _tcp.recv_now(theirs, 10) == b""             # closed
        _tcp.close_now(theirs)
    finally:
        if fd >= 0:
            _tcp.close_now(fd)


def _dup(fd):
    import os
    return os.dup(fd)


def test_a_dial_to_a_closed_port_is_refused():
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    try:
        fd = _tcp.connect_now("127.0.0.1", port)
    except ConnectionRefusedError:
        return                            # refused at once: fine too
    try:
        assert _tcp.wait_fd(fd, True, 5.0)
        assert isinstance(_tcp.connect_error(fd), ConnectionRefusedError)
        with pytest.raises(OSError):
            _tcp.send_now(fd, b"x")
    finally:
        _tcp.close_now(fd)


def test_a_host_name_is_not_dialed():
    with pytest.raises(ValueError, match="not an IP address"):
        _tcp.connect_now("localhost", 1)


def test_wait_fd_waits_its_time_and_no_longer():
    a, b = socket.socketpair()
    with a, b:
        t0 = time.monotonic()
        assert not _tcp.wait_fd(a.fileno(), False, 0.2)
        assert time.monotonic() - t0 >= 0.19
        threading.Timer(0.1, b.send, (b"x",)).start()
        assert _tcp.wait_fd(a.fileno(), False, 30.0)


def test_send_now_sends_what_fits_and_no_more():
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        sent = 0
        while True:
            n = _tcp.send_now(a.fileno(), bytes(1 << 16))
            if n == 0:
                break
            sent += n
        assert sent > 0
        b.setblocking(False)
        got = 0
        while True:
            try:
                got += len(b.recv(1 << 20))
            except BlockingIOError:
                break
        assert got == sent


def test_tcp_pair_from_a_bare_fd_owns_it():
    with socket.create_server(("127.0.0.1", 0)) as s:
        c = socket.create_connection(s.getsockname())
        theirs, _ = s.accept()
    with c, theirs:
        pair = _tcp.tcp_pair(theirs.detach(), 0, 1, "x", dead_s=30)
        assert pair.peer == 1
        pair.close(False)
        c.settimeout(5)
        assert c.recv(1) == b""           # its fd is closed with it
