# cython: language_level=3
"""ibverbs (RDMA) transport: one reliable-connected queue pair per peer.

libibverbs.so.1 is opened at run time (`load()`, dlopen) with only the
stable verbs ABI declared (_ibv_abi.h), so gloocy builds and imports where
rdma-core is absent. Frames go over the QP as an ordered stream (framing,
matching and every check of what arrives are _stream.pyx's, as for TCP and
shared memory), carried by two protocols:

- eager: up to SLOT bytes of stream per SEND_WITH_IMM, copied into a
  registered send slot and received into a pre-posted receive slot. A
  sender spends one credit per message and never has more in flight than
  the peer has slots posted; credits come back in the immediate of every
  message the other way, or in a CREDIT message when half are owed.
- rendezvous, for a payload of at least GLOOCY_IB_RDV_BYTES: the sender
  registers the payload and sends its address and rkey (RDV); the receiver
  registers the receive buffer and RDMA-reads the payload straight into it,
  then says FIN. No copy of the payload on either side. Registrations of
  user buffers are kept in the device's cache while their owner lives
  (_ibverbs_regcache.pxi); other memory is registered for one transfer.

Completions arrive through a completion channel; the pair's poll fd is an
epoll set of that channel and of the TCP connection of the handshake, kept
open so that a peer that dies while we only wait for it is noticed (the
kernel closes its socket) even with no send of ours outstanding.
"""

import os

from libc.errno cimport errno, EINTR, EAGAIN, ENOMEM
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memcpy, memset
from posix.unistd cimport close as c_close, usleep
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

from gloocy._core cimport Xfer, XF_HEAP
from gloocy.transport._stream cimport StreamPair, iovec, WOULD_BLOCK

from gloocy.errors import PeerLostError, ProtocolError

from gloocy.transport._ibv_abi cimport *

# the remote address of an RDMA work request (a union member in C)
cdef extern from *:
    """
    #include "_ibv_abi.h"
    static void glv_set_rdma(struct glv_send_wr *wr, uint64_t addr, uint32_t rkey) {
        wr->wr.rdma.remote_addr = addr;
        wr->wr.rdma.rkey = rkey;
    }
    """
    void glv_set_rdma(glv_send_wr *wr, uint64_t addr, uint32_t rkey) nogil

cdef extern from "<arpa/inet.h>" nogil:
    uint32_t htonl(uint32_t x)
    uint32_t ntohl(uint32_t x)

cdef extern from "<sys/epoll.h>" nogil:
    union epoll_data:
        int fd
    struct epoll_event:
        uint32_t events
        epoll_data data
    int epoll_create1(int flags)
    int epoll_ctl(int epfd, int op, int fd, epoll_event *ev)
    enum:
        EPOLL_CLOEXEC
        EPOLL_CTL_ADD
        EPOLLIN
        EPOLLRDHUP

cdef extern from "<sys/socket.h>" nogil:
    ssize_t recv(int fd, void *buf, size_t n, int flags)
    enum:
        MSG_DONTWAIT
        MSG_PEEK

cdef extern from "<fcntl.h>" nogil:
    int fcntl(int fd, int cmd, ...)
    enum:
        F_GETFL
        F_SETFL
        O_NONBLOCK

cdef extern from "<poll.h>" nogil:
    enum:
        POLLIN


# What a message is (low 4 bits of its immediate; the rest: credits returned).
cdef enum MsgKind:
    MSG_DATA = 1        # stream bytes
    MSG_RDV = 2         # a payload to RDMA-read: RdvInfo
    MSG_FIN = 3         # the payload of our RDV was read (no bytes)
    MSG_CREDIT = 4      # credits only (no bytes)

# What a work request is (high 32 bits of its wr_id).
cdef enum WrKind:
    WR_RECV = 1         # low bits: the receive slot
    WR_SEND = 2         # low bits: the send slot, or NO_SLOT
    WR_READ = 3

cdef enum:
    NO_SLOT = 0xffffffff
    CTL_SLOTS = 8       # receives beyond the data slots, for CREDIT and FIN
    CTL_MAX = 4         # of which we have at most this many in flight
    POLL_BATCH = 16
    READ_WAIT_MS = 10000    # bound of the wait in post_recv for a read in flight

ctypedef struct RdvInfo:        # the payload of an RDV message
    uint64_t addr
    uint64_t length
    uint32_t rkey
    uint32_t pad


cdef int _raise_verbs(str what, int err) except -1 with gil:
    raise OSError(err, f"ibverbs: {what} failed: {os.strerror(err) if err else 'error'}")


