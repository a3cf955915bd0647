"""Matched messages (Mprobe, Improbe) and the buffer of buffered sends.

A matched probe takes its message out of the communicator at once, so no
other receive (another thread's included) can get it; the Message holds its
bytes until Recv/recv copies or unpickles them. A synchronous send's
acknowledgement is sent when the probe matches it, as MPI says.

Buffered sends (Bsend, Ibsend, bsend, ibsend) copy the message and complete
locally. The copy must fit the buffer attached (MPI.Attach_buffer, or the
communicator's Attach_buffer), counting the sends still in flight and
BSEND_OVERHEAD bytes each, else ERR_BUFFER (as MPICH); BUFFER_AUTOMATIC
means no limit.
"""

import threading

from gloocy import pickling as _pickling

from gloocy.constants import ANY_SOURCE, ANY_TAG, PROC_NULL
from gloocy.errors import ERR_BUFFER, ERR_REQUEST, GloocyError
from gloocy.memory import BUFFER_AUTOMATIC, BufferAutomaticType

__all__ = ["Message", "MESSAGE_NULL", "MESSAGE_NO_PROC", "BufferAutomaticType",
           "BUFFER_AUTOMATIC", "BSEND_OVERHEAD", "SendBuffer", "PROCESS_BUFFER"]

_NULL, _NO_PROC, _LIVE = 0, 1, 2


def _set_status(status, source, tag, count):
    if status is not None:
        status._set(source, tag, count)


