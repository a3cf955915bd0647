"""Connection set-up: the authenticated handshake between two ranks, and
the full mesh of them (every rank connects to the lower ones and accepts
the higher ones).
"""

import errno
import hashlib
import hmac
import resource
import socket
import struct
import threading
import time

from gloocy.errors import ProtocolError, RendezvousError
from gloocy.transport import _tcp

__all__ = ["authenticate", "challenge", "check_proof", "connect_sockets", "dial",
           "dial_fd", "fmt", "HungUp", "job_tag", "out_of_fds", "parse_addr",
           "parse_hello", "peer_out_of_fds", "read_fd", "read_hello", "recv_exact",
           "send_fd"]

# Every rank listens on an ephemeral port of its interface and publishes
# host:port in the store; rank r connects to every lower rank and accepts the
# higher ones. The handshake proves both ends know the job secret:
#
#   connector -> HELLO: magic, version, its rank, wanted rank, size, job tag, nonce_c
#   acceptor  -> nonce_a, HMAC(secret, "acceptor"  | HELLO | nonce_a)
#   connector -> HMAC(secret, "connector" | HELLO | nonce_a)
#   acceptor  -> b"\x01" (accepted), or b"\x02" (refused: a lazy connection
#                the acceptor's rank is making the other way, see lazy.py),
#                or b"\x03" / b"\x04" (refused: the acceptor's process / its
#                host is out of file descriptors; it took the connection
#                with the one it keeps spare, see listener.py)
#
# Then both ends tell their host id (shm.local_peers). A lazy connector
# sends its id right behind its proof, in the same write, without waiting
# for the verdict; the acceptor sends its id right behind b"\x01". (So a
# listener answers a dial in two steps; it reads what follows a proof it
# refuses before it closes, lest the kernel reset the connection.)
#
# A connection that fails any step is closed; the job goes on without it.

_HELLO = struct.Struct("<8sIiiI16s32s")
_HELLO_MAGIC = b"GLCYHELO"
_HELLO_VERSION = 1
HANDSHAKE_TIMEOUT = 5.0       # per incoming connection: a stranger can't stall us long


class HungUp(ProtocolError):
    """The listener hung up (or reset) during the handshake: with lazy
    connections, where a listener lives as long as its process, the rank
    dialed has left or died."""


def _mac(secret, label, *parts):
    # (by libcrypto keeping the GIL, where it could be opened: see _hmac.pxi)
    data = label + b"".join(parts)
    return _tcp.hmac_sha256_now(secret, data) or hmac.digest(secret, data, "sha256")


def recv_exact(sock, n, what="the handshake"):
    """Exactly n bytes from a blocking socket; HungUp (a ProtocolError) if
    it closes."""
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise HungUp(f"connection closed while reading {what}")
        data += chunk
    return bytes(data)


def job_tag(job):
    return hashlib.sha256(job.encode()).digest()[:16]


HELLO_BYTES = _HELLO.size
PROOF_BYTES = 32
ACCEPT, REFUSE = b"\x01", b"\x02"   # the acceptor's last word (see above)
OUT_OF_FDS = {errno.EMFILE: b"\x03", errno.ENFILE: b"\x04"}   # ... or this


def parse_hello(hello):
    """The fields of a HELLO's bytes: (peer, wanted rank, size, job tag);
    ProtocolError if it is not one."""
    magic, version, peer, wanted, peer_size, tag, _nonce = _HELLO.unpack(hello)
    if magic != _HELLO_MAGIC or version != _HELLO_VERSION:
        raise ProtocolError("not a gloocy handshake")
    return peer, wanted, peer_size, tag


def read_hello(sock):
    """An incoming HELLO: (its bytes, peer, wanted rank, size, job tag)."""
    hello = recv_exact(sock, _HELLO.size)
    return (hello, *parse_hello(hello))


