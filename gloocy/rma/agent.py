"""The agent: one daemon thread per process that serves the other ranks'
requests on this process's part of every window of the process, so that
passive-target operations go on while the main thread computes (gloocy's
point-to-point calls release the GIL while they wait).

It never blocks in a receive: it probes each window's communicator for
requests (Improbe), often while they come, then sleeping a little longer
each time nothing came (up to IDLE_MAX); so any number of windows share
one thread. The replies and Post's handshake are taken by the thread
that waits for them (it probes for one rank's message with one tag:
WindowCore._await), without a detour through the agent; what the agent
has for the main thread (a Complete that arrived, for Wait and Test)
goes through the window's Mailbox.

The wire, on each window's private duplicate of its communicator:

    requests (origin -> agent), tag REQUEST:
        ("put", disp, count, datatype, data)
        ("get", disp, count, datatype)
        ("acc", disp, count, datatype, data, op, fetch)
        ("cas", disp, count, datatype, value, compare)
        ("lock", lock_type)   ("unlock",)   ("complete",) (PSCW's Complete)
    replies (agent -> origin), tag REPLY:
        ("ok", value)  or  ("error", error_class, message)
    Post's handshake (main thread to main thread): tag POSTED

Every request gets its reply, a lock's when it is granted. Pickled
objects travel (gloocy's lower-case send: out-of-band buffers); a
derived datatype pickles with its layout.
"""

import atexit
import collections
import threading
import time

from gloocy.constants import ANY_SOURCE
from gloocy.errors import ERR_OTHER, CollectiveTimeout, GloocyError
from gloocy.status import Status

__all__ = ["serve", "retire", "Mailbox", "REQUEST", "REPLY", "POSTED", "COMPLETED",
           "stop"]

REQUEST, REPLY, POSTED, COMPLETED = 1, 2, 3, 4     # tags
IDLE_MIN, IDLE_MAX = 20e-6, 2e-3   # seconds between probes when nothing comes
BUSY_SPELL = 0.005                # after traffic, probe at IDLE_MIN this long
JOIN_SECONDS = 10.0
LIVENESS_SECONDS = 0.25           # how often a waiting origin checks on its target


class _Agent:
    """The thread, and the windows it serves."""

    def __init__(self):
        self.cores = []
        self.lock = threading.Lock()      # held while a window is served
        self.thread = None
        self.stopping = False
        self.active = 0.0                 # when something last moved (monotonic)


    def add(self, core):
        with self.lock:
            self.cores.append(core)
            if self.thread is None or not self.thread.is_alive():
                self.stopping = False
                self.thread = threading.Thread(target=self._run, daemon=True,
                                               name="gloocy-rma-agent")
                self.thread.start()

    def remove(self, core):
        """Stop serving core (the thread ends with the last window)."""
        with self.lock:
            if core in self.cores:
                self.cores.remove(core)
            thread, last = self.thread, not self.cores
            if last:
                self.stopping = True
        if last and thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_SECONDS)

    def _run(self):
        status = Status()
        idle = IDLE_MIN
        while True:
            moved = False
            with self.lock:
                if self.stopping:
                    return
                for core in list(self.cores):
                    moved |= self._drain(core, status)
            now = time.monotonic()
            if moved:
                self.active = now
            if now - self.active < BUSY_SPELL:    # traffic lately: more may come
                idle = IDLE_MIN
            else:
                idle = min(idle * 1.5, IDLE_MAX)
            if not moved:
                time.sleep(idle)

    def _drain(self, core, status):
        """Take and handle what came for one window; whether anything did."""
        moved = False
        while True:
            try:
                message = core.wire.improbe(ANY_SOURCE, REQUEST, status)
                if message is None:
                    return moved
                obj = message.recv()
            except BaseException as e:           # a lost peer...
                core.mailbox.fail(e)
                self.cores.remove(core)
                return moved
            moved = True
            source = status.Get_source()
            try:
                reply = core.serve(source, obj)
            except Exception as e:               # the origin raises it
                reply = ("error", getattr(e, "error_class", ERR_OTHER),
                         f"rank {core.rank} (target): {e}")
            if reply is not None:
                try:
                    core.wire.send(reply, source, tag=REPLY)
                except BaseException as e:
                    core.mailbox.fail(e)
                    self.cores.remove(core)
                    return moved


_AGENT = _Agent()
serve = _AGENT.add
retire = _AGENT.remove


class Mailbox:
    """What came for this process's main thread, by (source, tag), in
    order; take() waits for it (up to a deadline) and raises the agent's
    error if the agent ended on one."""

    def __init__(self):
        self.boxes = collections.defaultdict(collections.deque)
        self.arrived = threading.Condition()
        self.error = None

    def put(self, source, tag, message):
        with self.arrived:
            self.boxes[source, tag].append(message)
            self.arrived.notify_all()

    def fail(self, error):
        with self.arrived:
            self.error = error
            self.arrived.notify_all()

    def poll(self, source, tag):
        """The next message from source with tag, None if none yet."""
        with self.arrived:
            box = self.boxes.get((source, tag))
            return box.popleft() if box else None

    def take(self, source, tag, timeout, what, alive=None):
        """The next message from source with tag; `alive()` (if given) is
        called between waits of a quarter second: it raises if source is
        gone."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while True:
                box = self.boxes.get((source, tag))
                if box:
                    return box.popleft()
                if self.error is not None:
                    raise GloocyError(f"{what}: the window's agent stopped: "
                                      f"{self.error}",
                                      getattr(self.error, "error_class", ERR_OTHER)
                                      ) from self.error
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CollectiveTimeout(f"{what}: nothing from rank {source} "
                                            f"within {timeout} s")
                if not self.arrived.wait(min(left, LIVENESS_SECONDS)) and alive:
                    alive()


@atexit.register
def stop():
    """At exit, before gloocy closes its connections (atexit runs this
    first: it was registered later), stop serving windows never freed."""
    for core in list(_AGENT.cores):
        _AGENT.remove(core)
