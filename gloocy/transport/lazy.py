"""Lazy connections: a pair is connected when it is first used.

At start-up each rank only publishes its address and meets the others
through a handful of store operations (startup.py); every slot holds the
stand-in UNCONNECTED (_links.pxi) until its first send or receive, which
asks this rank's `Connector` for the real pair. The Connector dials the
peer, or takes the connection the peer dialed: every process has one
`Listener` (listener.py: a thread that accepts and authenticates, shared by
the ranks living in the process) that hands incoming connections to the
rank they are for.

When both ranks of a pair dial each other at once, the lower rank's dial
wins: a listener refuses a dial from a higher rank while its own rank is
dialing that rank, and the refused dialer waits for the other connection,
which its own listener accepts. So a pair is connected once. Two ranks
living in one process (rank threads) skip all that: the first to want
their pair makes both ends in memory (inproc.py, Connector._pair_in_process).

Store keys (all under the job's prefix), O(1) per rank:
  claim/R (add)      once-only ranks         size (rank 0 sets, others get)
  tcp/R              rank R's address        pid/R   rank R's process id (not
                                             under GLOOCY_TRANSPORT=tcp)
  host/H (add)       ranks on host H         joined (add), all, go: start-up
  on/R               rank R's host (H): rank 0 reads them all, once, only
                     where the ranks span hosts, and puts the layout in go
  opened (add), opened_all: the ranks that opened rank 0's node segment
  bye/R              rank R left cleanly (set before its listener closes)
  abort/R            why rank R stopped on an error (for peers dialing it later)
  left (add)         leaving: the last one clears the job's keys (or rank 0,
                     when it serves the store, once the others' clients left)
  cannot_start       why a rank could not join (its size or GLOOCY_CONNECT is
                     not rank 0's); it also puts that, after CANNOT_START, in
                     all and go (and, for eager ranks, its tcp/R), which the
                     others wait for
"""

import os
import select
import socket
import threading
import time
import weakref

from gloocy._quiet import start_quiet
from gloocy.errors import PeerLostError, RendezvousError, RendezvousTimeout
from gloocy.rendezvous.store import capped
from gloocy.transport import _tcp, handshake, ibverbs, inproc, shm
from gloocy.transport._tcp import tcp_pair

__all__ = ["Connector"]

_DIALING, _ACCEPTING, _INSTALLED = "dialing", "accepting", "installed"
_LEAVE_WAIT = 60.0     # the longest the store's host waits for the others to leave
_CLOSE_STORE_S = 5.0   # the longest a store operation of a rank leaving waits
_FAILING_STORE_S = 0.5  # all the store traffic of a rank's failure path, from its
                        # first use (record_abort, recorded, _abort_of): a store
                        # across a cut link must not keep a failing call
_TELL_ARRIVING_S = 1.0  # the longest a failed rank leaving waits for dials it accepted
_COMING_WAIT_S = 1.0   # the longest pair() waits for a peer's dial our listener has
                       # begun to answer, rather than dial too (see Connector.pair)


def _unregister(listener, tag, rank):
    """A Connector's end: its listener forgets it, and _tcp's GIL queue
    counts one rank fewer here."""
    _tcp.gil_queue_ranks(-1)
    listener.unregister(tag, rank)


