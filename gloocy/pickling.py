"""How objects become bytes for the lower-case methods: mpi4py's
``MPI.Pickle`` and its process-wide instance ``MPI.pickle``.

A ``Pickle`` holds a ``dumps``/``loads`` pair (the standard pickle module's
by default), the protocol passed to ``dumps`` (None: ``dumps(obj)`` alone)
and the out-of-band threshold: with ``dumps_oob``, buffers of at least
THRESHOLD bytes inside an object are kept aside (pickle protocol 5) instead
of being copied into the stream.

The instance ``pickle`` is the one the communicators use: whenever it
changes (``pickle.__init__(dill.dumps, dill.loads)``, ``pickle.PROTOCOL =
2``), it tells the functions registered with ``on_change`` (gloocy.MPI
registers the communicators' hooks), so that the calls themselves read
plain C globals and pay nothing for the indirection.

Environment: GLOOCY_PICKLE_PROTOCOL and GLOOCY_PICKLE_THRESHOLD (or
mpi4py's MPI4PY_PICKLE_PROTOCOL, MPI4PY_PICKLE_THRESHOLD) set the defaults,
read as gloocy.MPI is imported (as mpi4py reads them), not with this
module: gloocy-run forks ranks from a process that imported it already.
"""

import os
import pickle as _std

__all__ = ["Pickle", "pickle", "on_change", "DEFAULT_PROTOCOL",
           "DEFAULT_THRESHOLD"]


def _env(name, default):
    for prefix in ("GLOOCY_", "MPI4PY_"):
        value = os.environ.get(prefix + name)
        if value:
            return int(value)
    return default


DEFAULT_PROTOCOL = _std.HIGHEST_PROTOCOL    # until the environment is read (on_change)
DEFAULT_THRESHOLD = 256 * 1024              # bytes, likewise

_hooks = []


class Pickle:
    """A serializer: ``dumps(obj, protocol) -> bytes`` and
    ``loads(data) -> obj`` (the standard ones by default)."""

    __slots__ = ("_dumps", "_loads", "_protocol", "_threshold", "__weakref__")

    def __init__(self, dumps=None, loads=None, protocol=None, threshold=None):
        self._dumps = _std.dumps if dumps is None else dumps
        self._loads = _std.loads if loads is None else loads
        self._protocol = self._default_protocol(protocol)
        self._threshold = DEFAULT_THRESHOLD if threshold is None else int(threshold)
        self._changed()

    def _default_protocol(self, protocol):
        # a user's dumps without a protocol is called as dumps(obj)
        if protocol is None and self._dumps is _std.dumps:
            return DEFAULT_PROTOCOL
        return protocol

    # -- the stream ----------------------------------------------------------

    def dumps(self, obj):
        """The bytes of `obj`."""
        if self._protocol is None:
            return self._dumps(obj)
        return self._dumps(obj, self._protocol)

    def loads(self, data):
        """The object of the bytes `data` (any buffer)."""
        return self._loads(data)

    def dumps_oob(self, obj):
        """(stream, buffers): the buffers of at least THRESHOLD bytes inside
        `obj` travel beside the stream (protocol 5 or more), as MPI.buffer
        objects (mpi4py's type for them)."""
        # imported here: pickling is imported by the layers gloocy.memory needs
        from gloocy.memory import buffer
        protocol = DEFAULT_PROTOCOL if self._protocol is None else self._protocol
        if protocol < 0:
            protocol = _std.HIGHEST_PROTOCOL
        buffers = []
        threshold = self._threshold

        def aside(picklebuffer):
            view = picklebuffer.raw()
            if view.nbytes >= threshold:
                buffers.append(buffer(view))
                return False            # out of band
            return True                 # in the stream

        data = self._dumps(obj, max(protocol, 5), buffer_callback=aside)
        return data, buffers

    def loads_oob(self, data, buffers):
        """The object of a stream and its out-of-band buffers."""
        return self._loads(data, buffers=buffers)

    # -- settings ------------------------------------------------------------

    @property
    def PROTOCOL(self):
        """The protocol dumps is called with (None: dumps(obj) alone)."""
        return self._protocol

    @PROTOCOL.setter
    def PROTOCOL(self, protocol):
        self._protocol = self._default_protocol(protocol)
        self._changed()

    @property
    def THRESHOLD(self):
        """Smallest buffer, in bytes, that dumps_oob keeps out of band."""
        return self._threshold

    @THRESHOLD.setter
    def THRESHOLD(self, threshold):
        self._threshold = DEFAULT_THRESHOLD if threshold is None else int(threshold)
        self._changed()

    def __repr__(self):
        name = getattr(self._dumps, "__module__", None) or repr(self._dumps)
        return f"<Pickle {name} protocol={self._protocol}>"

    # -- what the communicators are told -------------------------------------

    def _changed(self):
        if globals().get("pickle") is self:
            settings = self.settings()
            for hook in _hooks:
                hook(*settings)

    def settings(self):
        """(dumps2, loads, protocol, oob): ``dumps2(obj, protocol)`` and
        ``loads(data)`` make and read one pickle; oob: the standard pickle
        with protocol 5 or more, which may move large buffers out of band."""
        dumps, loads, protocol = self._dumps, self._loads, self._protocol
        standard = dumps is _std.dumps and loads is _std.loads
        if protocol is None:
            user = dumps
            dumps = lambda obj, _protocol: user(obj)     # noqa: E731
            protocol = 0
        elif protocol < 0:
            protocol = _std.HIGHEST_PROTOCOL if standard else protocol
        oob = standard and protocol >= 5
        return dumps, loads, int(protocol), oob


pickle = Pickle()


def _read_environment():
    """The defaults the environment sets, also on ``pickle`` where it still
    has the built-in ones."""
    global DEFAULT_PROTOCOL, DEFAULT_THRESHOLD
    protocol = _env("PICKLE_PROTOCOL", DEFAULT_PROTOCOL)
    threshold = _env("PICKLE_THRESHOLD", DEFAULT_THRESHOLD)
    if pickle._protocol == DEFAULT_PROTOCOL and pickle._dumps is _std.dumps:
        pickle._protocol = protocol
    if pickle._threshold == DEFAULT_THRESHOLD:
        pickle._threshold = threshold
    DEFAULT_PROTOCOL, DEFAULT_THRESHOLD = protocol, threshold


def on_change(hook):
    """Call ``hook(dumps2, loads, protocol, oob)`` now and whenever
    ``pickle`` changes (see Pickle.settings). The first call (gloocy.MPI's
    import) reads the environment's defaults."""
    if not _hooks:
        _read_environment()
    _hooks.append(hook)
    hook(*pickle.settings())
