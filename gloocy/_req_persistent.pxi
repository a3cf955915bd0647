# Included by requests.pyx: persistent requests (Send_init, Recv_init,
# the collective *_init) and partitioned ones (Psend_init, Precv_init).

cdef class Prequest(Request):
    """A persistent request (Send_init, Recv_init): Start() runs the
    operation again; done, it is inactive but not REQUEST_NULL until Free."""

    def __init__(self, start=None):
        """start: () -> the Request of one run (how the communicator makes
        one); or, as in mpi4py, a Prequest to be a new handle on (None or
        a null request: a null one)."""
        cdef Request other
        if isinstance(start, Request):
            other = (<Request>start)._target()
            if other._is_null():
                self._freed = True
            elif not isinstance(other, Prequest):
                raise TypeError("request: a Prequest is a handle on a Prequest "
                                f"only, not on a {type(other).__name__}")
            else:
                self._of = other
        elif start is None:
            self._freed = True
        else:
            self._start = start

    def Start(self):
        if self._of is not None:
            return self._of.Start()
        if self._freed:
            raise GloocyError("request: freed persistent request", ERR_REQUEST)
        self._req = self._start()
        self._active = True

    @staticmethod
    def Startall(requests):
        for r in requests:
            r.Start()

    cdef int _wait(self, status, object timeout) except -1:
        if self._of is not None:
            return self._of._wait(status, timeout)
        return self._req._wait(status, timeout)

    cdef int _test(self, status) except -1:
        if self._of is not None:
            return self._of._test(status)
        return self._req._test(status)

    cdef object _value(self):
        if self._of is not None:
            return self._of._value()
        return None if self._req is None else self._req._value()

    def Cancel(self):
        if self._of is not None:
            return self._of.Cancel()
        if self._req is not None and self._active:
            self._req.Cancel()

    def Free(self):
        if self._of is not None:
            return self._of.Free()
        self._freed = True
        self._active = False

    cdef bint _is_null(self):
        if self._of is not None:
            return self._of._is_null()
        return self._freed


cdef class PartitionedRequest(Prequest):
    """Psend_init / Precv_init (MPI-4): the buffer is `partitions` equal
    parts. A send goes out, whole, once every part of it has been readied
    (Pready*) in this run; a receive is one receive of the whole buffer, so
    Parrived(i) says whether all of it has arrived (MPI allows that)."""

    def __init__(self, post, int partitions, bint is_send):
        Prequest.__init__(self, post)
        self._post, self._parts, self._is_send = post, partitions, is_send
        self._start = self._begin

    def _begin(self):
        self._ready = bytearray(self._parts)
        self._nready = 0
        return None if self._is_send else self._post()

    cdef int _check_run(self, str what) except -1:
        if self._freed:
            raise GloocyError(f"{what}: freed partitioned request", ERR_REQUEST)
        if not self._active:
            raise GloocyError(f"{what}: the partitioned request is not started "
                              "(Start it first)", ERR_REQUEST)
        return 0

    cdef int _check_part(self, str what, str name, p) except -1:
        if not isinstance(p, int) or not 0 <= p < self._parts:
            raise ArgumentError(f"{what}: {name}: {p!r} is not a partition "
                                f"(0..{self._parts - 1})", ERR_ARG)
        return 0

    def Pready(self, partition):
        """Partition `partition` of the send buffer is ready to go."""
        self.Pready_list([partition])

    def Pready_range(self, partition_low, partition_high):
        """Partitions partition_low..partition_high (inclusive) are ready."""
        self._check_part("Pready_range", "partition_low", partition_low)
        self._check_part("Pready_range", "partition_high", partition_high)
        if partition_high < partition_low:
            raise ArgumentError(f"Pready_range: partition_high {partition_high} "
                                f"< partition_low {partition_low}", ERR_ARG)
        self.Pready_list(range(partition_low, partition_high + 1))

    def Pready_list(self, partitions):
        """The partitions listed are ready."""
        cdef str what = "Pready"
        self._check_run(what)
        if not self._is_send:
            raise GloocyError("Pready: a receive's partitions are not readied "
                              "(Pready is for Psend_init requests)", ERR_REQUEST)
        parts = list(partitions)
        for p in parts:
            self._check_part(what, "partition", p)
        for p in parts:
            if self._ready[p]:
                raise GloocyError(f"Pready: partition {p} is ready already in "
                                  "this run", ERR_ARG)
            self._ready[p] = 1
            self._nready += 1
        if self._nready == self._parts and self._req is None:
            self._req = self._post()

    def Parrived(self, partition):
        """Has partition `partition` of the receive buffer arrived?"""
        self._check_run("Parrived")
        if self._is_send:
            raise GloocyError("Parrived: is for Precv_init requests", ERR_REQUEST)
        self._check_part("Parrived", "partition", partition)
        return self._req._test(None) == 1

    cdef int _pending_parts(self) except -1:
        if self._req is None:
            missing = [i for i in range(self._parts) if not self._ready[i]]
            raise GloocyError(
                f"partitioned send: partitions {missing} were never readied "
                "(Pready) in this run: waiting would never end", ERR_REQUEST)
        return 0

    cdef int _wait(self, status, object timeout) except -1:
        self._pending_parts()
        return self._req._wait(status, timeout)

    cdef int _test(self, status) except -1:
        if self._req is None:
            return 0
        return self._req._test(status)
