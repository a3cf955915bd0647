"""The process's listener for lazy connections (see lazy.py): one thread
answers every dial of a job's ranks living in the process, a step per
message, and hands each authenticated connection to the rank's Connector
(Connector.verdict, finish, arrive, hung_up).

Its socket calls keep the GIL (_tcp.pyx: accept_now, recv_now, send_now,
close_now, watch_now): it lets the GIL go only in epoll's wait, so a batch of ready
dials is answered in one hold of it, however many rank threads the
process has. Each dial is stepped as far as its bytes go at once (a HELLO
that came with the connection is answered as it is accepted).

A process out of file descriptors cannot accept: the dial would sit in the
backlog until the dialer's deadline. So the listener keeps one fd spare
(/dev/null, opened at start): when accept finds no free fd, it closes the
spare, takes the dial with it, authenticates it and refuses it with the
verdict "out of file descriptors" (handshake.OUT_OF_FDS), which the dialer
raises at once, naming our rank; once that dial is closed the spare is
opened again. Until then (or when the spare could not be had) accepting
pauses a moment: the dials wait in the backlog."""

import errno
import os
import select
import socket
import struct
import threading
import time
import weakref

from gloocy._quiet import start_quiet
from gloocy.errors import ProtocolError, RendezvousError
from gloocy.transport import handshake, shm
from gloocy.transport._tcp import (accept_now, close_now, recv_now, send_now, tcp_pair,
                                   watch_now)

__all__ = ["Listener"]

_RETELL_S = 0.002      # how soon the listener tells a busy rank of a pair again
# How long a dial may take to authenticate before the listener drops it,
# at least (the longest deadline of the job's ranks here, if longer). Long:
# a silent stranger costs an fd here, no thread, and delays nobody, while a
# rank's dial can be slow on a host loaded with thousands of ranks (dropped,
# its rank takes ours for dead, before its own deadline).
_ANSWER_S = 60.0
_PAUSE_S = 0.05        # out of fds, no spare: how long accepting pauses


class _Dial:
    """A dial the listener is answering: the handshake's bytes so far."""

    __slots__ = ("fd", "address", "deadline", "step", "need", "buf", "hello",
                 "nonce", "peer", "dialed", "connector", "willing", "local", "coming",
                 "no_fds")

    def __init__(self, fd, address, deadline):
        self.fd, self.address, self.deadline = fd, address, deadline
        self.step, self.need, self.buf = _Listening.HELLO, handshake.HELLO_BYTES, b""
        self.dialed = None        # the Connector of the rank dialed
        self.connector = None     # ... once it accepted: errors are told to it
        self.willing = self.local = False   # the dialer takes shared memory; we share it
        self.coming = False       # told to `dialed` as coming (Connector.dial_coming)
        self.no_fds = None        # errno: taken with the spare fd, to be refused


class _Listening:
    """The steps of a dial's handshake at the listener, each waiting for
    `need` bytes (handshake.py, then shm.local_peers's host ids)."""
    HELLO, PROOF, HOST, HOST_ID = range(4)