cdef void _dereg(glv_mr **mr) noexcept nogil:
    if mr[0] is not NULL:
        glv.dereg_mr(mr[0])
        mr[0] = NULL


# Work completion statuses (enum ibv_wc_status) named in errors.
_WC_STATUS = {1: "IBV_WC_LOC_LEN_ERR (a message longer than its receive)",
              2: "IBV_WC_LOC_QP_OP_ERR", 4: "IBV_WC_LOC_PROT_ERR (a bad lkey "
              "or local memory outside its registration)",
              9: "IBV_WC_REM_INV_REQ_ERR", 10: "IBV_WC_REM_ACCESS_ERR (a bad "
              "rkey, or remote memory outside its registration or access)",
              11: "IBV_WC_REM_OP_ERR", 14: "IBV_WC_LOC_RDD_VIOL_ERR"}


# Asynchronous events (enum ibv_event_type) named in errors.
_EVENTS = {0: "IBV_EVENT_CQ_ERR", 1: "IBV_EVENT_QP_FATAL", 2: "IBV_EVENT_QP_REQ_ERR",
           3: "IBV_EVENT_QP_ACCESS_ERR", 8: "IBV_EVENT_DEVICE_FATAL",
           9: "IBV_EVENT_PORT_ACTIVE", 10: "IBV_EVENT_PORT_ERR"}


include "_ibverbs_regcache.pxi"   # RegCache: registrations of user buffers
include "_ibverbs_device.pxi"     # load(), device_names(), IbvDevice


