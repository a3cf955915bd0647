"""The agent of a window: a daemon thread of each process that serves the
other ranks' requests on this process's part of the window, so that
passive-target operations go on while the main thread computes (gloocy's
point-to-point waits release the GIL).

The wire, on the window's private duplicates of its communicator:

    requests (origin -> agent), tag REQUEST:
        ("put", disp, count, datatype, data)
        ("get", disp, count, datatype)
        ("acc", disp, count, datatype, data, op, fetch)
        ("cas", disp, count, datatype, value, compare)
        ("lock", lock_type)   ("unlock",)   ("stop",) (from itself: Free)
    replies (agent -> origin), tag REPLY:
        ("ok", value)  or  ("error", error_class, message)

Every request gets its reply, a lock's when it is granted. Pickled
objects travel (gloocy's lower-case send: out-of-band buffers); a
derived datatype pickles with its layout.

The agent waits without a deadline (a wait that timed out would poison
the connections); it ends on Free's "stop", when a peer is lost, or at
exit (stop_all).
"""

import atexit
import threading
import weakref

from gloocy.constants import ANY_SOURCE
from gloocy.errors import ERR_OTHER
from gloocy.status import Status

__all__ = ["Agent", "REQUEST", "REPLY", "POSTED", "COMPLETED", "stop_all"]

# tags: requests on the requests duplicate; replies and the PSCW
# handshakes (main thread to main thread) on the replies duplicate
REQUEST = 1
REPLY, POSTED, COMPLETED = 1, 2, 3

FOREVER = 1e9                     # seconds: an agent waits until told to stop
JOIN_SECONDS = 10.0

_live = weakref.WeakSet()         # agents running in this process


class Agent:
    """The serving thread of one window (`core`: its WindowCore)."""

    def __init__(self, core):
        self.core = core
        self.error = None         # what ended it early (a peer lost...)
        self.thread = threading.Thread(target=self._serve, daemon=True,
                                       name=f"gloocy-rma-agent-{core.rank}")
        self.thread.start()
        _live.add(self)

    def _serve(self):
        core = self.core
        status = Status()
        while True:
            try:
                request = core.requests.recv(source=ANY_SOURCE, tag=REQUEST,
                                             status=status, timeout=FOREVER)
            except BaseException as e:          # lost peers, exit
                self.error = e
                return
            source = status.Get_source()
            if request[0] == "stop" and source == core.rank:
                return
            try:
                reply = core.serve(source, request)
            except Exception as e:              # the origin raises it
                reply = ("error", getattr(e, "error_class", ERR_OTHER),
                         f"rank {core.rank} (target): {e}")
            if reply is not None:
                try:
                    core.replies.send(reply, source, tag=REPLY)
                except BaseException as e:
                    self.error = e
                    return

    def stop(self):
        """End the thread (Free; at exit): it takes a message from us."""
        _live.discard(self)
        if self.thread.is_alive():
            try:
                self.core.requests.send(("stop",), self.core.rank, tag=REQUEST)
            except Exception:
                return                          # connections gone: it ends too
            self.thread.join(JOIN_SECONDS)


@atexit.register
def stop_all():
    """At exit, before gloocy closes its connections (atexit runs this
    first: it was registered later), stop the agents of windows never
    freed."""
    for agent in list(_live):
        agent.stop()