class Connector:
    """One rank's lazy connections: `pair(peer)` connects now (the engine
    calls it from pair_of(), the links' lock held); pairs peers dialed
    wait in `arrived()` until installed."""

    def __init__(self, store, rank, size, secret, job, mode, dead_s, timeout,
                 listener):
        self.store, self.rank, self.size = store, rank, size
        self.secret, self.job, self.mode, self.dead_s = secret, job, mode, dead_s
        self.timeout = timeout
        self.ring = shm.ring_bytes() if mode != "tcp" else None   # read at start-up
        # what we tell a peer about our host (see shm.local_peers)
        self.host_frame = shm.id_frame("tcp" if mode == "ibverbs" else mode)
        self.tag = handshake.job_tag(job)
        self.cond = threading.Condition()
        self.state = {}           # peer -> _DIALING, _ACCEPTING, _INSTALLED, a
                                  # ready pair (dialed by the peer) or an error
        self.ready = []           # peers whose ready pair is not installed
        self.links = None         # set once the Context exists
        self.host_key = None
        self.hosts = None         # each rank's host index (start(): rank 0's go)
        self.all_local = False
        self.own_fd = None        # rank 0: the node segment, kept for the others
        self.owned = []           # store client, store server: closed with us
        self.server = None        # the store server we host (rank 0), if any
        self.store_hosted = False  # rank 0 serves the store: it leaves last
        self.closed = False
        self.recording = None     # the thread saying why we stopped (record_abort)
        self.told = None          # ... and why: (why, code, culprit, origin)
        self.failing_until = None  # the end of the failure path's store traffic
        self.dialed = self.accepted = 0   # connections made each way
        self.refused = 0          # our dials the peer refused (it dialed us too)
        self.coming = {}          # peer -> its dials our listener is authenticating
        self._pids = {}
        self.inproc = None        # our Waker, if we pair in memory (inproc.py)
        self.inproc_made = 0      # pairs to ranks of this process made here, in memory
        self.listener = listener
        try:
            if inproc.enabled(mode):
                self.inproc = inproc.new_waker()
            listener.register(self.tag, rank, self)
        except BaseException:
            listener.release()
            raise
        # Unregistered at close(), or when dropped unclosed (links that were
        # never closed, e.g. a Dup never freed, then collected).
        _tcp.gil_queue_ranks(1)
        self._unregister = weakref.finalize(self, _unregister, listener, self.tag, rank)
        # Not at interpreter exit: our own close() comes later there, and
        # the listener must still finish the dials we accepted, to tell
        # their ranks why we stopped, if we did.
        self._unregister.atexit = False
        if self.inproc is not None:
            inproc.register(self)

    # -- the engine's side ----------------------------------------------------

    def pair(self, peer, timeout=None):
        """The pair to `peer`, connected now (or the one it dialed)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        if self.inproc is not None:
            got = self._pair_in_process(peer)
            if got is not None:
                return got
        hint_until = None
        with self.cond:
            while True:
                st = self.state.get(peer)
                if st is None:
                    if self.coming.get(peer):
                        # The peer is dialing us: its dial will do, and ours
                        # would only cost both sides a handshake (refused,
                        # or the second of two). Not for long: it is a hint
                        # (a HELLO, not authenticated yet).
                        now = time.monotonic()
                        if hint_until is None:
                            hint_until = min(deadline, now + _COMING_WAIT_S)
                        if now < hint_until:
                            self.cond.wait(hint_until - now)
                            continue
                    self.state[peer] = _DIALING
                    break
                if st is not _ACCEPTING:
                    return self._take(peer)
                self._wait(peer, deadline)
        try:
            got = self._dial(peer, deadline)
        except BaseException:
            with self.cond:
                if self._theirs_came(peer, deadline):
                    return self._take(peer)     # it dialed us, then left
                if self.state.get(peer) is _DIALING:
                    del self.state[peer]
            raise
        if got is not None:
            with self.cond:
                if self._theirs_came(peer, deadline):
                    got.close(False)            # (the stand-in of a peer that left)
                    return self._take(peer)
                self.state[peer] = _INSTALLED
                self.dialed += 1
            return got
        with self.cond:           # refused: the peer's own dial wins
            self.refused += 1
            while self.state.get(peer) in (_DIALING, _ACCEPTING):
                self._wait(peer, deadline)
            return self._take(peer)

    def _pair_in_process(self, peer):
        """Our end of the pair to `peer` if it is a rank of this process,
        made now in memory (both ends at once: its end arrives as if it had
        been dialed), else None (made already, or under way: the usual
        path takes it; or not here, or gone: the usual path dials)."""
        other = inproc.connector_of(self, peer)
        if other is None:
            return None
        first, second = (self, other) if self.rank < peer else (other, self)
        with first.cond, second.cond:
            if (self.closed or other.closed or self.state.get(peer) is not None
                    or other.state.get(self.rank) is not None):
                return None
            ours, theirs = inproc.make_pair(self, other, self.ring or shm.ring_bytes())
            self.state[peer] = _INSTALLED
            other.state[self.rank] = theirs
            other.ready.append(self.rank)
            self.inproc_made += 1
            other.cond.notify_all()
            links = other.links
        if links is not None and not links.note_arrival(False):
            # Its lock was held (it runs, and looks at its arrivals before
            # it sleeps); the listener tells its sleepers again soon.
            other.listener.untold.add(links)
        return ours

    def _theirs_came(self, peer, deadline):
        """After our dial failed, or found the peer gone (a peer that is
        leaving breaks the lower-rank-wins rule): whether its own dial to us
        came meanwhile (waiting for one being accepted). The lock held."""
        try:
            while self.state.get(peer) is _ACCEPTING:
                self._wait(peer, deadline)
        except RendezvousError:
            return False
        return peer in self.ready

    def arrived(self):
        """[(peer, pair)] of the connections peers made, to install now.
        (A connection that failed to become a pair stays: pair(peer) raises
        its error when the rank needs that peer.)"""
        with self.cond:
            got = [(p, self.state[p]) for p in self.ready
                   if not isinstance(self.state[p], BaseException)]
            for p, _ in got:
                self.state[p] = _INSTALLED
                self.ready.remove(p)
        return got

    def _take(self, peer):
        st = self.state[peer]
        if isinstance(st, BaseException):
            raise st
        if st is _INSTALLED:
            raise RuntimeError(f"rank {self.rank}: rank {peer} is connected twice")
        self.state[peer] = _INSTALLED
        self.ready.remove(peer)
        return st

    def _wait(self, peer, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise RendezvousError(f"rank {self.rank}: rank {peer} did not finish "
                                  "connecting to us before the deadline")
        self.cond.wait(min(left, 1.0))

    def _dial(self, peer, deadline):
        """Connect to `peer`; its pair, or None if it refused (it dials us)."""
        text = self.listener.addresses.get(peer)
        try:
            if text is None:
                text = self.store.get(f"{self.job}/tcp/{peer}",
                                      timeout=max(deadline - time.monotonic(), 0.001))
                self.listener.addresses[peer] = text
        except RendezvousTimeout as e:
            raise RendezvousError(f"rank {self.rank}: rank {peer} never published "
                                  f"its address (it did not join?): {e}") from None
        except RendezvousError as e:   # the store is gone (it must live for the job)
            raise RendezvousError(f"rank {self.rank}: cannot look up rank {peer}'s "
                                  f"address to connect to it: {e}") from None
        addr = handshake.parse_addr(text.decode())
        address = handshake.fmt(addr)
        try:
            fd = handshake.dial_fd(addr, self.secret, self.rank, peer, self.size,
                                   self.tag, deadline, refusable=True,
                                   after_proof=self.host_frame)
        except (ConnectionRefusedError, handshake.HungUp) as e:
            # The listener lives as long as the rank: it has left, or died.
            # (A listener that fails authentication is a ProtocolError.)
            return self._gone(peer, address, e)
        if fd is None:
            return None
        try:
            local = self._hosts_told(fd, peer, address, deadline)
        except TimeoutError:
            _tcp.close_now(fd)
            raise RendezvousError(f"rank {self.rank}: rank {peer} ({address}) did not "
                                  "finish connecting before the deadline") from None
        except (OSError, handshake.HungUp) as e:    # it went meanwhile
            _tcp.close_now(fd)
            return self._gone(peer, address, e)
        except BaseException:
            _tcp.close_now(fd)
            raise
        if not local and self.mode == "tcp":
            return tcp_pair(fd, self.rank, peer, address, dead_s=self.dead_s)
        sock = socket.socket(fileno=fd)
        sock.setblocking(True)
        try:
            return build_pair(sock, address, self.rank, peer, self.mode, self.dead_s,
                              deadline, self.ring, local=local)
        except (ConnectionError, handshake.HungUp) as e:   # it went meanwhile
            return self._gone(peer, address, e)

    def _hosts_told(self, fd, peer, address, deadline):
        """After the verdict, the peer's host id (shm.local_peers's frame:
        the listener sends it with the verdict; ours went with our proof):
        whether the peer shares memory with us."""
        willing, n = shm.id_length(handshake.read_fd(fd, shm.ID_HEADER_BYTES, deadline,
                                                     "a host id"),
                                   self.rank, peer, address)
        theirs = handshake.read_fd(fd, n, deadline, "a host id") if n else b""
        return shm.is_local(self.host_frame, theirs, willing,
                            "tcp" if self.mode == "ibverbs" else self.mode,
                            self.rank, peer, address)

    def _gone(self, peer, address, e):
        """`peer` hung up on our dial: the pair to a peer that left (telling
        why, if it stopped on an error first), or PeerLostError (it died)."""
        told = self._abort_of(peer, time.monotonic() + 1.0)
        if told is not None or self._said_goodbye(peer):
            return departed_pair(self.rank, peer, address, self.dead_s, told)
        raise PeerLostError(f"rank {self.rank}: rank {peer} ({address}) is "
                            f"gone ({e})", peer) from None

    def _said_goodbye(self, peer):
        """Whether `peer` left cleanly (its bye key, set before its listener
        closed), rather than died."""
        try:
            return self.store.check([f"{self.job}/bye/{peer}"])
        except (RendezvousError, OSError):
            return False

    def failing(self):
        """The end (time.monotonic()) of our failure path's store traffic:
        one budget, _FAILING_STORE_S from its first use, for all of it
        (record_abort's record, recorded()'s wait for it, the _abort_of
        lookups of fail(), connect_members' dials). A store that does not
        answer by then (across a cut link) is given up: the failure names
        what this rank saw."""
        if self.failing_until is None:
            self.failing_until = time.monotonic() + _FAILING_STORE_S
        return self.failing_until

    def record_abort(self, why, code, culprit, origin):
        """We stop on an error (fail(), _failure.pxi): say why in the store,
        for the peers that dial us once we are gone (those that dial us
        before are told by the links), and for those that see our
        connections close before our abort frame (_failure.pxi:
        recorded_cause). Best effort, in a thread of its own, within the
        failure path's budget (failing()): the call that failed raises at
        once even where the store cannot be reached; Links.close waits for
        it (recorded), and so does an exiting interpreter (it is no daemon):
        a process that ends on the error, its links never closed (a
        communicator from connect()), resets its connections after the
        record is in the store."""
        until = self.failing()

        def record():
            try:
                with capped(until):
                    self.store.set(f"{self.job}/abort/{self.rank}",
                                   f"{code} {culprit} {origin} ".encode() + why)
            except (RendezvousError, OSError, TimeoutError, ValueError):
                pass
        if self.told is None:
            self.told = (why, code, culprit, origin)
        if self.recording is None and not self.closed:
            self.recording = start_quiet(threading.Thread(
                target=record, daemon=False, name=f"gloocy-abort-{self.rank}"))

    def recorded(self):
        """Wait until record_abort's record is in the store (or its budget
        is spent): a peer that sees our connections close then finds it."""
        if self.recording is not None:
            self.recording.join(max(self.failing() - time.monotonic(), 0.0))

    def _abort_of(self, peer, until, wait_until=0.0):
        """What `peer` said in the store when it stopped on an error (why,
        code, culprit, origin), or None: also when the store does not
        answer by `until` (time.monotonic()). A record not there yet is
        waited for until `wait_until` (a peer whose deadline passes just
        after ours writes it a little later)."""
        key = f"{self.job}/abort/{peer}"
        if time.monotonic() >= until:
            return None
        try:
            with capped(until):
                wait = wait_until - time.monotonic()
                if wait <= 0 and not self.store.check([key]):
                    return None
                raw = self.store.get(key, timeout=max(wait, 0.0))
            code, culprit, origin, why = raw.split(b" ", 3)
            return why, int(code), int(culprit), int(origin)
        except (RendezvousError, OSError, TimeoutError, ValueError):
            return None

    # -- the listener's side --------------------------------------------------

    def dial_coming(self, peer, n):
        """The listener begins (n = 1) or gives up (n = -1) authenticating
        a dial from `peer` (see pair)."""
        with self.cond:
            self._count_coming(peer, n)

    def _count_coming(self, peer, n=-1, wake=True):
        """The listener's dials from `peer` being authenticated, n more (the
        lock held); when none is left, pair() waiting for one is woken."""
        left = self.coming.get(peer, 0) + n
        if left > 0:
            self.coming[peer] = left
        else:
            self.coming.pop(peer, None)
            if wake:
                self.cond.notify_all()

    def verdict(self, peer):
        """An authenticated dial from `peer` (the listener's thread): True
        to accept it, False to refuse it (we dial the peer too, and it is
        the higher rank), None if we have left (the dialer names us lost).
        (It is no longer only coming: a pair() waiting for it is woken if
        it is not accepted; else arrive() wakes it, once.)"""
        with self.cond:
            self._count_coming(peer, wake=False)
            if self.closed:
                self.cond.notify_all()
                return None
            st = self.state.get(peer)
            if st is None or (st is _DIALING and peer < self.rank):
                self.state[peer] = _ACCEPTING
                self.accepted += 1
                return True
            self.cond.notify_all()
        return False

    def finish(self, sock, peer, address, local):
        """Make the pair of a dial we accepted (in a thread of its own:
        shared memory and ibverbs pairs take more messages), then arrive()."""
        deadline = time.monotonic() + self.timeout
        try:
            sock.setblocking(True)
            got = build_pair(sock, address, self.rank, peer, self.mode,
                             self.dead_s, deadline, self.ring, local=local)
        except (ConnectionError, handshake.HungUp) as e:   # it went meanwhile
            got = self.hung_up(peer, address, e)
        except BaseException as e:
            got = e if isinstance(e, Exception) else RendezvousError(str(e))
        self.arrive(peer, got)

    def hung_up(self, peer, address, e):
        return PeerLostError(f"rank {self.rank}: rank {peer} ({address}) hung "
                             f"up while connecting to us ({e})", peer)

    def arrive(self, peer, got, wait=True):
        """The pair (or the error) of a dial we accepted: installed by the
        rank's next progress, or taken by its pair(peer). Without `wait`
        (the listener's thread), the links to tell again soon (their lock
        was held: see Links.note_arrival), or None."""
        with self.cond:
            if self.closed and not isinstance(got, BaseException):
                self._close_unused(got)
                self.state[peer] = _INSTALLED       # (and gone: close() waits no more)
                self.cond.notify_all()
                return
            self.state[peer] = got
            self.ready.append(peer)
            self.cond.notify_all()
        links = self.links
        if links is not None and not links.note_arrival(wait):
            return links
        return None

    # -- the node segment's waits ------------------------------------------------

    def process_gone(self, peer, pid=0):
        """Whether rank `peer`'s process (on our host) has ended; `pid` its
        process if known (else it is read from the store)."""
        if pid <= 0:
            pid = self._pids.get(peer)
        if pid is None:
            pid = self._pids[peer] = int(self.store.get(f"{self.job}/pid/{peer}",
                                                        timeout=1.0))
        if pid == os.getpid():
            # A rank thread of this process (gloocy.testing's thread worlds):
            # gone once its connector closed (it left, or its links dropped).
            return not self.listener.serves(self.tag, peer)
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        try:
            import select
            return bool(select.select([fd], [], [], 0)[0])   # readable: it exited
        finally:
            os.close(fd)

    # -- the end ------------------------------------------------------------------

    def close(self, clean=True):
        """Stop taking connections, close the pairs never installed; the
        last rank to leave clears the job's keys; the store's host waits
        (bounded) for the others, who may still need the store."""
        self.recorded()                   # (before our own store operations)
        if clean and not self.closed:
            try:                  # before a dial is refused: see _said_goodbye
                with _briefly():
                    self.store.set(f"{self.job}/bye/{self.rank}", b"1")
            except (RendezvousError, OSError, TimeoutError):
                pass
        with self.cond:
            if self.closed:
                return
            self.closed = True
            if self.told is not None:
                # Dials we accepted whose pairs are still being made: once
                # made, arrive() tells them why we stopped (their ranks may
                # wait on them); our exit would cut them off untold.
                until = time.monotonic() + _TELL_ARRIVING_S
                while (_ACCEPTING in self.state.values()
                       and self.cond.wait(max(until - time.monotonic(), 0))):
                    pass
            ready = [self.state[p] for p in self.ready]
            self.ready.clear()
            self.cond.notify_all()
        self._unregister()
        if self.inproc is not None:
            inproc.unregister(self)
        for pair in ready:
            if not isinstance(pair, BaseException):
                self._close_unused(pair)
        self.links = None
        try:
            self._give_up_node_fd(clean)
            self._leave(clean)
        finally:
            for thing in self.owned:
                thing.close()
            self.owned = []

    def _close_unused(self, pair):
        """Close a pair a peer dialed that we never installed. If we stopped
        on an error, its peer, which may wait on it, hears why first (it
        would name us, who only gave up, instead of the root cause)."""
        if self.told is not None:
            from gloocy._core import say_abort_on
            say_abort_on(pair, *self.told)    # (best effort: it may be gone too)
        pair.close(False)

    def _give_up_node_fd(self, clean):
        """Rank 0: close the node segment's fd the others open through
        /proc, once they all have (a rank slower than our whole job would
        find it gone, or another file in its place). Bounded, and after a
        clean end only."""
        if self.own_fd is None:
            return
        try:
            if clean:
                self.store.get(f"{self.job}/opened_all",
                               timeout=min(self.timeout, _LEAVE_WAIT))
        except (RendezvousError, OSError, TimeoutError):
            pass                  # best effort: they are told at their deadline
        finally:
            os.close(self.own_fd)
            self.own_fd = None

    def _leave(self, clean):
        """Count ourselves out; the last one out clears the job's keys. When
        rank 0 serves the store, it clears them once the other ranks' store
        clients have gone (they may still dial, which needs the store): it
        waits for that (bounded), after a clean end only."""
        store, job = self.store, self.job
        try:
            with _briefly():
                if self.server is not None:
                    if clean:     # (our own client stays till we are done)
                        self.server.wait_clients(1, min(self.timeout, _LEAVE_WAIT))
                    store.clear(f"{job}/")
                elif not self.store_hosted and store.add(f"{job}/left", 1) == self.size:
                    store.clear(f"{job}/")
        except (RendezvousError, OSError, TimeoutError):
            pass                  # best effort: the job is over anyway


def _briefly():
    """The store's operations while we leave end within _CLOSE_STORE_S (its
    default timeout is the job's): a store that is gone (its host left, or
    its link was cut) costs a rank's exit seconds, not the job's deadline.
    (This thread's only: see capped.)"""
    return capped(time.monotonic() + _CLOSE_STORE_S)


def departed_pair(rank, peer, address, dead_s, told=None):
    """The pair to a peer that left cleanly before we ever connected to it:
    as if it had connected, said goodbye and closed (its end of a loopback
    connection does just that), so that calls on it behave as on a pair
    made at start-up whose peer has left (a clean exit never fails a peer
    still finishing calls it needs no answer to). `told`: the peer stopped
    on an error first, (why, code, culprit, origin) as it put it in the
    store: its end says that first, as the peer would have told us had we
    been connected (so we name the root cause, not the peer)."""
    from gloocy._core import say_abort_on
    with socket.create_server(("127.0.0.1", 0)) as server:
        ours = socket.create_connection(server.getsockname())
        theirs, _ = server.accept()
    theirs = tcp_pair(theirs, peer, rank, address)
    if told is not None:
        say_abort_on(theirs, *told)
    theirs.close(True)                                     # goodbye, closed
    return tcp_pair(ours, rank, peer, address, dead_s=dead_s)


def build_pair(sock, address, rank, peer, mode, dead_s, deadline, ring=None, *,
               local=None, ours=None):
    """The pair to `peer` over the authenticated socket (either side): shared
    memory when on one host (unless `mode` is tcp), ibverbs where both ends
    can, else TCP. `local`: whether the peer shares memory with us, if the
    host ids were exchanged already; else they are now (`ours`: our id
    frame, if made)."""
    try:
        link = {peer: (sock, address)}
        if local is None:
            local = peer in shm.local_peers(link, rank, "tcp" if mode == "ibverbs"
                                            else mode, deadline, ours)
        if local:
            return shm.shm_pair(sock, rank, peer, deadline, ring=ring)[0]
        if mode in ("auto", "ibverbs"):
            dev = ibverbs.require(rank) if mode == "ibverbs" else ibverbs.probe()[0]
            if peer in ibverbs.agree(link, rank, mode, deadline, dev):
                return ibverbs.ib_pair(sock, rank, peer, address, dev, deadline,
                                       dead_s=dead_s)
        return tcp_pair(sock, rank, peer, address, dead_s=dead_s)
    except BaseException:
        sock.close()
        raise
