# Point-to-point: blocking, nonblocking and persistent, buffers and
# objects; send modes, matched probes, partitioned requests.

import threading as _threading
import warnings as _warnings

from gloocy import errors as _errors
from gloocy import message as _message


def _deliver_into(buf, data):
    """Copy a matched message's bytes into the receive buffer spec `buf`
    (ERR_TRUNCATE if they do not fit); the bytes received."""
    cdef Message m = message(buf, "buf")
    cdef const unsigned char[:] view = memoryview(data).cast("B")
    cdef int64_t n = view.shape[0]
    if n > m.buf.nbytes:
        raise _errors.MismatchError(
            f"a message of {n} bytes does not fit the {m.buf.nbytes}-byte "
            "receive buffer", _errors.ERR_TRUNCATE)
    if n:
        memcpy(m.buf.ptr, &view[0], n)
    m.unpack(n)
    return n


def _spec_nbytes(buf):
    """Bytes of the buffer spec `buf`."""
    return message(buf, "buf", True).buf.nbytes


_comm_locks_lock = _threading.Lock()


cdef object _comm_lock(_CommBase comm, str key):
    """The lock (one per communicator and key: "recv", "bcast", ...) that
    serializes the object calls of threads sharing a communicator, in the
    table MPI._comm_lock_table shows (comm's "_locks" attribute; kept in a
    field once made, so that every call finds it without the global
    lock). The object collectives call acquire() and release(): cheaper
    than a with statement."""
    cdef dict table = comm._lock_table
    if table is not None:
        lock = table.get(key)
        if lock is not None:
            return lock
    with _comm_locks_lock:
        table = (<object>comm).__dict__.setdefault("_locks", {})
        comm._lock_table = table
        lock = table.get(key)
        if lock is None:
            lock = table[key] = _threading.Lock()
        return lock


cdef object _send_buffer(comm):
    """The buffer a buffered send on `comm` takes its room from."""
    pool = getattr(comm, "_bsend_buffer", None)
    if pool is not None and pool.attached:
        return pool
    session = getattr(comm, "_session", None)     # Create_from_group's
    if session and session.get("buffer") and session["buffer"].attached:
        return session["buffer"]
    return _message.PROCESS_BUFFER


