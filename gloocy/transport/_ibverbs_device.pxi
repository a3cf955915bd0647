# The verbs library and its devices (included by _ibverbs.pyx): load()
# opens libibverbs, device_names() lists the devices, IbvDevice holds one
# device's context, port, protection domain and address.


def load(path="libibverbs.so.1"):
    """Open libibverbs (once); RuntimeError saying what is missing."""
    cdef bytes p = path.encode()
    if glv_load(p) != 0:
        raise RuntimeError(glv_error.decode(errors="replace"))


def device_names():
    """The names of the RDMA devices (load() first); [] when the kernel has
    no RDMA (ibv_get_device_list fails with ENOSYS there)."""
    cdef int n = 0, i
    cdef glv_device **lst = glv.get_device_list(&n)
    if lst is NULL:
        return []
    try:
        return [glv.get_device_name(lst[i]).decode() for i in range(n)]
    finally:
        glv.free_device_list(lst)


cdef class IbvDevice:
    """An open device, its protection domain and the port in use (shared by
    every pair of the process; closed with the last of them)."""
    cdef glv_context *ctx
    cdef glv_pd *pd
    cdef readonly str name
    cdef readonly int port
    cdef readonly int gid_index       # -1: address by LID (InfiniBand)
    cdef readonly int lid
    cdef readonly int mtu             # the port's active MTU (enum ibv_mtu)
    cdef readonly bint ethernet       # RoCE: address by GID
    cdef glv_gid gid
    cdef readonly RegCache cache      # registrations of user buffers
    # Asynchronous events, read by whichever pair finds the device's fd
    # readable (drain_async) and kept for all: (element address, type).
    cdef list events
    cdef int events_seen              # len(events), for pairs without the GIL
    cdef double async_at              # when drain_async last read
    cdef object __weakref__

    def __cinit__(self, str name, int port, int gid_index):
        cdef int n = 0, i
        cdef glv_device **lst = glv.get_device_list(&n)
        cdef glv_port_attr attr
        cdef glv_device *dev = NULL
        self.name = name
        self.port = port
        if lst is NULL:
            raise RuntimeError(f"ibverbs: no RDMA devices ({os.strerror(errno)})")
        try:
            for i in range(n):
                if glv.get_device_name(lst[i]).decode() == name:
                    dev = lst[i]
            if dev is NULL:
                raise RuntimeError(f"ibverbs: no device named {name!r}")
            self.ctx = glv.open_device(dev)
        finally:
            glv.free_device_list(lst)
        if self.ctx is NULL:
            raise RuntimeError(f"ibverbs: cannot open {name} ({os.strerror(errno)})")
        self.pd = glv.alloc_pd(self.ctx)
        if self.pd is NULL:
            raise RuntimeError(f"ibverbs: cannot allocate a protection domain on {name}")
        self.cache = RegCache()
        self.cache.pd = self.pd
        self.events = []
        # async events are read when a transfer fails, never waited for
        fcntl(self.ctx.async_fd, F_SETFL, fcntl(self.ctx.async_fd, F_GETFL) | O_NONBLOCK)
        memset(&attr, 0, sizeof(attr))
        if glv.query_port(self.ctx, port, &attr) != 0:
            raise RuntimeError(f"ibverbs: {name} has no port {port}")
        if attr.state != GLV_PORT_ACTIVE:
            raise RuntimeError(f"ibverbs: port {port} of {name} is not active "
                               f"(state {attr.state})")
        self.lid = attr.lid
        self.mtu = attr.active_mtu
        self.ethernet = attr.link_layer == GLV_LINK_LAYER_ETHERNET
        self.gid_index = gid_index if (gid_index >= 0 or self.ethernet) else -1
        if self.ethernet and self.gid_index < 0:
            self.gid_index = 0
        memset(&self.gid, 0, sizeof(self.gid))
        if self.gid_index >= 0 and glv.query_gid(self.ctx, port, self.gid_index,
                                                 &self.gid) != 0:
            raise RuntimeError(f"ibverbs: {name} port {port} has no GID index "
                               f"{self.gid_index}")

    def __dealloc__(self):
        if self.cache is not None:
            self.cache.close()
        if self.pd is not NULL:
            glv.dealloc_pd(self.pd)
        if self.ctx is not NULL:
            glv.close_device(self.ctx)

    cdef int drain_async(self) except -1:
        """Read the device's pending asynchronous events (non-blocking)."""
        cdef glv_async_event ev
        while glv.get_async_event(self.ctx, &ev) == 0:
            if ev.event_type in (0, 1, 2, 3, 8, 10):    # kept: the fatal ones
                self.events.append((<size_t>ev.element.qp, ev.event_type))
            glv.ack_async_event(&ev)
        self.events_seen = len(self.events)
        return 0

    cdef str fatal_for(self, size_t qp, size_t cq):
        """The names of the events that end a queue pair `qp` (its own
        errors, its CQ's, the device's or the port's); '' if none."""
        names = [_EVENTS.get(kind, str(kind)) for at, kind in self.events
                 if kind in (8, 10) or (kind in (1, 2, 3) and at == qp)
                 or (kind == 0 and at == cq)]
        return ", ".join(dict.fromkeys(names))

    def address(self):
        """(lid, gid bytes) of our port."""
        return self.lid, bytes(self.gid.raw[:16])