def challenge(secret, hello):
    """The acceptor's first answer to `hello`: (our nonce, the bytes to
    send: the nonce and our proof that we know the secret)."""
    nonce = _tcp.random_now(32)      # (keeps the GIL: see _tcp.pyx)
    return nonce, nonce + _mac(secret, b"acceptor", hello, nonce)


def check_proof(secret, hello, nonce, proof, peer):
    """The dialer's proof that it knows the secret; ProtocolError if wrong."""
    if not hmac.compare_digest(proof, _mac(secret, b"connector", hello, nonce)):
        raise ProtocolError(f"rank {peer} failed authentication")


def authenticate(sock, secret, hello, peer):
    """The acceptor's half: prove we know the secret, check the dialer's
    proof (ProtocolError if wrong). The verdict byte is the caller's."""
    nonce, answer = challenge(secret, hello)
    sock.sendall(answer)
    check_proof(secret, hello, nonce, recv_exact(sock, PROOF_BYTES), peer)


def _accept_one(sock, secret, rank, size, job):
    """Authenticate an incoming connection; returns the peer's rank."""
    hello, peer, wanted, peer_size, tag = read_hello(sock)
    if wanted != rank or peer_size != size or tag != job_tag(job):
        raise ProtocolError(f"handshake for another job or rank ({peer}->{wanted})")
    if not rank < peer < size:
        raise ProtocolError(f"rank {peer} should not connect to rank {rank}")
    authenticate(sock, secret, hello, peer)
    sock.sendall(ACCEPT)
    return peer


def dial(addr, secret, rank, peer, size, job, deadline, *, refusable=False):
    """Connect to `peer` at (host, port) and authenticate both ways: a
    blocking socket. With `refusable` (lazy connections: the listener is up
    for the whole job), ConnectionRefusedError is raised at once, and a
    refusal returns None."""
    fd = dial_fd(addr, secret, rank, peer, size, job_tag(job), deadline,
                 refusable=refusable)
    if fd is None:
        return None
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    return sock


def out_of_fds(e):
    """Why a socket could not be made, when it is the fd limit."""
    if e.errno == errno.ENFILE:
        return "the system is out of file descriptors (ENFILE)"
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return (f"this process is out of file descriptors (its open-file limit "
            f"is {soft}: raise it with ulimit -n, or connect fewer peers)")


def peer_out_of_fds(peer, err):
    """Why `peer` could not take a connection, when it had no fd for it
    (`err`: EMFILE or ENFILE, its errno); None for any other errno."""
    if err == errno.EMFILE:
        return (f"rank {peer} is out of file descriptors: its process is at its "
                f"open-file limit (raise it with ulimit -n where rank {peer} "
                f"runs, or connect fewer peers)")
    if err == errno.ENFILE:
        return (f"rank {peer}'s host is out of file descriptors (ENFILE: the "
                f"system-wide limit, not ulimit -n)")
    return None


