# Frame checks shared by every transport. A receive is matched by
# (comm_id, seq, tag); its fingerprint (kind, op, dtype, root, count) and
# length must then agree, or both calls are named in a MismatchError.

KIND_NAMES = {KIND_BYE: "bye", KIND_BARRIER: "barrier", KIND_BCAST: "bcast",
              KIND_ALLREDUCE: "allreduce", KIND_ALLGATHERV: "allgather",
              KIND_REDUCE: "reduce", KIND_GATHERV: "gather",
              KIND_SCATTERV: "scatter", KIND_ALLTOALLV: "alltoall",
              KIND_REDUCE_SCATTER: "reduce_scatter", KIND_SCAN: "scan",
              KIND_EXSCAN: "exscan", KIND_P2P: "send/recv",
              KIND_ABORT: "abort", KIND_P2P_ACK: "ssend acknowledgement",
              KIND_P2P_READ: "single-copy answer"}
# The object collectives, by the code they put in a call's kind (OBJ_SHIFT).
OBJECT_CALLS = ("", "bcast", "gather", "scatter", "allgather",
                "alltoall", "reduce", "allreduce", "scan", "exscan")
assert len(OBJECT_CALLS) == OBJ_LAST


cdef void init_header(Header *h) noexcept nogil:
    memset(h, 0, sizeof(Header))
    h.magic = FRAME_MAGIC
    h.version = FRAME_VERSION
    h.root = -1


cdef bint frame_matches(const Header *got, const Xfer *want) noexcept nogil:
    """Is `got` the frame for receive `want`? Collective frames match by
    (comm_id, seq, tag), whatever their kind (check_frame then compares the
    fingerprints); point-to-point frames by (comm_id, tag or any tag)."""
    if got.comm_id != want.hdr.comm_id:
        return False
    if want.hdr.kind == KIND_P2P:
        return got.kind == KIND_P2P and (
            (want.flags & XF_ANY_TAG) != 0 or got.tag == want.hdr.tag)
    if want.hdr.kind == KIND_P2P_ACK:
        return got.kind == KIND_P2P_ACK and got.seq == want.hdr.seq
    return (got.kind != KIND_P2P and got.kind != KIND_P2P_ACK
            and got.kind != KIND_P2P_READ
            and got.seq == want.hdr.seq and got.tag == want.hdr.tag)


# The kinds whose header count is the call's element count (a bcast's bytes).
COUNTED_KINDS = frozenset([KIND_BCAST, KIND_ALLREDUCE, KIND_REDUCE,
                           KIND_REDUCE_SCATTER, KIND_SCAN, KIND_EXSCAN])


cdef str describe_call(const Header *h):
    """e.g. 'allreduce #3 (count=4, dtype=float64, op=SUM)', or for an
    object collective 'bcast of objects #2 (root=0)'."""
    cdef int kind = h.kind & KIND_MASK, obj = h.kind >> OBJ_SHIFT
    parts = []
    # Object calls move pickles (their byte counts mean nothing to users);
    # the other kinds' count is a digest of their block sizes, or nothing.
    if obj == 0 and kind in COUNTED_KINDS:
        parts.append(f"count={h.count}")
    if h.dtype:
        parts.append(f"dtype={DTYPE_NAMES.get(h.dtype, h.dtype)}")
    if h.op:
        parts.append(f"op={OP_NAMES.get(h.op, h.op)}")
    if h.root >= 0:
        parts.append(f"root={h.root}")
    name = (f"{OBJECT_CALLS[obj]} of objects" if 0 < obj < len(OBJECT_CALLS)
            else KIND_NAMES.get(kind, f"kind {h.kind}"))
    return f"{name} #{h.seq}" + (f" ({', '.join(parts)})" if parts else "")


cdef int _raise_bad_header(const Header *got, int rank, int peer) except -1 with gil:
    raise ProtocolError(
        f"rank {rank}: peer rank {peer} sent an invalid frame header "
        f"(magic {got.magic:#x}, version {got.version}, kind {got.kind})")