cdef class _PointToPoint(_CommBase):

    # -- point-to-point ------------------------------------------------------

    def Send(self, buf, dest, tag=0, *, timeout=None):
        """Send buf to rank `dest`; returns once buf may be reused."""
        cdef Context ctx = self.live()
        if dest != PROC_NULL:
            ctx.send(message(buf, "buf", True).buf, dest, tag, timeout)

    Rsend = Send

    def Ssend(self, buf, dest, tag=0, *, timeout=None):
        """Send buf; returns once the receiver has matched the message."""
        cdef Context ctx = self.live()
        if dest != PROC_NULL:
            ctx.send(message(buf, "buf", True).buf, dest, tag, timeout, True)

    def Bsend(self, buf, dest, tag=0):
        """Buffered send: a copy is sent, taking room in the attached
        buffer until it has gone (ERR_BUFFER if it does not fit)."""
        self.Ibsend(buf, dest, tag)

    def Ibsend(self, buf, dest, tag=0):
        cdef Context ctx = self.live()
        if dest == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        cdef Message m = message(buf, "buf", True)
        data = m.buf.ptr[:m.buf.nbytes]
        pool = _send_buffer(self)
        pool.reserve(len(data))
        h = ctx.isend(bytearray(data), dest, tag)
        pool.add(h, len(data))
        return _requests.CollectiveRequest._finished()

    def bsend(self, obj, dest, tag=0):
        self.ibsend(obj, dest, tag)

    def ibsend(self, obj, dest, tag=0):
        cdef Context ctx = self.live()
        if dest == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        data = _dumps(obj)
        pool = _send_buffer(self)
        pool.reserve(len(data))
        h = ctx.isend(data, dest, tag)
        pool.add(h, len(data))
        return _requests.CollectiveRequest._finished()

    def Attach_buffer(self, buf):
        """A buffer for this communicator's buffered sends (None or
        BUFFER_AUTOMATIC: no limit)."""
        pool = getattr(self, "_bsend_buffer", None)
        if pool is None:
            pool = _message.SendBuffer("the communicator")
            setattr(self, "_bsend_buffer", pool)
        pool.attach(buf)

    def Detach_buffer(self):
        """Wait for the buffered sends in flight; the buffer detached."""
        pool = getattr(self, "_bsend_buffer", None)
        if pool is None or not pool.attached:
            raise _errors.GloocyError("Detach_buffer: no buffer attached to "
                                      "the communicator", _errors.ERR_BUFFER)
        return pool.detach()

    def Flush_buffer(self):
        """Wait for the buffered sends in flight from the buffer."""
        _send_buffer(self).flush()

    def Iflush_buffer(self):
        self.Flush_buffer()
        return _requests.CollectiveRequest._finished()

    # -- matched probes ----------------------------------------------------------

    def Mprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
               timeout=None):
        """Wait for a matching message and take it: the Message returned
        is the only way to receive it (no other receive can)."""
        if source == PROC_NULL:
            _proc_null(status)
            return _message.Message._no_proc()       # a new one (MESSAGE_NULL once received)
        data, src, t = call_recv_new(self.live(), _any(source), tag, True,
                                     timeout)
        if status is not None:
            status._set(src, t, len(data))
        return _message.Message._matched(data, src, t)

    def Improbe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        """Mprobe without waiting: the Message, or None if no matching
        message is there yet."""
        if source == PROC_NULL:
            _proc_null(status)
            return _message.Message._no_proc()       # a new one (MESSAGE_NULL once received)
        got = call_recv_new(self.live(), _any(source), tag, False, None)
        if got is None:
            return None
        data, src, t = got
        if status is not None:
            status._set(src, t, len(data))
        return _message.Message._matched(data, src, t)

    def mprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
               timeout=None):
        return self.Mprobe(source, tag, status, timeout=timeout)

    def improbe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return self.Improbe(source, tag, status)

    def Recv(self, buf, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
             timeout=None):
        """Receive into buf (a shorter message is fine, a longer one is an
        error); `status` gets the source, tag and byte count."""
        cdef Context ctx = self.live()
        if source == PROC_NULL:
            return _proc_null(status) and None
        cdef Message m = message(buf, "buf")
        got = ctx.recv(m.buf, _any(source), tag, timeout)
        m.unpack(got[2])
        if status is not None:
            status._set(*got)

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None,
                 source=ANY_SOURCE, recvtag=ANY_TAG, status=None, *,
                 timeout=None):
        """Send and receive at once: the send is posted first, so rings of
        Sendrecv never wait on each other."""
        cdef Context ctx = self.live()
        cdef Message r = None
        # both buffers are parsed before anything moves: a bad recvbuf must
        # not leave the message sent
        if source != PROC_NULL:
            r = message(recvbuf, "recvbuf")
        sent = None
        if dest != PROC_NULL:
            sent = ctx.isend(message(sendbuf, "sendbuf", True).buf, dest,
                             sendtag)
        if r is None:
            _proc_null(status)
        else:
            got = ctx.recv(r.buf, _any(source), recvtag, timeout)
            r.unpack(got[2])
            if status is not None:
                status._set(*got)
        if sent is not None:
            sent.wait(timeout)

    def Sendrecv_replace(self, buf, dest, sendtag=0, source=ANY_SOURCE,
                         recvtag=ANY_TAG, status=None, *, timeout=None):
        """Send buf, then receive into it."""
        if dest == PROC_NULL and source == PROC_NULL:
            self.live()
            _proc_null(status)
            return
        m = bufspec.message(buf, name="buf")
        self.Sendrecv(m.data.copy(), dest, sendtag, m.data, source, recvtag,
                      status, timeout=timeout)
        m.unpack()

    def Probe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
              timeout=None):
        """Wait until a matching message can be received; True."""
        if source == PROC_NULL:
            return _proc_null(status)
        got = self._ctx.probe(_any(source), tag, timeout=timeout)
        if status is not None:
            status._set(*got)
        return True

    def Iprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        """Is a matching message there to receive now?"""
        if source == PROC_NULL:
            return _proc_null(status)
        got = self._ctx.probe(_any(source), tag, block=False)
        if got is not None and status is not None:
            status._set(*got)
        return got is not None

    def send(self, obj, dest, tag=0, *, timeout=None):
        send_object(self.live(), obj, dest, tag, timeout)

    def ssend(self, obj, dest, tag=0, *, timeout=None):
        """Send obj; returns once the receiver has matched it."""
        cdef Context ctx = self.live()
        if dest != PROC_NULL:
            ctx.send(_dumps(obj), dest, tag, timeout, True)

    def recv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
             timeout=None):
        """The next object from `source` with `tag` (`buf` is not needed:
        the message's size comes with it)."""
        if buf is not None:
            _warnings.warn("the 'buf' argument is deprecated", UserWarning,
                           stacklevel=2)
        cdef Context ctx = self.live()
        with _comm_lock(self, "recv"):
            return recv_object(ctx, source, tag, status, timeout)

    def sendrecv(self, sendobj, dest, sendtag=0, recvbuf=None,
                 source=ANY_SOURCE, recvtag=ANY_TAG, status=None, *,
                 timeout=None):
        cdef Context ctx = self.live()
        send_object(ctx, sendobj, dest, sendtag, timeout)
        return recv_object(ctx, source, recvtag, status, timeout)

    def probe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
              timeout=None):
        return self.Probe(source, tag, status, timeout=timeout)

    def iprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return self.Iprobe(source, tag, status)

    # -- nonblocking -----------------------------------------------------------

    def Isend(self, buf, dest, tag=0):
        """Start sending buf (which must not change until the request is
        done)."""
        cdef Context ctx = self.live()
        if dest == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        cdef Message m = message(buf, "buf", True)
        return p2p_request(ctx.isend(m.buf, dest, tag), m, None)

    Irsend = Isend

    def Issend(self, buf, dest, tag=0):
        """Start a synchronous send: done once the receiver has matched
        the message."""
        cdef Context ctx = self.live()
        if dest == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        cdef Message m = message(buf, "buf", True)
        return p2p_request(ctx.isend(m.buf, dest, tag, True), m, None)

    def Send_init(self, buf, dest, tag=0):
        """A persistent send: each Start() sends buf's current contents."""
        return _requests.Prequest(lambda: self.Isend(buf, dest, tag))

    Rsend_init = Send_init

    def Ssend_init(self, buf, dest, tag=0):
        """A persistent synchronous send."""
        return _requests.Prequest(lambda: self.Issend(buf, dest, tag))

    def Bsend_init(self, buf, dest, tag=0):
        """A persistent buffered send."""
        return _requests.Prequest(lambda: self.Ibsend(buf, dest, tag))

    def Psend_init(self, buf, partitions, dest, tag=0, info=None):
        """A partitioned send (MPI-4): buf in `partitions` equal parts;
        each Start() sends it once all its parts are readied (Pready*)."""
        _check_partitions(buf, partitions)
        self.live()
        return _requests.PartitionedRequest(
            lambda: self.Isend(buf, dest, tag), partitions, True)

    def Precv_init(self, buf, partitions, source=ANY_SOURCE, tag=ANY_TAG,
                   info=None):
        """A partitioned receive (MPI-4) into buf in `partitions` parts."""
        _check_partitions(buf, partitions)
        self.live()
        return _requests.PartitionedRequest(
            lambda: self.Irecv(buf, source, tag), partitions, False)

    def Recv_init(self, buf, source=ANY_SOURCE, tag=ANY_TAG):
        """A persistent receive into buf."""
        return _requests.Prequest(lambda: self.Irecv(buf, source, tag))

    def Isendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None,
                  source=ANY_SOURCE, recvtag=ANY_TAG):
        """Start a send and a receive; one request for both (its status is
        the receive's)."""
        # the receive is posted first: a bad recvbuf must not leave the
        # message sent, and a bad sendbuf takes the receive back
        recv = self.Irecv(recvbuf, source, recvtag)
        try:
            send = self.Isend(sendbuf, dest, sendtag)
        except BaseException:
            recv.Cancel()
            recv.Wait()
            raise
        return _requests.pair_request(send, recv, None)

    def Isendrecv_replace(self, buf, dest, sendtag=0, source=ANY_SOURCE,
                          recvtag=ANY_TAG):
        """Start sending buf (a copy of it) and receiving into it."""
        if dest == PROC_NULL and source == PROC_NULL:
            self.live()
            return _requests.CollectiveRequest._finished()
        m = bufspec.message(buf, name="buf")
        copy = m.data.copy()
        send = self.Isend(copy, dest, sendtag)
        recv = self.Irecv(m.data, source, recvtag)
        return _requests.pair_request(send, recv, m.unpack)

    def Irecv(self, buf, source=ANY_SOURCE, tag=ANY_TAG):
        """Start receiving into buf."""
        cdef Context ctx = self.live()
        if source == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        cdef Message m = message(buf, "buf")
        return p2p_request(ctx.irecv(m.buf, _any(source), tag), m,
                           m.slow.unpack if m.slow is not None else None)

    def isend(self, obj, dest, tag=0):
        cdef Context ctx = self.live()
        if dest == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        data = _dumps(obj)
        return p2p_request(ctx.isend(data, dest, tag), data, None)

    def issend(self, obj, dest, tag=0):
        """Start a synchronous send of obj."""
        cdef Context ctx = self.live()
        if dest == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        data = _dumps(obj)
        return p2p_request(ctx.isend(data, dest, tag, True), data, None)

    def irecv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG):
        """A request whose wait() returns the object received."""
        if source == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        return _requests.ObjectRecvRequest(self.live(), _any(source), tag)


cdef int _check_partitions(buf, partitions) except -1:
    if not isinstance(partitions, int) or partitions < 1:
        raise ArgumentError(f"partitions: must be an int >= 1, got "
                            f"{partitions!r}", ERR_COUNT)
    cdef Message m = message(buf, "buf")
    if m.count % partitions:
        raise ArgumentError(f"partitions: {partitions} do not divide the "
                            f"{m.count} items of buf", ERR_COUNT)
    return 0