class Message:
    """A message matched by Mprobe/Improbe: received with Recv/Irecv
    (buffers) or recv/irecv (objects), once."""

    __slots__ = ("_state", "_data", "_source", "_tag", "__weakref__")

    def __new__(cls, message=None):
        self = object.__new__(cls)
        self._state, self._data, self._source, self._tag = _NULL, None, 0, 0
        if message is not None:
            if not isinstance(message, Message):
                raise TypeError(f"message: expected a Message, got {message!r}")
            self._state, self._data = message._state, message._data
            self._source, self._tag = message._source, message._tag
        return self

    @classmethod
    def _matched(cls, data, source, tag):
        self = cls()
        self._state, self._data, self._source, self._tag = _LIVE, data, source, tag
        return self

    @classmethod
    def _no_proc(cls):
        self = cls()
        self._state = _NO_PROC
        return self

    def __eq__(self, other):
        if not isinstance(other, Message):
            return NotImplemented
        if self is other:
            return True
        if self._state != other._state:
            return False
        return self._state != _LIVE or self._data is other._data

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None               # as mpi4py's handles

    def __bool__(self):
        return self._state != _NULL

    def __reduce__(self):
        if self is MESSAGE_NULL:
            return "MESSAGE_NULL"
        if self is MESSAGE_NO_PROC:
            return "MESSAGE_NO_PROC"
        if self._state == _NULL:
            return type(self), ()
        if self._state == _NO_PROC:
            return type(self), (MESSAGE_NO_PROC,)
        raise ValueError("cannot pickle a matched Message")

    def __repr__(self):
        what = {_NULL: "MESSAGE_NULL", _NO_PROC: "MESSAGE_NO_PROC"}.get(self._state)
        if what is None:
            what = f"from {self._source}, tag {self._tag}, {len(self._data)} bytes"
        return f"<Message {what}>"

    @property
    def handle(self):
        return {_NULL: 0, _NO_PROC: 1}.get(self._state, id(self))

    def toint(self):
        return self.handle

    py2f = toint

    @classmethod
    def fromhandle(cls, handle):
        if handle == 0:
            return cls()
        if handle == 1:
            return cls(MESSAGE_NO_PROC)
        raise ValueError(f"handle: {handle} names no Message here")

    fromint = f2py = fromhandle

    def free(self):
        """Forget the message (MESSAGE_NULL after)."""
        if self is MESSAGE_NULL or self is MESSAGE_NO_PROC:
            return
        self._state, self._data = _NULL, None

    Free = free

    # -- matching ------------------------------------------------------------

    @classmethod
    def Probe(cls, comm, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return comm.Mprobe(source, tag, status)

    @classmethod
    def Iprobe(cls, comm, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return comm.Improbe(source, tag, status)

    probe, iprobe = Probe, Iprobe

    # -- receiving -------------------------------------------------------------

    def _take(self):
        """(data, source, tag) of the message, which is then received
        (MESSAGE_NULL); data None for MESSAGE_NO_PROC."""
        if self._state == _NULL:
            raise GloocyError("message: MESSAGE_NULL (already received?)",
                              ERR_REQUEST)
        got = (self._data, self._source, self._tag)
        if self is not MESSAGE_NO_PROC:
            self._state, self._data = _NULL, None
        return got

    def Recv(self, buf, status=None):
        """Receive the message into buf (a longer message than buf is an
        ERR_TRUNCATE error)."""
        data, source, tag = self._take()
        if data is None:
            _set_status(status, PROC_NULL, ANY_TAG, 0)
            return
        from gloocy.communicator import _deliver_into
        n = _deliver_into(buf, data)
        _set_status(status, source, tag, n)

    def Irecv(self, buf):
        """Receive into buf; the message is here already, so the request
        returned is complete."""
        from gloocy.requests import done_request
        data, source, tag = self._take()
        if data is None:
            return done_request(PROC_NULL, ANY_TAG, 0, None)
        from gloocy.communicator import _deliver_into
        n = _deliver_into(buf, data)
        return done_request(source, tag, n, None)

    def recv(self, status=None):
        """The object the message holds."""
        data, source, tag = self._take()
        if data is None:
            _set_status(status, PROC_NULL, ANY_TAG, 0)
            return None
        _set_status(status, source, tag, len(data))
        return _pickling.pickle.loads(data) if data else None

    def irecv(self):
        """A complete request whose wait() returns the object."""
        from gloocy.requests import done_request
        data, source, tag = self._take()
        if data is None:
            return done_request(PROC_NULL, ANY_TAG, 0, None)
        return done_request(source, tag, len(data),
                            _pickling.pickle.loads(data) if data else None)


MESSAGE_NULL = Message()
MESSAGE_NO_PROC = Message._no_proc()


# -- buffered sends ------------------------------------------------------------

BSEND_OVERHEAD = 96     # bytes of the attached buffer each buffered send costs



def _readonly(buf):
    try:
        return memoryview(buf).readonly
    except TypeError:           # a buffer spec gloocy reads otherwise
        return False


def _nbytes(buf):
    """The size of an attached buffer (any buffer spec gloocy can send)."""
    from gloocy.communicator import _spec_nbytes
    try:
        return _spec_nbytes(buf)
    except (TypeError, ValueError) as e:
        raise GloocyError(f"Attach_buffer: buf: {type(buf).__name__} is not a "
                          f"buffer ({e})", ERR_BUFFER) from None


class SendBuffer:
    """An attached buffer: the room buffered sends in flight may take."""

    def __init__(self, where):
        self._where = where
        self._buf = None
        self._size = 0
        self._pending = []          # [(handle, bytes it takes)]
        self._lock = threading.Lock()

    @property
    def attached(self):
        return self._buf is not None

    def attach(self, buf):
        with self._lock:
            if self._buf is not None:
                raise GloocyError(f"Attach_buffer: {self._where} has a buffer "
                                  "attached already", ERR_BUFFER)
            if buf is None:
                buf = BUFFER_AUTOMATIC
            if isinstance(buf, BufferAutomaticType):
                size = None
            else:
                size = _nbytes(buf)
                if _readonly(buf):
                    raise BufferError("Attach_buffer: buf is read-only; "
                                      "buffered sends write into it")
            self._buf, self._size = buf, size

    def flush(self):
        """Wait until every buffered send in flight is done."""
        while True:
            with self._lock:
                if not self._pending:
                    return
                handle, _ = self._pending.pop(0)
            handle.wait()

    def detach(self):
        self.flush()
        with self._lock:
            buf, self._buf, self._size = self._buf, None, 0
        return buf

    def reserve(self, nbytes):
        """Room for a buffered send of nbytes, else ERR_BUFFER."""
        with self._lock:
            if self._buf is None:
                raise GloocyError(f"Bsend: no buffer attached ({self._where}): "
                                  f"a {nbytes}-byte buffered send needs "
                                  f"{nbytes + BSEND_OVERHEAD} bytes (MPI.Attach_buffer)",
                                  ERR_BUFFER)
            if self._size is None:
                return
            self._pending = [(h, n) for h, n in self._pending if not h.done]
            used = sum(n for _, n in self._pending)
            need = nbytes + BSEND_OVERHEAD
            if used + need > self._size:
                raise GloocyError(
                    f"Bsend: a {nbytes}-byte buffered send needs {need} bytes of "
                    f"the attached buffer ({self._where}), which has "
                    f"{self._size - used} of {self._size} free", ERR_BUFFER)

    def add(self, handle, nbytes):
        with self._lock:
            if self._size is not None and not handle.done:
                self._pending.append((handle, nbytes + BSEND_OVERHEAD))
            elif not handle.done:
                self._pending.append((handle, 0))


PROCESS_BUFFER = SendBuffer("the process")