def dial_fd(addr, secret, rank, peer, size, tag, deadline, *, refusable=False,
            after_proof=b""):
    """dial()'s work, on a non-blocking fd (returned; None: refused) of a
    job of tag `tag`; `after_proof` is sent with our proof (our host id).
    Its socket calls keep the GIL (_tcp.pyx's connect_now...); it waits
    without the GIL only for the listener's answers."""
    host, port = addr[:2]
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:               # a host name, not an address: resolve it
        host, port = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][:2]
    hello = _HELLO.pack(_HELLO_MAGIC, _HELLO_VERSION, rank, peer, size, tag,
                        _tcp.random_now(32))
    while True:
        fd = None
        try:
            fd = _tcp.connect_now(host, port)
            send_fd(fd, hello, deadline, connecting=True)
            break
        except ConnectionRefusedError:
            if refusable:
                if fd is not None:
                    _tcp.close_now(fd)
                raise
        except TimeoutError:
            _tcp.close_now(fd)
            raise RendezvousError(f"rank {rank}: could not connect to rank "
                                  f"{peer} at {fmt(addr)} before the deadline") from None
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE):    # no retry frees one
                if fd is not None:
                    _tcp.close_now(fd)
                raise RendezvousError(f"rank {rank}: could not connect to rank "
                                      f"{peer}: {out_of_fds(e)}") from None
        except BaseException:
            if fd is not None:
                _tcp.close_now(fd)
            raise
        if fd is not None:
            _tcp.close_now(fd)
        left = deadline - time.monotonic()
        if left <= 0:
            raise RendezvousError(f"rank {rank}: could not connect to rank "
                                  f"{peer} at {fmt(addr)} before the deadline")
        time.sleep(min(0.05, left))
    who = f"rank {rank}: the process at {fmt(addr)}"
    # The rest without the GIL, in one stretch (the HMACs in C): the
    # listener's nonce and proof, ours, its verdict.
    auth = _tcp.DialAuth(fd, bytes(secret), hello, bytes(after_proof))
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("timed out")
            done = auth.run(min(left, _SLICE_S))
            if done < 0:
                raise HungUp("connection closed while reading the handshake")
            if done:
                break
        authentic = auth.authentic
        accepted = authentic and auth.verdict == ACCEPT[0]
        refused = authentic and refusable and auth.verdict == REFUSE[0]
    except TimeoutError:              # a listener that stays silent
        _tcp.close_now(fd)
        raise RendezvousError(f"{who} did not finish the handshake as rank "
                              f"{peer} before the deadline") from None
    except (OSError, ProtocolError) as e:   # it hung up or reset
        _tcp.close_now(fd)
        raise HungUp(f"{who} broke off the handshake as rank {peer} "
                     f"({e})") from None
    except BaseException:
        _tcp.close_now(fd)
        raise
    if refused:
        _tcp.close_now(fd)
        return None
    if not accepted:
        _tcp.close_now(fd)
        no_fds = authentic and peer_out_of_fds(
            peer, {v[0]: e for e, v in OUT_OF_FDS.items()}.get(auth.verdict))
        if no_fds:
            raise RendezvousError(f"rank {rank}: could not connect to rank {peer} "
                                  f"at {fmt(addr)}: {no_fds}")
        raise ProtocolError(f"{who} failed authentication as rank {peer}"
                            if not authentic else
                            f"{who} refused the handshake as rank {peer}"
                            if auth.verdict == REFUSE[0] else
                            f"{who} answered the handshake as rank {peer} with "
                            f"an unknown verdict ({auth.verdict})")
    return fd


_SLICE_S = 0.5     # a wait's longest sleep: signal handlers run in between
_FAILED_EVERY_S = 1.0   # how often connect_sockets asks whether the job failed


def _wait(fd, out, deadline):
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        if _tcp.wait_fd(fd, out, min(left, _SLICE_S)):
            return


def read_fd(fd, n, deadline, what="the handshake"):
    """Exactly n bytes from non-blocking `fd` by `deadline` (TimeoutError);
    HungUp if it closes, OSError if it fails."""
    data = b""
    while True:
        got = _tcp.recv_now(fd, n - len(data))
        if got is None:
            _wait(fd, False, deadline)
        elif not got:
            raise HungUp(f"connection closed while reading {what}")
        else:
            data += got
            if len(data) == n:
                return data


def send_fd(fd, data, deadline, *, connecting=False):
    """All of `data` on non-blocking `fd` by `deadline` (TimeoutError).
    `connecting`: the connection may not be made yet (its error is raised
    as it comes: ConnectionRefusedError...)."""
    view = memoryview(data)
    while view:
        sent = _tcp.send_now(fd, view)
        view = view[sent:]
        if view:
            _wait(fd, True, deadline)
            if connecting:
                err = _tcp.connect_error(fd)
                if err is not None:
                    raise err