cdef int check_header(const Header *got, int rank, int peer) except -1 nogil:
    cdef int kind = got.kind & KIND_MASK, obj = got.kind >> OBJ_SHIFT
    if (got.magic != FRAME_MAGIC or got.version != FRAME_VERSION
            or kind >= KIND_LAST or obj >= OBJ_LAST
            or (obj and (kind == KIND_BYE or kind == KIND_P2P or kind == KIND_ABORT
                         or kind == KIND_P2P_ACK or kind == KIND_P2P_READ))
            or ((got.kind == KIND_BYE or got.kind == KIND_P2P_ACK
                 or got.kind == KIND_P2P_READ) and got.length != 0)
            or (got.kind == KIND_P2P and (got.op & ~P2P_MODES) != 0)
            or (got.kind == KIND_P2P_READ and got.op > READ_WRITTEN)
            or (got.kind == KIND_ABORT and got.length > ABORT_MAX)):
        return _raise_bad_header(got, rank, peer)
    return 0


cdef int _raise_mismatch(const Header *got, const Xfer *want, int rank,
                         int peer) except -1 with gil:
    if (got.kind == want.hdr.kind and got.op == want.hdr.op
            and got.dtype == want.hdr.dtype and got.root == want.hdr.root
            and got.count == want.hdr.count):
        # Same call, other sizes: the ranks disagree on counts (v-variants).
        raise MismatchError(
            f"rank {rank}: in {describe_call(&want.hdr)} rank {peer} sent "
            f"{got.length} bytes (step {got.tag}) where rank {rank} expects "
            f"{want.nbytes}: the ranks disagree on the counts")
    raise MismatchError(
        f"rank {rank} called {describe_call(&want.hdr)} but rank {peer} "
        f"called {describe_call(got)}")


cdef int _raise_truncated(const Header *got, const Xfer *want, int rank,
                          int peer) except -1 with gil:
    raise MismatchError(
        f"rank {rank}: a message of {got.length} bytes from rank {peer} "
        f"(tag {<int64_t>got.tag}) does not fit the {want.nbytes}-byte "
        f"receive buffer", ERR_TRUNCATE)


cdef int check_frame(const Header *got, const Xfer *want, int rank,
                     int peer) except -1 nogil:
    # got.length is a u64 from the wire; compare in u64 so that no value
    # can wrap into a plausible size.
    if want.hdr.kind == KIND_P2P:
        if got.length > <uint64_t>want.nbytes:
            return _raise_truncated(got, want, rank, peer)
        return 0
    if want.hdr.kind == KIND_P2P_ACK:
        return 0                # frame_matches checked it; check_header its length
    if (got.kind != want.hdr.kind or got.op != want.hdr.op
            or got.dtype != want.hdr.dtype or got.root != want.hdr.root
            or got.count != want.hdr.count
            or got.length != <uint64_t>want.nbytes):
        return _raise_mismatch(got, want, rank, peer)
    return 0


cdef int check_unmatched(const Header *got, const Xfer *posted, int rank,
                         int peer) except -1 nogil:
    """A frame matched no posted receive: if one of them belongs to the same
    collective call (comm_id, seq) yet has another fingerprint, the ranks
    called different collectives."""
    if got.kind == KIND_P2P or got.kind == KIND_P2P_ACK:
        return 0
    while posted is not NULL:
        if (got.comm_id == posted.hdr.comm_id and got.seq == posted.hdr.seq
                and posted.hdr.kind != KIND_P2P):
            if (got.kind != posted.hdr.kind or got.op != posted.hdr.op
                    or got.dtype != posted.hdr.dtype
                    or got.root != posted.hdr.root
                    or got.count != posted.hdr.count):
                return _raise_mismatch(got, posted, rank, peer)
        posted = posted.next
    return 0


cdef int raise_peer_abort(const Xfer *u, int rank, int peer) except -1 with gil:
    """The peer sent KIND_ABORT: it, or a rank before it, stopped on an
    error. Raise that error's class, naming the rank that stopped first and
    its reason (the root cause, not the echo of a peer giving up). The
    error's `origin` is that rank, `_abort` what fail() passes on."""
    # A timeout's payload also lists, after a NUL, the world ranks the peer
    # was waiting for (see trace_timeout).
    raw, _, waits = u.buf[:u.nbytes].partition(b"\0")
    cdef int origin = peer if u.hdr.tag == 0 or u.hdr.tag > 1 << 30 else <int>u.hdr.tag - 1
    raise told_error(rank, peer, raw, u.hdr.op, u.hdr.root, origin, waits)
