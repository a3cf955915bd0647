# Point-to-point: blocking, nonblocking and persistent, buffers and
# objects.


cdef class _PointToPoint(_CommBase):

    # -- point-to-point ------------------------------------------------------

    def Send(self, buf, dest, tag=0, *, timeout=None):
        """Send buf to rank `dest`; returns once buf may be reused."""
        cdef Context ctx = self.live()
        if dest != PROC_NULL:
            ctx.send(message(buf, "buf", True).buf, dest, tag, timeout)

    Ssend = Rsend = Bsend = Send

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
        cdef Message r
        sent = None
        if dest != PROC_NULL:
            sent = ctx.isend(message(sendbuf, "sendbuf", True).buf, dest,
                             sendtag)
        if source == PROC_NULL:
            _proc_null(status)
        else:
            r = message(recvbuf, "recvbuf")
            got = ctx.recv(r.buf, _any(source), recvtag, timeout)
            r.unpack(got[2])
            if status is not None:
                status._set(*got)
        if sent is not None:
            sent.wait(timeout)

    def Sendrecv_replace(self, buf, dest, sendtag=0, source=ANY_SOURCE,
                         recvtag=ANY_TAG, status=None, *, timeout=None):
        """Send buf, then receive into it."""
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

    ssend = bsend = send

    def recv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG, status=None, *,
             timeout=None):
        """The next object from `source` with `tag`."""
        return recv_object(self.live(), source, tag, status, timeout)

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

    Issend = Irsend = Ibsend = Isend

    def Send_init(self, buf, dest, tag=0):
        """A persistent send: each Start() sends buf's current contents."""
        return _requests.Prequest(lambda: self.Isend(buf, dest, tag))

    Ssend_init = Bsend_init = Rsend_init = Send_init

    def Recv_init(self, buf, source=ANY_SOURCE, tag=ANY_TAG):
        """A persistent receive into buf."""
        return _requests.Prequest(lambda: self.Irecv(buf, source, tag))

    def Isendrecv(self, *args, **kwargs):
        raise NotImplementedError("Isendrecv (MPI-4) is not in gloocy yet")

    Isendrecv_replace = Isendrecv

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

    issend = ibsend = isend

    def irecv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG):
        """A request whose wait() returns the object received."""
        if source == PROC_NULL:
            return _requests.CollectiveRequest._finished()
        return _requests.ObjectRecvRequest(self.live(), _any(source), tag)