def fmt(addr):
    host, port = addr[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_addr(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def connect_sockets(rank, size, secret, publish, lookup, *,
                    host="127.0.0.1", port=0, advertise=None, job="",
                    timeout=300.0, failed=None):
    """Connect this rank to every other one; returns {peer: (socket,
    "host:port")} of authenticated blocking sockets. We listen on host:port (port 0: any
    free one) and `publish(address)` makes "host:port", or `advertise` when
    given (a forwarded address), known to the others (a store, an
    allgather...); `lookup(peer, timeout)` returns a peer's. `failed()`, if
    given, is asked every _FAILED_EVERY_S while we wait for the higher
    ranks, and when a dial fails: the error to raise (a rank cannot join)
    or None."""
    import queue                  # (eager set-up only)
    failed = failed or (lambda: None)
    deadline = time.monotonic() + timeout
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((host, port))
        except OSError as e:
            raise RendezvousError(f"rank {rank}: cannot listen on "
                                  f"{fmt((host, port))}: {e.strerror}") from None
        listener.listen(max(16, size))
        publish(advertise or fmt(listener.getsockname()))
    except BaseException:
        listener.close()
        raise

    socks = {}
    failure = []
    stop = threading.Event()      # we raise: the acceptor stops

    def accept_higher():
        # Each incoming connection is authenticated in a thread of its own,
        # so a stranger that connects and stays silent delays nobody.
        missing = set(range(rank + 1, size))
        done = queue.SimpleQueue()

        def handshake(sock, addr):
            try:
                sock.settimeout(HANDSHAKE_TIMEOUT)
                done.put((_accept_one(sock, secret, rank, size, job), sock,
                          fmt(addr)))
            except (OSError, ProtocolError, struct.error):
                sock.close()              # a stranger; the job goes on
                done.put(None)

        in_flight = 0                     # accepted, handshake not finished
        try:
            while missing and not stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RendezvousError(
                        f"rank {rank}: rank(s) {sorted(missing)} did not "
                        f"connect before the deadline")
                listener.settimeout(min(left, 0.05))
                try:
                    sock, addr = listener.accept()
                    threading.Thread(target=handshake, args=(sock, addr),
                                     daemon=True).start()
                    in_flight += 1
                except socket.timeout:
                    pass
                except OSError as e:
                    if e.errno not in (errno.EMFILE, errno.ENFILE):
                        raise
                    raise RendezvousError(
                        f"rank {rank}: could not take the connections of rank(s) "
                        f"{sorted(missing)}: {out_of_fds(e)}") from None
                # Once every missing peer has connected, wait for their
                # handshakes rather than for the next accept's timeout.
                while in_flight and (in_flight >= len(missing) or not done.empty()):
                    try:
                        item = done.get(timeout=min(left, 0.05))
                    except queue.Empty:
                        break
                    in_flight -= 1
                    if item is None:
                        continue
                    peer, sock, address = item
                    if peer in missing:
                        missing.discard(peer)
                        socks[peer] = (sock, address)
                    else:
                        sock.close()      # a second claim to a rank
        except BaseException as e:
            failure.append(e)

    acceptor = threading.Thread(target=accept_higher, daemon=True,
                                name=f"gloocy-accept-{rank}")
    acceptor.start()
    try:
        for peer in range(rank):
            try:
                addr = parse_addr(lookup(peer, max(deadline - time.monotonic(),
                                                    0.001)))
                socks[peer] = (dial(addr, secret, rank, peer, size, job,
                                    deadline), fmt(addr))
            except (OSError, ProtocolError, RendezvousError):
                why = failed()
                if why is not None:       # the cause (a dial cut as its peer raised it)
                    raise why from None
                raise
        while acceptor.is_alive():
            acceptor.join(_FAILED_EVERY_S)
            why = failed() if acceptor.is_alive() else None
            if why is not None:
                raise why
        if failure:
            raise failure[0]
        return socks
    except BaseException:
        stop.set()
        acceptor.join()           # (then no socket is added behind our back)
        for sock, _ in socks.values():
            sock.close()
        raise
    finally:
        listener.close()
