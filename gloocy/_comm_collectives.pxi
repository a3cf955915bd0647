# Collectives: buffers (the core moves them), objects (the pickle layer,
# _pickled.pxi) and nonblocking (schedules in the core, _schedule.pxi).


cdef class _Finish:
    """What a nonblocking collective does once its schedule is done: AVG's
    division, then unpacking into a non-contiguous datatype's memory."""
    cdef Message r          # the message received into (None: none here)
    cdef object avg         # AVG: the buffer to divide (None: not AVG)
    cdef int size           # ... by the number of ranks

    def __call__(self):
        if self.avg is not None:
            _core.divide(self.avg, self.size)
        if self.r is not None:
            self.r.unpack()


cdef _Finish _finish(Message r, object avg=None, int size=1):
    cdef _Finish f = _Finish.__new__(_Finish)
    f.r, f.avg, f.size = r, avg, size
    return f


def _alltoallw_packed(sendbuf, recvbuf, n):
    """Alltoallw's blocks packed for an alltoallv of bytes: (packed,
    send sizes, room for what comes, receive sizes, () -> unpack it)."""
    rmem, rblocks = bufspec.w_blocks(recvbuf, n, name="recvbuf")
    smem, sblocks = (rmem, rblocks) if sendbuf is IN_PLACE else \
        bufspec.w_blocks(sendbuf, n, name="sendbuf", readonly=True)
    packed = np.concatenate([d.pack(smem, c, at).view(np.uint8)
                             for c, at, d in sblocks])
    ssizes = [c * d.size for c, _, d in sblocks]
    rsizes = [c * d.size for c, _, d in rblocks]
    received = np.empty(sum(rsizes), np.uint8)

    def unpack():
        start = 0
        for (c, at, d), k in zip(rblocks, rsizes):
            d.unpack(received[start:start + k].view(d.np_dtype), rmem, c, at)
            start += k
    return packed, ssizes, received, rsizes, unpack