cdef class IbvPair(StreamPair):
    """A Pair over one RC queue pair (see the module docstring)."""
    cdef IbvDevice dev
    cdef glv_comp_channel *chan
    cdef glv_cq *cq
    cdef glv_qp *qp
    cdef int sock                 # the handshake's TCP connection (liveness)
    cdef int slots                # data slots each way
    cdef int slot_bytes
    cdef int64_t rdv_min          # payloads at least this go by rendezvous
    cdef char *rbuf               # receive slots (slots + CTL_SLOTS)
    cdef char *sbuf               # send slots
    cdef glv_mr *rmr
    cdef glv_mr *smr
    cdef glv_mr *stage_mr
    cdef int *sfree               # free send slots (a stack)
    cdef int nsfree
    cdef int credits              # data messages we may still send
    cdef int owed                 # credits the peer has not been given back
    cdef int ctl_out              # CREDIT/FIN messages in flight
    cdef int sends_out            # send work requests not completed
    # arrived DATA/RDV messages, oldest first (a ring of slots + lengths)
    cdef int *in_slot
    cdef int *in_len
    cdef int *in_kind
    cdef int in_head
    cdef int in_count
    cdef int in_off               # bytes of the oldest one consumed
    # the rendezvous we receive (the RDV at the head of the inbox)
    cdef RdvInfo rr
    cdef bint rr_parsed           # rr holds the head RDV (what is left of it)
    cdef bint rr_bounce           # its registration was refused: via the stage
    cdef bint rr_reading          # an RDMA read is in flight ...
    cdef bint rr_done             # ... and has completed
    cdef char *rr_dst
    cdef int64_t rr_n
    cdef glv_mr *rr_mr            # rr_reg's (NULL: read through the stage)
    cdef RegEntry rr_reg
    # the rendezvous we send (waiting for its FIN)
    cdef const char *rs_base
    cdef int64_t rs_len
    cdef glv_mr *rs_mr            # rs_reg's
    cdef RegEntry rs_reg
    cdef bint rs_fin
    cdef const char *rs_refused_lo    # a payload the device would not register
    cdef const char *rs_refused_hi    # (the rest of it goes eager, untried)
    cdef int failed_status        # a failed work completion's status (0: none)
    cdef int events_seen          # of the device's async events, checked
    cdef bint sock_eof

    def __cinit__(self, IbvDevice dev, int sock, int rank, int peer, str address,
                  *, int slots=64, int slot_bytes=8192, int64_t rdv_min=32768):
        cdef glv_qp_init_attr init
        cdef glv_qp_attr attr
        cdef epoll_event ev
        cdef int i, nrecv = slots + CTL_SLOTS
        self.dev = dev
        self.sock = sock
        self.rank = rank
        self.peer = peer
        self.address = address
        self.slots = slots
        self.slot_bytes = slot_bytes
        self.rdv_min = rdv_min
        self.credits = slots
        self.fd = epoll_create1(EPOLL_CLOEXEC)
        if self.fd < 0:
            _raise_verbs("epoll_create1", errno)
        self.chan = glv.create_comp_channel(dev.ctx)
        if self.chan is NULL:
            _raise_verbs("ibv_create_comp_channel", errno)
        fcntl(self.chan.fd, F_SETFL, fcntl(self.chan.fd, F_GETFL) | O_NONBLOCK)
        ev.events = EPOLLIN
        ev.data.fd = self.chan.fd
        if epoll_ctl(self.fd, EPOLL_CTL_ADD, self.chan.fd, &ev) != 0:
            _raise_verbs("epoll_ctl", errno)
        # the device's asynchronous events (port down, QP fatal) wake us too
        ev.events = EPOLLIN
        ev.data.fd = dev.ctx.async_fd
        if epoll_ctl(self.fd, EPOLL_CTL_ADD, dev.ctx.async_fd, &ev) != 0:
            _raise_verbs("epoll_ctl", errno)
        self.sock = -1
        if sock >= 0:
            self.watch(sock)
        self.cq = glv.create_cq(dev.ctx, 2 * nrecv + 2 * CTL_MAX + 8, NULL, self.chan, 0)
        if self.cq is NULL:
            _raise_verbs("ibv_create_cq", errno)
        memset(&init, 0, sizeof(init))
        init.send_cq = self.cq
        init.recv_cq = self.cq
        init.cap.max_send_wr = slots + CTL_MAX + 4
        init.cap.max_recv_wr = nrecv
        init.cap.max_send_sge = 1
        init.cap.max_recv_sge = 1
        init.qp_type = GLV_QPT_RC
        self.qp = glv.create_qp(dev.pd, &init)
        if self.qp is NULL:
            _raise_verbs("ibv_create_qp", errno)
        self.rbuf = <char *>calloc(nrecv, slot_bytes)
        self.sbuf = <char *>calloc(slots, slot_bytes)
        self.sfree = <int *>malloc(slots * sizeof(int))
        self.in_slot = <int *>malloc(nrecv * sizeof(int))
        self.in_len = <int *>malloc(nrecv * sizeof(int))
        self.in_kind = <int *>malloc(nrecv * sizeof(int))
        if (self.rbuf is NULL or self.sbuf is NULL or self.sfree is NULL
                or self.in_slot is NULL or self.in_len is NULL or self.in_kind is NULL):
            raise MemoryError()
        for i in range(slots):
            self.sfree[i] = i
        self.nsfree = slots
        self.rmr = glv.reg_mr(dev.pd, self.rbuf, <size_t>nrecv * slot_bytes,
                              GLV_ACCESS_LOCAL_WRITE)
        self.smr = glv.reg_mr(dev.pd, self.sbuf, <size_t>slots * slot_bytes, 0)
        self.stage_mr = glv.reg_mr(dev.pd, self.stage, self.read_ahead,
                                   GLV_ACCESS_LOCAL_WRITE)
        if self.rmr is NULL or self.smr is NULL or self.stage_mr is NULL:
            _raise_verbs("ibv_reg_mr of the transport's slots (the limit of "
                         "memory registrations reached?)", errno)
        memset(&attr, 0, sizeof(attr))
        attr.qp_state = GLV_QPS_INIT
        attr.pkey_index = 0
        attr.port_num = dev.port
        attr.qp_access_flags = GLV_ACCESS_REMOTE_READ    # the rendezvous reads; nothing writes
        if glv.modify_qp(self.qp, &attr, GLV_QP_STATE | GLV_QP_PKEY_INDEX
                         | GLV_QP_PORT | GLV_QP_ACCESS_FLAGS) != 0:
            _raise_verbs("moving the queue pair to INIT", 0)
        for i in range(nrecv):
            self._post_recv(i)

    def watch(self, int sock):
        """Own `sock` (non-blocking), the peer's connection: its end means
        the peer is gone."""
        cdef epoll_event ev
        ev.events = EPOLLIN | EPOLLRDHUP
        ev.data.fd = sock
        if epoll_ctl(self.fd, EPOLL_CTL_ADD, sock, &ev) != 0:
            c_close(sock)
            _raise_verbs("epoll_ctl", errno)
        self.sock = sock

    def held_fds(self):
        """Its epoll fd (wait_fd) and the peer's connection it watches."""
        return StreamPair.held_fds(self) | ({self.sock} if self.sock >= 0 else set())

    def local_address(self):
        """What the peer needs to connect to us: (qpn, psn, lid, gid, mtu)."""
        return (self.qp.qp_num, self.qp.qp_num & 0xffffff, self.dev.lid,
                bytes(self.dev.gid.raw[:16]), self.dev.mtu, self.slots,
                self.slot_bytes)

    def connect(self, int qpn, int psn, int lid, bytes gid, int mtu, *,
                int timeout=14, int retry_cnt=7, int rnr_retry=7,
                int min_rnr_timer=12):
        """RTR then RTS towards the peer's QP, with explicit retry settings:
        `timeout` (4.096 us * 2**timeout per try), `retry_cnt` tries before
        IBV_WC_RETRY_EXC_ERR, `rnr_retry` (7: forever; our credits mean the
        peer always has a receive posted) and `min_rnr_timer`."""
        cdef glv_qp_attr attr
        memset(&attr, 0, sizeof(attr))
        attr.qp_state = GLV_QPS_RTR
        attr.path_mtu = min(mtu, self.dev.mtu)
        attr.dest_qp_num = qpn
        attr.rq_psn = psn
        attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer = min_rnr_timer
        attr.ah_attr.dlid = lid
        attr.ah_attr.port_num = self.dev.port
        if self.dev.gid_index >= 0:
            attr.ah_attr.is_global = 1
            memcpy(attr.ah_attr.grh.dgid.raw, <const char *>gid, 16)
            attr.ah_attr.grh.sgid_index = self.dev.gid_index
            attr.ah_attr.grh.hop_limit = 64
        if glv.modify_qp(self.qp, &attr, GLV_QP_STATE | GLV_QP_AV | GLV_QP_PATH_MTU
                         | GLV_QP_DEST_QPN | GLV_QP_RQ_PSN
                         | GLV_QP_MAX_DEST_RD_ATOMIC | GLV_QP_MIN_RNR_TIMER) != 0:
            raise ProtocolError(f"rank {self.rank}: cannot move the queue pair to "
                                f"rank {self.peer} to RTR (peer address rejected)")
        memset(&attr, 0, sizeof(attr))
        attr.qp_state = GLV_QPS_RTS
        attr.timeout = timeout
        attr.retry_cnt = retry_cnt
        attr.rnr_retry = rnr_retry
        attr.sq_psn = self.qp.qp_num & 0xffffff
        attr.max_rd_atomic = 1
        if glv.modify_qp(self.qp, &attr, GLV_QP_STATE | GLV_QP_TIMEOUT
                         | GLV_QP_RETRY_CNT | GLV_QP_RNR_RETRY | GLV_QP_SQ_PSN
                         | GLV_QP_MAX_QP_RD_ATOMIC) != 0:
            raise ProtocolError(f"rank {self.rank}: cannot move the queue pair to "
                                f"rank {self.peer} to RTS")
        self._arm()                   # the first completion wakes the poll loop

    def __dealloc__(self):
        self._release()

    cdef void _release(self) noexcept:
        if self.qp is not NULL:
            glv.destroy_qp(self.qp)
            self.qp = NULL
        _dereg(&self.rmr)
        _dereg(&self.smr)
        _dereg(&self.stage_mr)
        self._release_reg(True)
        self._release_reg(False)
        if self.cq is not NULL:
            glv.destroy_cq(self.cq)
            self.cq = NULL
        if self.chan is not NULL:
            glv.destroy_comp_channel(self.chan)
            self.chan = NULL
        free(self.rbuf)
        free(self.sbuf)
        free(self.sfree)
        free(self.in_slot)
        free(self.in_len)
        free(self.in_kind)
        self.rbuf = self.sbuf = NULL
        self.sfree = self.in_slot = self.in_len = self.in_kind = NULL
        if self.fd >= 0:
            c_close(self.fd)
            self.fd = -1
        if self.sock >= 0:
            c_close(self.sock)
            self.sock = -1
        self.dev = None

    # -- work requests -------------------------------------------------------

    cdef int _post_recv(self, int slot) except -1 nogil:
        cdef glv_sge sge
        cdef glv_recv_wr wr
        cdef glv_recv_wr *bad
        sge.addr = <uintptr_t>(self.rbuf + <int64_t>slot * self.slot_bytes)
        sge.length = self.slot_bytes
        sge.lkey = self.rmr.lkey
        memset(&wr, 0, sizeof(wr))
        wr.wr_id = (<uint64_t>WR_RECV << 32) | <uint32_t>slot
        wr.sg_list = &sge
        wr.num_sge = 1
        if self.qp.context.ops.post_recv(self.qp, &wr, &bad) != 0:
            return self.lost("ibv_post_recv failed", 0)
        return 0

    cdef int _post_msg(self, int kind, int slot, uint32_t nbytes) except -1 nogil:
        """SEND_WITH_IMM of send slot `slot` (NO_SLOT: no bytes), carrying
        the credits we owe."""
        cdef glv_sge sge
        cdef glv_send_wr wr
        cdef glv_send_wr *bad
        memset(&wr, 0, sizeof(wr))
        wr.wr_id = (<uint64_t>WR_SEND << 32) | <uint32_t>slot
        if slot != <int>NO_SLOT:
            sge.addr = <uintptr_t>(self.sbuf + <int64_t>slot * self.slot_bytes)
            sge.length = nbytes
            sge.lkey = self.smr.lkey
            wr.sg_list = &sge
            wr.num_sge = 1
        wr.opcode = GLV_WR_SEND_WITH_IMM
        wr.send_flags = GLV_SEND_SIGNALED
        wr.imm_data = htonl(<uint32_t>kind | (<uint32_t>self.owed << 4))
        if self.qp.context.ops.post_send(self.qp, &wr, &bad) != 0:
            return self.lost("ibv_post_send failed", 0)
        self.owed = 0
        self.sends_out += 1
        return 0

    cdef int _post_read(self, char *dst, int64_t n) except -1 nogil:
        """RDMA-read n bytes of the rendezvous into dst (registered for this
        read; through the stage when the device refuses the registration)."""
        cdef glv_sge sge
        cdef glv_send_wr wr
        cdef glv_send_wr *bad
        cdef glv_mr *mr = self.stage_mr
        if dst != self.stage:
            if not self.rr_bounce:
                self.rr_mr = self._acquire(False, dst, n, GLV_ACCESS_LOCAL_WRITE)
                self.rr_bounce = self.rr_mr is NULL
            if self.rr_mr is not NULL:
                mr = self.rr_mr
            else:
                n = min(n, self.read_ahead)
        memset(&wr, 0, sizeof(wr))
        sge.addr = <uintptr_t>(dst if mr is not self.stage_mr else self.stage)
        sge.length = <uint32_t>n
        sge.lkey = mr.lkey
        wr.wr_id = <uint64_t>WR_READ << 32
        wr.sg_list = &sge
        wr.num_sge = 1
        wr.opcode = GLV_WR_RDMA_READ
        wr.send_flags = GLV_SEND_SIGNALED
        glv_set_rdma(&wr, self.rr.addr, self.rr.rkey)
        if self.qp.context.ops.post_send(self.qp, &wr, &bad) != 0:
            return self.lost("ibv_post_send (RDMA read) failed", 0)
        self.sends_out += 1
        self.rr_reading = True
        self.rr_done = False
        self.rr_dst = dst
        self.rr_n = n
        return 0

    cdef glv_mr *_acquire(self, bint sending, const char *addr, int64_t n,
                          int access) except? NULL nogil:
        """A registration of [addr, addr+n) for the rendezvous we send or
        receive, from the device's cache; NULL when the device refuses (its
        registration limit, after evicting what the cache could): the
        caller falls back to copies."""
        with gil:
            e = self.dev.cache.acquire(addr, n, access)
            if sending:
                self.rs_reg = e
            else:
                self.rr_reg = e
            return NULL if e is None else (<RegEntry>e).mr

    cdef void _release_reg(self, bint sending) noexcept nogil:
        """The rendezvous is over: give its registration back."""
        with gil:
            e = self.rs_reg if sending else self.rr_reg
            if sending:
                self.rs_reg = None
                self.rs_mr = NULL
            else:
                self.rr_reg = None
                self.rr_mr = NULL
            if e is not None and self.dev is not None:
                try:
                    self.dev.cache.release(e)
                except Exception:
                    pass           # only ever MemoryError; the MR leaks

    # -- completions -----------------------------------------------------------

    cdef int poll_cq(self) except -1 nogil:
        """Take every completion there is; 1 if any."""
        cdef glv_wc wc[POLL_BATCH]
        cdef int n, i, kind, slot, any = 0
        cdef uint32_t imm
        while True:
            n = self.cq.context.ops.poll_cq(self.cq, POLL_BATCH, wc)
            if n < 0:
                return self.lost("ibv_poll_cq failed", 0)
            if n == 0:
                return any
            any = 1
            for i in range(n):
                if wc[i].status != GLV_WC_SUCCESS:
                    self._wc_failed(&wc[i])
                    continue
                slot = <int>(wc[i].wr_id & <uint64_t>0xffffffffU)
                kind = <int>(wc[i].wr_id >> 32)
                if kind == WR_RECV:
                    imm = ntohl(wc[i].imm_data)
                    self.credits += <int>(imm >> 4)
                    if (imm & 15) == MSG_DATA or (imm & 15) == MSG_RDV:
                        self._inbox_push(slot, <int>wc[i].byte_len, imm & 15)
                    else:
                        if (imm & 15) == MSG_FIN:
                            self.rs_fin = True
                        self._post_recv(slot)
                elif kind == WR_SEND:
                    self.sends_out -= 1
                    if slot == <int>NO_SLOT:
                        self.ctl_out -= 1
                    else:
                        self.sfree[self.nsfree] = slot
                        self.nsfree += 1
                else:
                    self.sends_out -= 1
                    self.rr_done = True
            if self.failed_status:
                return self._raise_failed()

    cdef void _wc_failed(self, glv_wc *wc) noexcept nogil:
        # The first error is what happened; flushes follow it.
        if self.failed_status == 0 or self.failed_status == GLV_WC_WR_FLUSH_ERR:
            self.failed_status = wc.status

    cdef int _raise_failed(self) except -1 with gil:
        cdef int s = self.failed_status
        self.peer_gone = True
        if s in (GLV_WC_RETRY_EXC_ERR, GLV_WC_RNR_RETRY_EXC_ERR, GLV_WC_WR_FLUSH_ERR):
            what = {GLV_WC_RETRY_EXC_ERR: "retries exhausted (IBV_WC_RETRY_EXC_ERR): "
                                          "did its process die?",
                    GLV_WC_RNR_RETRY_EXC_ERR: "receiver not ready, retries exhausted",
                    GLV_WC_WR_FLUSH_ERR: "the queue pair went into the error state"}[s]
            return self.lost((what + self._async_events()).encode(), 0)
        raise ProtocolError(f"rank {self.rank}: an RDMA transfer with rank {self.peer} "
                            f"({self.address}) failed: {_WC_STATUS.get(s, s)}"
                            f"{self._async_events()}")

    cdef str _async_events(self):
        """What the device reported for our QP or its port (async events)."""
        if self.dev is None:
            return ""
        self.dev.drain_async()
        seen = self.dev.fatal_for(<size_t>self.qp, <size_t>self.cq)
        return f" (the device reported {seen})" if seen else ""

    cdef int _check_async(self) except -1 nogil:
        """Read the device's asynchronous events (at most every millisecond:
        its fd wakes every pair of the device); PeerLostError if one ends
        our queue pair: a QP error, the port going down, the device failing.
        (A port that goes down ends every queue pair on it, whether or not a
        transfer was in flight: a rank waiting to receive would otherwise
        wait for as long as the TCP connection beside it lives.)"""
        cdef timespec ts
        cdef double now
        clock_gettime(CLOCK_MONOTONIC, &ts)
        now = ts.tv_sec + ts.tv_nsec * 1e-9
        if now - self.dev.async_at < 0.001 and self.dev.events_seen == self.events_seen:
            return 0
        with gil:
            if now - self.dev.async_at >= 0.001:
                self.dev.async_at = now
                self.dev.drain_async()
            if self.dev.events_seen == self.events_seen:
                return 0
            self.events_seen = self.dev.events_seen
            seen = self.dev.fatal_for(<size_t>self.qp, <size_t>self.cq)
            if seen:
                self.peer_gone = True
                return self.lost(f"the device reported {seen}".encode(), 0)
        return 0

    cdef void _inbox_push(self, int slot, int nbytes, int kind) noexcept nogil:
        cdef int n = self.slots + CTL_SLOTS
        cdef int at = (self.in_head + self.in_count) % n
        self.in_slot[at] = slot
        self.in_len[at] = nbytes
        self.in_kind[at] = kind
        self.in_count += 1

    cdef int _inbox_pop(self) except -1 nogil:
        """The oldest message is consumed: its slot goes back to the peer."""
        cdef int slot = self.in_slot[self.in_head]
        self.in_head = (self.in_head + 1) % (self.slots + CTL_SLOTS)
        self.in_count -= 1
        self.in_off = 0
        self._post_recv(slot)
        self.owed += 1
        return 0

    cdef int _give_credits(self) except -1 nogil:
        """Send back what we owe when it is half of the peer's slots (and no
        message of ours would carry it soon)."""
        if self.owed >= self.slots // 2 and self.ctl_out < CTL_MAX:
            self.ctl_out += 1
            self._post_msg(MSG_CREDIT, NO_SLOT, 0)
        return 0

    cdef int _arm(self) except -1 nogil:
        """Drain the channel's events and ask for the next one: after this,
        a completion makes our poll fd readable."""
        cdef glv_cq *cq
        cdef void *ctx
        cdef unsigned int events = 0
        while glv.get_cq_event(self.chan, &cq, &ctx) == 0:
            events += 1
        if events:
            glv.ack_cq_events(self.cq, events)
        if self.cq.context.ops.req_notify_cq(self.cq, 0) != 0:
            return self.lost("ibv_req_notify_cq failed", 0)
        return 0

    # -- the stream ------------------------------------------------------------

    cdef ssize_t stream_send(self, iovec *iov, int n) except -2 nogil:
        cdef int64_t total = 0, take, left
        cdef int i = 0, slot
        cdef int64_t off = 0               # into iov[i]
        cdef uint32_t fill
        if self.qp is NULL:
            return self.lost("the connection is closed", 0)
        self.poll_cq()
        if self.rs_base is not NULL:
            if not self.rs_fin:
                return WOULD_BLOCK
            total = self.rs_len            # the peer read it: all delivered
            self._release_reg(True)
            self.rs_base = NULL
            self.rs_fin = False
            return total
        while i < n and self.credits > 0 and self.nsfree > 0:
            if (<int64_t>iov[i].iov_len >= self.rdv_min and off == 0 and total == 0):
                if self._start_rdv(<const char *>iov[i].iov_base, iov[i].iov_len):
                    return WOULD_BLOCK     # delivered when its FIN comes
            elif <int64_t>iov[i].iov_len >= self.rdv_min and off == 0:
                break                      # eager bytes first, then the rendezvous
            self.nsfree -= 1
            slot = self.sfree[self.nsfree]
            fill = 0
            while i < n and fill < <uint32_t>self.slot_bytes:
                left = <int64_t>iov[i].iov_len - off
                if left >= self.rdv_min and off == 0 and (fill > 0 or total > 0):
                    break
                take = min(left, <int64_t>(self.slot_bytes - fill))
                memcpy(self.sbuf + <int64_t>slot * self.slot_bytes + fill,
                       <char *>iov[i].iov_base + off, take)
                fill += <uint32_t>take
                off += take
                if off == <int64_t>iov[i].iov_len:
                    i += 1
                    off = 0
            self.credits -= 1
            self._post_msg(MSG_DATA, slot, fill)
            total += fill
            if i < n and <int64_t>iov[i].iov_len >= self.rdv_min and off == 0:
                break
        return total if total > 0 else WOULD_BLOCK

    cdef bint _start_rdv(self, const char *base, int64_t n) except -1 nogil:
        """Offer `n` bytes at `base` to the peer to read; False if they
        cannot be registered (they then go eager)."""
        cdef glv_mr *mr
        cdef RdvInfo *info
        cdef int slot
        if self.rs_refused_lo < base < self.rs_refused_hi:
            return False               # the rest of a payload refused before
        mr = self._acquire(True, base, n, GLV_ACCESS_REMOTE_READ)
        if mr is NULL:
            self.rs_refused_lo = base
            self.rs_refused_hi = base + n
            return False
        self.nsfree -= 1
        slot = self.sfree[self.nsfree]
        info = <RdvInfo *>(self.sbuf + <int64_t>slot * self.slot_bytes)
        info.addr = <uintptr_t>base
        info.length = <uint64_t>n
        info.rkey = mr.rkey
        info.pad = 0
        self.credits -= 1
        self.rs_base = base
        self.rs_len = n
        self.rs_mr = mr
        self.rs_fin = False
        self._post_msg(MSG_RDV, slot, sizeof(RdvInfo))
        return True

    cdef ssize_t stream_recv(self, char *dst, size_t n) except -2 nogil:
        cdef int64_t got = 0, k
        cdef int slot, at
        cdef char *src
        if self.qp is NULL:
            return self.lost("the connection is closed", 0)
        self.poll_cq()
        while got < <int64_t>n and self.in_count > 0:
            at = self.in_head
            slot = self.in_slot[at]
            src = self.rbuf + <int64_t>slot * self.slot_bytes
            if self.in_kind[at] == MSG_DATA:
                k = min(<int64_t>n - got, <int64_t>(self.in_len[at] - self.in_off))
                memcpy(dst + got, src + self.in_off, k)
                self.in_off += <int>k
                got += k
                if self.in_off == self.in_len[at]:
                    self._inbox_pop()
                continue
            if got > 0:
                break                      # a rendezvous next: deliver what we have
            k = self._rdv_recv(dst, n, src, self.in_len[at])
            if k == WOULD_BLOCK:
                break
            got = k
            break
        self._give_credits()
        if got > 0:
            return got
        if self.in_count == 0 and self._sock_closed():
            self.poll_cq()                 # anything that came before the close
            if self.in_count == 0:
                return 0
        return WOULD_BLOCK

    cdef int64_t _rdv_recv(self, char *dst, size_t n, char *msg, int msg_len) except -2 nogil:
        """Read (some of) the rendezvous payload at the inbox head into dst:
        WOULD_BLOCK until the RDMA read is done, then its length."""
        cdef int64_t k
        if self.rr_reading:
            if not self.rr_done:
                return WOULD_BLOCK
            k = self.rr_n
            if dst != self.rr_dst:
                # read into the stage for a receive that has since taken
                # over the stream (post_recv): hand it over
                if self.rr_dst != self.stage or k > <int64_t>n:
                    return self._protocol("a rendezvous read landed outside its receive")
                memcpy(dst, self.stage, k)
            elif self.rr_mr is NULL and dst != self.stage:
                memcpy(dst, self.stage, k)     # read through the stage (no MR)
            self.rr_reading = self.rr_done = False
            self._release_reg(False)
            self.rr.addr += <uint64_t>k
            self.rr.length -= <uint64_t>k
            if self.rr.length == 0:
                self.rr_parsed = self.rr_bounce = False
                self._inbox_pop()
                self.ctl_out += 1
                self._post_msg(MSG_FIN, NO_SLOT, 0)
            return k
        if not self.rr_parsed:
            if msg_len != sizeof(RdvInfo):
                return self._protocol("a rendezvous message of the wrong size")
            memcpy(&self.rr, msg, sizeof(RdvInfo))
            if self.rr.length == 0:
                return self._protocol("an empty rendezvous")
            self.rr_parsed = True
        self._post_read(dst, min(<int64_t>n, <int64_t>self.rr.length))
        return WOULD_BLOCK

    cdef int _protocol(self, str what) except -1 with gil:
        raise ProtocolError(f"rank {self.rank}: from rank {self.peer} "
                            f"({self.address}): {what}")

    cdef bint _sock_closed(self) noexcept nogil:
        cdef char c
        cdef ssize_t r
        if self.sock_eof:
            return True
        if self.sock < 0:
            return True
        r = recv(self.sock, &c, 1, MSG_DONTWAIT | MSG_PEEK)
        if r == 0 or (r < 0 and errno != EAGAIN and errno != EINTR):
            self.sock_eof = True
        return self.sock_eof

    cdef void stream_close(self) noexcept nogil:
        # What we sent must arrive before the queue pair goes (destroying
        # it drops work requests in flight): wait a little for them.
        cdef int i
        for i in range(2000):
            if self.sends_out <= 0 or self.failed_status or self.qp is NULL:
                break
            with gil:
                try:
                    self.poll_cq()
                except Exception:
                    break
            usleep(1000)
        with gil:
            self._release()

    cdef int progress(self) except -1 nogil:
        cdef int moved
        if self.qp is NULL:
            return self.lost("the connection is closed", 0)
        moved = StreamPair.progress(self)
        self._arm()
        if self.poll_cq():                 # came while arming
            moved |= StreamPair.progress(self)
        if not moved:
            self._check_async()
        return moved

    cdef short wait_events(self) noexcept nogil:
        if self.fd < 0 or self.peer_gone:
            return 0
        return POLLIN

    cdef bint busy(self) noexcept nogil:
        return StreamPair.busy(self) or self.rs_base is not NULL

    cdef int post_recv(self, Xfer *x) except -1 nogil:
        # A stashed frame still arriving (in_x) may be taken over by this
        # receive and freed: let a read into it land first.
        if (self.rr_reading and self.in_x is not NULL
                and (self.in_x.flags & XF_HEAP) and self.rr_dst == self.in_x.buf + self.in_x.done):
            self._finish_read_into_stash()
        return StreamPair.post_recv(self, x)

    cdef int _finish_read_into_stash(self) except -1 nogil:
        cdef int64_t k
        cdef int i
        for i in range(READ_WAIT_MS * 10):   # a read completes or fails after
            self.poll_cq()                     # the QP's retries, well before
            if self.rr_done:
                break
            usleep(100)
        if not self.rr_done:
            return self.lost("an RDMA read from the peer did not complete", 0)
        k = self._rdv_recv(self.rr_dst, <size_t>self.rr_n, NULL, 0)
        self.in_x.done += k
        return 0

    cdef void abandon(self) noexcept nogil:
        cdef glv_qp_attr attr
        StreamPair.abandon(self)
        # Stop any transfer into or out of memory that is going away.
        if self.qp is not NULL and (self.rr_reading or self.rs_base is not NULL):
            memset(&attr, 0, sizeof(attr))
            attr.qp_state = GLV_QPS_ERR
            glv.modify_qp(self.qp, &attr, GLV_QP_STATE)

