"""Helper threads that never take the process's asynchronous signals.

A signal sent to the process (Ctrl-C, SIGTERM) goes to any thread that does
not block it. If a helper thread (a listener, a store server) takes it, the
main thread, asleep in a wait that checks for signals when its sleep is
interrupted, sleeps on: Ctrl-C is seen late, or not in the call it stopped.
"""

import signal
import threading
import weakref

# Raised by the thread that faults: never blocked.
_SYNCHRONOUS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL,
                signal.SIGABRT, signal.SIGTRAP, signal.SIGSYS}


_helpers = weakref.WeakSet()     # the threads started here


def start_quiet(thread):
    """thread.start(), with the asynchronous signals blocked in it (and in
    the threads it starts: they inherit its mask). The thread is one of
    gloocy's helpers: it never sends a rank's messages (lone_thread)."""
    _helpers.add(thread)
    old = signal.pthread_sigmask(signal.SIG_BLOCK,
                                 signal.valid_signals() - _SYNCHRONOUS)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return thread


def lone_thread():
    """No thread of this process but the caller and gloocy's helpers (which
    never send a rank's messages): nobody else could send one."""
    me = threading.current_thread()
    return all(t is me or t in _helpers for t in threading.enumerate())