cdef class _Collectives(_PointToPoint):

    # -- buffer collectives --------------------------------------------------

    def Barrier(self, *, timeout=None, algorithm=None):
        """Return only when every rank has called Barrier."""
        self.live().barrier(timeout, algorithm)

    def Bcast(self, buf, root=0, *, timeout=None, algorithm=None):
        """Copy `buf` from `root` into `buf` on every other rank."""
        cdef Context ctx = self.live()
        cdef Message m = message(buf, "buf", ctx.rank == root)
        ctx.bcast(m.buf, root, timeout, algorithm)
        m.unpack()

    def Allreduce(self, sendbuf, recvbuf, op=_ops.SUM, *, timeout=None,
                  algorithm=None):
        """recvbuf = op(sendbuf of every rank); sendbuf may be IN_PLACE."""
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        cdef Message r = message(recvbuf, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        if code == OP_USER:
            u = _kernel_op(op, r)
            if u is None:
                _reduce_user(ctx, sendbuf, recvbuf, op, None, timeout)
            else:
                _reduce_in_core(ctx, s, r, u, False, False, timeout)
            return
        if op is AVG:
            _core.check_floating(r.buf)
        ctx.allreduce(None if s is None else s.buf, r.buf, code, timeout,
                      algorithm)
        if op is AVG:
            _core.divide(r.buf, ctx.size)
        r.unpack()

    def Reduce(self, sendbuf, recvbuf, op=_ops.SUM, root=0, *, timeout=None,
               algorithm=None):
        """recvbuf at root = op(sendbuf of every rank); recvbuf is ignored
        elsewhere; the root's sendbuf may be IN_PLACE."""
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        cdef bint at_root = ctx.rank == root
        cdef Message r = message(recvbuf, "recvbuf") if at_root else None
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        if r is None and s is None:
            raise ArgumentError("sendbuf: only the root may reduce in place",
                                ERR_BUFFER)
        if code == OP_USER:
            ctx._check_root(root)
            # In the core as an allreduce: every rank folds in rank order.
            u = _kernel_op(op, r if r is not None else s)
            if u is None:
                _reduce_user(ctx, sendbuf, recvbuf, op, root, timeout)
            else:
                _reduce_in_core(ctx, s, r, u, False, False, timeout)
            return
        if op is AVG:
            _core.check_floating((r or s).buf)
        ctx.reduce(None if s is None else s.buf, None if r is None else r.buf,
                   code, root, timeout, algorithm)
        if at_root:
            if op is AVG:
                _core.divide(r.buf, ctx.size)
            r.unpack()

    def Allgather(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        """Every rank's sendbuf, in rank order, into every recvbuf."""
        cdef Context ctx = self.live()
        cdef Message r = message(recvbuf, "recvbuf", False, False, ctx.size)
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        ctx.allgatherv(None if s is None else s.buf, r.buf,
                       _blocks(r, ctx.size, "recvbuf"), None, timeout,
                       algorithm)
        r.unpack()

    def Allgatherv(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        """recvbuf is [buf, counts] or [buf, (counts, displs)] (elements)."""
        cdef Context ctx = self.live()
        cdef Message r = vector_message(recvbuf, ctx.size, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        ctx.allgatherv(None if s is None else s.buf, r.buf, r.block_sizes,
                       r.block_offsets, timeout, algorithm)
        r.unpack()

    def Gather(self, sendbuf, recvbuf, root=0, *, timeout=None,
               algorithm=None):
        """Every rank's sendbuf, in rank order, into recvbuf at root."""
        cdef Context ctx = self.live()
        cdef Message r = None
        sizes = None
        if ctx.rank == root:
            r = message(recvbuf, "recvbuf", False, False, ctx.size)
            sizes = _blocks(r, ctx.size, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        ctx.gatherv(None if s is None else s.buf, None if r is None else r.buf,
                    sizes, None, root, timeout, algorithm, True)
        if r is not None:
            r.unpack()

    def Gatherv(self, sendbuf, recvbuf, root=0, *, timeout=None,
                algorithm=None):
        cdef Context ctx = self.live()
        cdef Message r = None
        if ctx.rank == root:
            r = vector_message(recvbuf, ctx.size, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        ctx.gatherv(None if s is None else s.buf,
                    None if r is None else r.buf,
                    None if r is None else r.block_sizes,
                    None if r is None else r.block_offsets, root, timeout,
                    algorithm)
        if r is not None:
            r.unpack()

    def Scatter(self, sendbuf, recvbuf, root=0, *, timeout=None,
                algorithm=None):
        """Block i of root's sendbuf into rank i's recvbuf."""
        cdef Context ctx = self.live()
        cdef Message s = None
        sizes = None
        if ctx.rank == root:
            s = message(sendbuf, "sendbuf", True, False, ctx.size)
            sizes = _blocks(s, ctx.size, "sendbuf")
        cdef Message r = message(recvbuf, "recvbuf", False, ctx.rank == root)
        ctx.scatterv(None if s is None else s.buf,
                     None if r is None else r.buf, sizes, None, root, timeout,
                     algorithm, True)
        if r is not None:
            r.unpack()

    def Scatterv(self, sendbuf, recvbuf, root=0, *, timeout=None,
                 algorithm=None):
        cdef Context ctx = self.live()
        cdef Message s = None
        if ctx.rank == root:
            s = vector_message(sendbuf, ctx.size, "sendbuf", True)
        cdef Message r = message(recvbuf, "recvbuf", False, ctx.rank == root)
        ctx.scatterv(None if s is None else s.buf,
                     None if r is None else r.buf,
                     None if s is None else s.block_sizes,
                     None if s is None else s.block_offsets, root, timeout,
                     algorithm)
        if r is not None:
            r.unpack()

    def Alltoall(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        """Block i of sendbuf to rank i; rank i's block for us into block i
        of recvbuf."""
        cdef Context ctx = self.live()
        cdef int size = ctx.size
        cdef Message r = message(recvbuf, "recvbuf", False, False, size)
        cdef Message s = message(sendbuf, "sendbuf", True, True, size)
        rsizes = _blocks(r, size, "recvbuf")
        ssizes = None if s is None else _blocks(s, size, "sendbuf")
        ctx.alltoallv(None if s is None else s.buf, ssizes, None, r.buf,
                      rsizes, None, timeout, algorithm, True)
        r.unpack()

    def Alltoallv(self, sendbuf, recvbuf, *, timeout=None, algorithm=None):
        cdef Context ctx = self.live()
        cdef Message r = vector_message(recvbuf, ctx.size, "recvbuf")
        cdef Message s = None
        if sendbuf is not IN_PLACE and sendbuf is not None:
            s = vector_message(sendbuf, ctx.size, "sendbuf", True)
        ctx.alltoallv(None if s is None else s.buf,
                      None if s is None else s.block_sizes,
                      None if s is None else s.block_offsets,
                      r.buf, r.block_sizes, r.block_offsets, timeout,
                      algorithm)
        r.unpack()

    def Alltoallw(self, sendbuf, recvbuf, *, timeout=None):
        """Alltoallv with a datatype per block and byte displacements
        ([buf, (counts, displs), datatypes]): the blocks travel packed."""
        n = self.Get_remote_size() if self.Is_inter() else self.live().size
        packed, ssizes, received, rsizes, unpack = _alltoallw_packed(
            sendbuf, recvbuf, n)
        self.Alltoallv([packed, (ssizes, _ends(ssizes)), BYTE],
                       [received, (rsizes, _ends(rsizes)), BYTE], timeout=timeout)
        unpack()

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=_ops.SUM, *,
                       timeout=None, algorithm=None):
        """Reduce sendbuf over the ranks; rank i gets recvcounts[i] items
        (default: each rank's recvbuf size; in place: recvbuf holds the
        whole input, by default in equal blocks, and gets our block at its
        start)."""
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        cdef Message r = message(recvbuf, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        if recvcounts is None and s is None:   # recvbuf splits evenly
            counts = [r.count // ctx.size] * ctx.size
        elif recvcounts is None:
            every = np.empty(ctx.size, np.int64)
            ctx.allgatherv(np.array([r.count], np.int64), every,
                           [8] * ctx.size, None, timeout, None)
            counts = every.tolist()
        else:
            counts = [int(n) for n in recvcounts]
        self._reduce_scatter(ctx, r, s, counts, op, code, timeout, algorithm)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=_ops.SUM, *,
                             timeout=None, algorithm=None):
        """Reduce sendbuf (size x block) over the ranks; rank i gets block i."""
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        cdef Message r = message(recvbuf, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        block = r.count // ctx.size if s is None else r.count
        self._reduce_scatter(ctx, r, s, [block] * ctx.size, op, code, timeout,
                             algorithm)

    cdef _reduce_scatter(self, Context ctx, Message r, Message s, list counts,
                         op, int code, timeout, algorithm):
        if code == OP_USER:     # the nonblocking form's schedule, waited for
            (<NbcRequest>self._ireduce_scatter(ctx, r, s, counts, op,
                                               code))._wait(None, timeout)
            return
        items = r.buf.count // r.count if r.count else 1    # elements per item
        if op is AVG:
            _core.check_floating(r.buf)
        ctx.reduce_scatter(None if s is None else s.buf, r.buf,
                           [n * items for n in counts], code, timeout,
                           algorithm)
        if op is AVG:
            _core.divide(r.data[:counts[ctx.rank] * items], ctx.size)
        r.unpack()

    # -- object collectives (the pickle layer: _pickled.pxi) -------------------

    def barrier(self, *, timeout=None):
        self.Barrier(timeout=timeout)

    def bcast(self, obj=None, root=0, *, timeout=None):
        """Return root's `obj` on every rank."""
        lock = _comm_lock(self, "bcast")
        lock.acquire()
        try:
            return bcast_object(self.live(), obj, root, timeout)
        finally:
            lock.release()

    def allgather(self, obj, *, timeout=None):
        """List of every rank's `obj`, in rank order."""
        lock = _comm_lock(self, "allgather")
        lock.acquire()
        try:
            return allgather_objects(self.live(), obj, timeout, OBJ_ALLGATHER)
        finally:
            lock.release()

    def allreduce(self, obj, op=_ops.SUM, *, timeout=None):
        """op applied to every rank's `obj` in rank order (AVG: the sum
        divided by the number of ranks)."""
        cdef Context ctx = self.live()
        _check_callable(op)
        return fold_objects(allgather_objects(ctx, obj, timeout, OBJ_ALLREDUCE),
                            op)

    def gather(self, obj, root=0, *, timeout=None):
        """List of every rank's `obj` at root, None elsewhere."""
        lock = _comm_lock(self, "gather")
        lock.acquire()
        try:
            return gather_objects(self.live(), obj, root, timeout, OBJ_GATHER)
        finally:
            lock.release()

    def scatter(self, objs, root=0, *, timeout=None):
        """objs[i] of root's list (len == size) to rank i."""
        lock = _comm_lock(self, "scatter")
        lock.acquire()
        try:
            return scatter_objects(self.live(), objs, root, timeout)
        finally:
            lock.release()

    def alltoall(self, objs, *, timeout=None):
        """objs[i] to rank i; returns the list of what each rank sent us."""
        lock = _comm_lock(self, "alltoall")
        lock.acquire()
        try:
            return alltoall_objects(self.live(), objs, timeout)
        finally:
            lock.release()

    def reduce(self, obj, op=_ops.SUM, root=0, *, timeout=None):
        """op applied to every rank's `obj` in rank order, at root (None
        elsewhere)."""
        cdef Context ctx = self.live()
        _check_callable(op)
        objs = gather_objects(ctx, obj, root, timeout, OBJ_REDUCE)
        return None if objs is None else fold_objects(objs, op)

    # -- nonblocking collectives ---------------------------------------------------
    # Each starts a schedule in the core (see requests); Intercomm and
    # Topocomm have their own.

    def Ibarrier(self):
        return nbc_request(self.live().ibarrier(), None, None)

    def Ibcast(self, buf, root=0):
        cdef Context ctx = self.live()
        cdef Message m = message(buf, "buf", ctx.rank == root)
        return nbc_request(ctx.ibcast(m.buf, root), m, _finish(m))

    def Iallreduce(self, sendbuf, recvbuf, op=_ops.SUM):
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        cdef Message r = message(recvbuf, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        if code == OP_USER:
            return _start_in_core(ctx, s, r, op, False, False, ctx.size,
                                  sendbuf, recvbuf, None)
        if op is AVG:
            _core.check_floating(r.buf)
        h = ctx.iallreduce(None if s is None else s.buf, r.buf, code)
        return nbc_request(h, (r, s), _finish(r, r.buf if op is AVG else None,
                                              ctx.size))

    def Ireduce(self, sendbuf, recvbuf, op=_ops.SUM, root=0):
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        cdef bint at_root = ctx.rank == root
        cdef Message r = message(recvbuf, "recvbuf") if at_root else None
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        if r is None and s is None:
            raise ArgumentError("sendbuf: only the root may reduce in place",
                                ERR_BUFFER)
        if code == OP_USER:
            ctx._check_root(root)
            return _start_in_core(ctx, s, r, op, False, False, ctx.size,
                                  sendbuf, recvbuf, root)
        if op is AVG:
            _core.check_floating((r or s).buf)
        h = ctx.ireduce(None if s is None else s.buf,
                        None if r is None else r.buf, code, root)
        return nbc_request(h, (r, s), _finish(
            r, r.buf if op is AVG and r is not None else None, ctx.size))

    def Iallgather(self, sendbuf, recvbuf):
        cdef Context ctx = self.live()
        cdef Message r = message(recvbuf, "recvbuf", False, False, ctx.size)
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        h = ctx.iallgatherv(None if s is None else s.buf, r.buf,
                            _blocks(r, ctx.size, "recvbuf"), None)
        return nbc_request(h, (r, s), _finish(r))

    def Iallgatherv(self, sendbuf, recvbuf):
        cdef Context ctx = self.live()
        cdef Message r = vector_message(recvbuf, ctx.size, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        h = ctx.iallgatherv(None if s is None else s.buf, r.buf,
                            r.block_sizes, r.block_offsets)
        return nbc_request(h, (r, s), _finish(r))

    def Igather(self, sendbuf, recvbuf, root=0):
        cdef Context ctx = self.live()
        cdef Message r = None
        sizes = None
        if ctx.rank == root:
            r = message(recvbuf, "recvbuf", False, False, ctx.size)
            sizes = _blocks(r, ctx.size, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        h = ctx.igatherv(None if s is None else s.buf,
                         None if r is None else r.buf, sizes, None, root)
        return nbc_request(h, (r, s), _finish(r))

    def Igatherv(self, sendbuf, recvbuf, root=0):
        cdef Context ctx = self.live()
        cdef Message r = None
        if ctx.rank == root:
            r = vector_message(recvbuf, ctx.size, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        h = ctx.igatherv(None if s is None else s.buf,
                         None if r is None else r.buf,
                         None if r is None else r.block_sizes,
                         None if r is None else r.block_offsets, root)
        return nbc_request(h, (r, s), _finish(r))

    def Iscatter(self, sendbuf, recvbuf, root=0):
        cdef Context ctx = self.live()
        cdef Message s = None
        sizes = None
        if ctx.rank == root:
            s = message(sendbuf, "sendbuf", True, False, ctx.size)
            sizes = _blocks(s, ctx.size, "sendbuf")
        cdef Message r = message(recvbuf, "recvbuf", False, ctx.rank == root)
        h = ctx.iscatterv(None if s is None else s.buf,
                          None if r is None else r.buf, sizes, None, root)
        return nbc_request(h, (r, s), _finish(r))

    def Iscatterv(self, sendbuf, recvbuf, root=0):
        cdef Context ctx = self.live()
        cdef Message s = None
        if ctx.rank == root:
            s = vector_message(sendbuf, ctx.size, "sendbuf", True)
        cdef Message r = message(recvbuf, "recvbuf", False, ctx.rank == root)
        h = ctx.iscatterv(None if s is None else s.buf,
                          None if r is None else r.buf,
                          None if s is None else s.block_sizes,
                          None if s is None else s.block_offsets, root)
        return nbc_request(h, (r, s), _finish(r))

    def Ialltoall(self, sendbuf, recvbuf):
        cdef Context ctx = self.live()
        cdef int size = ctx.size
        cdef Message r = message(recvbuf, "recvbuf", False, False, size)
        cdef Message s = message(sendbuf, "sendbuf", True, True, size)
        rsizes = _blocks(r, size, "recvbuf")
        ssizes = None if s is None else _blocks(s, size, "sendbuf")
        h = ctx.ialltoallv(None if s is None else s.buf, ssizes, None, r.buf,
                           rsizes, None)
        return nbc_request(h, (r, s), _finish(r))

    def Ialltoallv(self, sendbuf, recvbuf):
        cdef Context ctx = self.live()
        cdef Message r = vector_message(recvbuf, ctx.size, "recvbuf")
        cdef Message s = None
        if sendbuf is not IN_PLACE and sendbuf is not None:
            s = vector_message(sendbuf, ctx.size, "sendbuf", True)
        h = ctx.ialltoallv(None if s is None else s.buf,
                           None if s is None else s.block_sizes,
                           None if s is None else s.block_offsets,
                           r.buf, r.block_sizes, r.block_offsets)
        return nbc_request(h, (r, s), _finish(r))

    def Ialltoallw(self, sendbuf, recvbuf):
        packed, ssizes, received, rsizes, unpack = _alltoallw_packed(
            sendbuf, recvbuf, self.live().size)
        h = self.live().ialltoallv(packed, ssizes, _ends(ssizes), received,
                                   rsizes, _ends(rsizes))
        return nbc_request(h, (packed, received), unpack)

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=_ops.SUM):
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        cdef Message r = message(recvbuf, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        if recvcounts is None and s is None:   # recvbuf splits evenly
            counts = [r.count // ctx.size] * ctx.size
        elif recvcounts is None:
            every = np.empty(ctx.size, np.int64)
            ctx.allgatherv(np.array([r.count], np.int64), every,
                           [8] * ctx.size, None, None, None)
            counts = every.tolist()
        else:
            counts = [int(n) for n in recvcounts]
        return self._ireduce_scatter(ctx, r, s, counts, op, code)

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=_ops.SUM):
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        cdef Message r = message(recvbuf, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        block = r.count // ctx.size if s is None else r.count
        return self._ireduce_scatter(ctx, r, s, [block] * ctx.size, op, code)

    cdef _ireduce_scatter(self, Context ctx, Message r, Message s,
                          list counts, op, int code):
        items = r.buf.count // r.count if r.count else 1    # elements per item
        if code == OP_USER:
            return _start_reduce_scatter_user(ctx, s, r, op, [
                n * items for n in counts], counts)
        if op is AVG:
            _core.check_floating(r.buf)
        h = ctx.ireduce_scatter(None if s is None else s.buf, r.buf,
                                [n * items for n in counts], code)
        return nbc_request(h, (r, s), _finish(
            r, r.data[:counts[ctx.rank] * items] if op is AVG else None,
            ctx.size))

    cdef _iscan(self, sendbuf, recvbuf, op, bint exclusive):
        """Iscan and Iexscan (Intracomm's)."""
        cdef Context ctx = self.live()
        cdef int code = _op_code(op)
        if op is AVG:
            raise TypeError("op: AVG is not defined for scans")
        cdef Message r = message(recvbuf, "recvbuf")
        cdef Message s = message(sendbuf, "sendbuf", True, True)
        if code == OP_USER:
            return _start_in_core(ctx, s, r, op, True, exclusive,
                                  ctx.rank if exclusive else ctx.rank + 1,
                                  sendbuf, recvbuf, None)
        h = ctx.iscan(None if s is None else s.buf, r.buf, code, exclusive)
        return nbc_request(h, (r, s), _finish(r))

    # -- persistent collectives (MPI-4): each Start() runs the nonblocking
    # form again, on the buffers' contents of that moment; `info` is
    # accepted and ignored --------------------------------------------------

    def _persistent(self, str method, *args):
        self.live()
        started = getattr(self, method)
        return _requests.Prequest(lambda: started(*args))

    def Barrier_init(self, info=None):
        return self._persistent("Ibarrier")

    def Bcast_init(self, buf, root=0, info=None):
        return self._persistent("Ibcast", buf, root)

    def Reduce_init(self, sendbuf, recvbuf, op=_ops.SUM, root=0, info=None):
        return self._persistent("Ireduce", sendbuf, recvbuf, op, root)

    def Allreduce_init(self, sendbuf, recvbuf, op=_ops.SUM, info=None):
        return self._persistent("Iallreduce", sendbuf, recvbuf, op)

    def Gather_init(self, sendbuf, recvbuf, root=0, info=None):
        return self._persistent("Igather", sendbuf, recvbuf, root)

    def Gatherv_init(self, sendbuf, recvbuf, root=0, info=None):
        return self._persistent("Igatherv", sendbuf, recvbuf, root)

    def Scatter_init(self, sendbuf, recvbuf, root=0, info=None):
        return self._persistent("Iscatter", sendbuf, recvbuf, root)

    def Scatterv_init(self, sendbuf, recvbuf, root=0, info=None):
        return self._persistent("Iscatterv", sendbuf, recvbuf, root)

    def Allgather_init(self, sendbuf, recvbuf, info=None):
        return self._persistent("Iallgather", sendbuf, recvbuf)

    def Allgatherv_init(self, sendbuf, recvbuf, info=None):
        return self._persistent("Iallgatherv", sendbuf, recvbuf)

    def Alltoall_init(self, sendbuf, recvbuf, info=None):
        return self._persistent("Ialltoall", sendbuf, recvbuf)

    def Alltoallv_init(self, sendbuf, recvbuf, info=None):
        return self._persistent("Ialltoallv", sendbuf, recvbuf)

    def Alltoallw_init(self, sendbuf, recvbuf, info=None):
        return self._persistent("Ialltoallw", sendbuf, recvbuf)

    def Reduce_scatter_init(self, sendbuf, recvbuf, recvcounts=None,
                            op=_ops.SUM, info=None):
        return self._persistent("Ireduce_scatter", sendbuf, recvbuf,
                                recvcounts, op)

    def Reduce_scatter_block_init(self, sendbuf, recvbuf, op=_ops.SUM,
                                  info=None):
        return self._persistent("Ireduce_scatter_block", sendbuf, recvbuf, op)