class Listener:
    """The process's listening socket for a job's lazy connections (one per
    job and bound address, shared by the job's ranks living in the process;
    a process in several jobs, e.g. worlds of thread ranks, has one each, so
    that a job's listener goes with it). One thread answers every dial at
    once, a step per message, without blocking (so a stranger that stays
    silent delays nobody, and no thread is made per dial): it authenticates
    the dialer, hands TCP pairs straight to their rank, and starts a thread
    only for shared-memory and ibverbs pairs, which take more messages.
    It also keeps the addresses of the job's ranks it learned (they never
    change within a job): the ranks of a process look each up once."""

    _lock = threading.Lock()
    _open = {}                    # (host, port, job tag) -> Listener

    @classmethod
    def get(cls, host, port, tag):
        with cls._lock:
            listener = cls._open.get((host, port, tag))
            if listener is None:
                listener = cls._open[(host, port, tag)] = cls(host, port, tag)
            listener.users += 1
            return listener

    def __init__(self, host, port, tag):
        self.key = (host, port, tag)
        self.users = 0
        self.ranks = {}           # (job tag, rank) -> weak reference to its Connector
        self.addresses = {}       # rank -> its address (bytes), as published
        self.untold = set()       # Links whose lock was held when a pair came
        self.answer_s = _ANSWER_S  # how long a dial may take to authenticate
        self.closing = False
        self.paused_until = None  # out of fds: accepting waits until then
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                self.sock.bind((host, port))
            except OSError as e:
                raise RendezvousError(f"cannot listen on {handshake.fmt((host, port))}: "
                                      f"{e.strerror}") from None
            self.sock.listen(4096)
            self.sock.setblocking(False)
        except BaseException:
            self.sock.close()
            raise
        self.address = handshake.fmt(self.sock.getsockname())
        self.spare = _open_spare()   # (the thread's: closed when it ends)
        self.thread = start_quiet(threading.Thread(
            target=self._serve, daemon=True, name=f"gloocy-listen-{self.address}"))

    def register(self, tag, rank, connector):
        with self._lock:
            if (tag, rank) in self.ranks:
                raise RendezvousError(f"rank {rank}: another rank {rank} of this "
                                      "job lives in this process")
            self.ranks[tag, rank] = weakref.ref(connector)
            self.answer_s = max(self.answer_s, connector.timeout)

    def serves(self, tag, rank):
        """Whether rank `rank` of job `tag` is still open in this process."""
        with self._lock:
            return (tag, rank) in self.ranks

    def unregister(self, tag, rank):
        with self._lock:
            self.ranks.pop((tag, rank), None)
        self.release()

    def release(self):
        """One user (a Connector) fewer: the last one closes us."""
        with self._lock:
            self.users -= 1
            if self.users > 0:
                return
            del self._open[self.key]
        self.closing = True
        self.sock.shutdown(socket.SHUT_RDWR)   # wakes the thread's poll
        if self.thread is not threading.current_thread():   # (a finalizer may run there)
            self.thread.join()
        self.sock.close()

    def _serve(self):
        poller = select.epoll()
        dials = {}                # fd -> _Dial
        listen_fd = self.sock.fileno()
        poller.register(listen_fd, select.EPOLLIN)
        try:
            while not self.closing:
                soonest = min((d.deadline for d in dials.values()),
                              default=self.paused_until)
                if self.paused_until is not None:
                    soonest = min(soonest, self.paused_until)
                wait = 1.0 if soonest is None else max(0.0, soonest - time.monotonic())
                if self.untold:
                    wait = min(wait, _RETELL_S)
                for fd, _ in poller.poll(min(wait, 1.0)):
                    if fd == listen_fd:
                        self._accept(poller, dials)
                    elif fd in dials:
                        self._step(poller, dials, dials[fd])
                if self.untold:
                    self._tell()
                now = time.monotonic()
                for d in [d for d in dials.values() if d.deadline <= now]:
                    self._drop(poller, dials, d, None)
                if self.paused_until is not None and self.paused_until <= now:
                    self._resume(poller)
        finally:
            for d in list(dials.values()):
                self._drop(poller, dials, d, handshake.HungUp("we left"))
            poller.close()
            if self.spare is not None:
                os.close(self.spare)

    def _accept(self, poller, dials):
        listen_fd = self.sock.fileno()
        while not self.closing:
            no_fds = None
            try:
                got = accept_now(listen_fd)
            except OSError as e:
                if self.closing:
                    return
                if e.errno == errno.ECONNABORTED:
                    continue
                got = None
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    got, no_fds = self._accept_with_spare(), e.errno
                if got is None:
                    return self._pause(poller)
            if got is None:
                return
            d = _Dial(*got, time.monotonic() + self.answer_s)
            d.no_fds = no_fds
            dials[d.fd] = d
            watch_now(poller.fileno(), d.fd, True)
            self._step(poller, dials, d)      # its HELLO may be here already

    def _accept_with_spare(self):
        """accept() found no free fd: the waiting dial, taken with the spare
        fd (to be refused, telling why), or None (no spare, or another
        thread of the process took the freed fd first)."""
        if self.spare is None:
            return None
        os.close(self.spare)
        self.spare = None
        try:
            got = accept_now(self.sock.fileno())
        except OSError:
            got = None
        if got is None:
            self.spare = _open_spare()
        return got

    def _pause(self, poller):
        """No fd to accept with: stop watching the listening socket (it
        stays ready, and would wake us at once) for _PAUSE_S, or until the
        dial holding the spare's fd is closed."""
        if self.paused_until is None:
            poller.modify(self.sock.fileno(), 0)
        self.paused_until = time.monotonic() + _PAUSE_S

    def _resume(self, poller):
        if self.spare is None:
            self.spare = _open_spare()
        self.paused_until = None
        poller.modify(self.sock.fileno(), select.EPOLLIN)

    def _close(self, d):
        """Close dial `d`'s fd; if it was the spare's, the spare comes back."""
        close_now(d.fd)
        if d.no_fds is not None:
            d.no_fds = None
            self.spare = self.spare if self.spare is not None else _open_spare()
            if self.paused_until is not None:
                self.paused_until = 0.0     # (the serving loop resumes)

    def _drop(self, poller, dials, d, why):
        """Give up a dial: a stranger's is closed; one we accepted is told
        to its rank, as the peer hanging up."""
        if dials.pop(d.fd, None) is not None:
            watch_now(poller.fileno(), d.fd, False)
        self._close(d)
        if d.coming:              # (see Connector.pair)
            d.coming = False
            d.dialed.dial_coming(d.peer, -1)
        c, d.connector = d.connector, None
        if c is None:
            return
        if why is None:
            why = RendezvousError(f"rank {c.rank}: rank {d.peer} ({d.address}) did "
                                  "not finish connecting to us before the deadline")
        elif (not isinstance(why, (RendezvousError, ProtocolError))
              or isinstance(why, handshake.HungUp)):
            why = c.hung_up(d.peer, d.address, why)
        self._arrive(c, d.peer, why)    # (a refusal of shared memory is told as such)

    def _step(self, poller, dials, d):
        """Read what has come on dial `d`, answering each message complete."""
        while True:
            try:
                data = recv_now(d.fd, d.need - len(d.buf))
                if data is None:
                    return            # the rest later
                if not data:
                    raise handshake.HungUp("connection closed during the handshake")
            except (OSError, handshake.HungUp) as e:   # (a HungUp must not end us)
                return self._drop(poller, dials, d, e)
            d.buf += data
            if len(d.buf) < d.need:
                continue
            got, d.buf = d.buf, b""
            try:
                self._on(d, got)
            except (OSError, ProtocolError, RendezvousError, struct.error) as e:
                return self._drop(poller, dials, d, e)
            if d.step is None:        # done: the socket is its pair's, or closed
                del dials[d.fd]
                watch_now(poller.fileno(), d.fd, False)
                return self._hand_over(d)

    def _send(self, d, data):
        """Send a handshake message (a few bytes, on a connection whose peer
        reads: they fit its buffer at once, else it is broken)."""
        if send_now(d.fd, data) != len(data):
            raise handshake.HungUp("the dialer does not read")

    def _on(self, d, got):
        """The next message of dial `d` has come: answer it."""
        if d.step == _Listening.HELLO:
            d.peer, wanted, size, tag = handshake.parse_hello(got)
            with self._lock:
                ref = self.ranks.get((tag, wanted))
            connector = ref() if ref is not None else None
            if connector is None or size != connector.size or not (
                    0 <= d.peer < size and d.peer != wanted):
                raise ProtocolError("a dial for no rank of ours")
            d.hello, d.dialed = got, connector
            d.nonce, answer = handshake.challenge(connector.secret, got)
            self._send(d, answer)
            d.step, d.need = _Listening.PROOF, handshake.PROOF_BYTES
            if d.no_fds is None:      # (one we refuse is not coming)
                connector.dial_coming(d.peer, 1)    # (verdict or _drop ends it)
                d.coming = True
        elif d.step == _Listening.PROOF:
            connector = d.dialed
            handshake.check_proof(connector.secret, d.hello, d.nonce, got, d.peer)
            d.coming = False      # (the verdict ends it)
            if d.no_fds is not None:  # refused; our rank never knew of it
                return self._refuse(d, handshake.OUT_OF_FDS[d.no_fds])
            verdict = connector.verdict(d.peer)
            if not verdict:       # refused (it waits for our rank's dial) or left
                if verdict is False:
                    return self._refuse(d, handshake.REFUSE)
                d.step = None     # (_hand_over closes it)
                return
            d.connector = connector
            d.deadline = time.monotonic() + connector.timeout   # as the dialer's
            self._send(d, handshake.ACCEPT + connector.host_frame)
            d.step, d.need = _Listening.HOST, shm.ID_HEADER_BYTES
        elif d.step == _Listening.HOST:
            d.willing, n = shm.id_length(got, d.connector.rank, d.peer, d.address)
            d.step, d.need = _Listening.HOST_ID, n
            if n == 0:
                self._on(d, b"")
        else:
            c = d.connector
            mode = "tcp" if c.mode == "ibverbs" else c.mode
            d.local = shm.is_local(c.host_frame, got, d.willing, mode, c.rank,
                                   d.peer, d.address)
            d.step = None

    def _refuse(self, d, verdict):
        """Answer dial `d` with a refusal (`verdict`); _hand_over closes it."""
        self._send(d, verdict)
        for _ in range(128):      # its host id, sent with the proof: read, lest
            if not recv_now(d.fd, 512):   # closing reset the connection
                break
        d.step = None

    def _hand_over(self, d):
        """A dial answered to the end: its pair to its rank (TCP at once;
        shared memory and ibverbs in a thread, as they take more messages)."""
        c, local = d.connector, d.local
        if c is None:             # refused
            self._close(d)
            return
        d.connector = None
        if local or c.mode in ("auto", "ibverbs"):
            sock = socket.socket(fileno=d.fd)
            start_quiet(threading.Thread(target=c.finish, daemon=True,
                                         args=(sock, d.peer, d.address, local)))
            return
        try:
            got = tcp_pair(d.fd, c.rank, d.peer, d.address, dead_s=c.dead_s)
        except OSError as e:
            close_now(d.fd)
            got = c.hung_up(d.peer, d.address, e)
        self._arrive(c, d.peer, got)

    def _arrive(self, connector, peer, got):
        links = connector.arrive(peer, got, wait=False)
        if links is not None:
            self.untold.add(links)

    def _tell(self):
        """Tell the links whose lock was held of their arrivals, again."""
        for links in list(self.untold):
            if links.closed or links.note_arrival(False):
                self.untold.discard(links)


def _open_spare():
    """An fd to keep spare (see the module's doc), or None if none is free."""
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
