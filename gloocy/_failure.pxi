# Failure: a call that raises poisons its context and every context over
# the same links (fail), and every rank names the root cause: the peers we
# can still reach are told why we stop, and a timeout is traced to the rank
# that never came.


# After a timeout, how long to listen for the other ranks' reasons to find
# the rank that never came (seconds; see trace_timeout).
TRACE_GRACE = 0.3


cdef int fail(Context ctx, BaseException exc, Coll *c) except -1:
    """Something raised mid-call: the streams are in an unknown state, so
    the context is poisoned and the pairs forget the call's transfers.
    Every context over the same links is poisoned with it: their
    transfers are forgotten too. Called with the links' lock held.

    First, every peer we can still reach is told why we stop (once, at
    the first failure; a reason a peer told us is passed on), so that
    each rank names the root cause, not a rank that only gave up because
    of it. A timeout is traced to the rank that never came."""
    recorded = recorded_cause(ctx, exc)
    if recorded is not None:
        exc = recorded
    if ctx.error is None:
        ctx.error = exc
    links = ctx.links
    first = links.error is None
    if first:
        links.error = exc
    links.failed = True
    told = getattr(exc, "_abort", None)     # why, code, culprit, origin, waits
    timed_out = first and c is not NULL and isinstance(exc, CollectiveTimeout)
    late = None
    if timed_out:                   # (from the posted transfers: before they go)
        late = list(exc.ranks) if told is None else waited_for(ctx)
    # The failed call's transfers are freed memory already (its frames have
    # returned): the pairs forget them first, before anything below reads
    # a pair (say_abort, progress).
    links.wild_head = links.wild_tail = NULL
    for p in links.pairs:
        if p is not None:
            (<Pair>p).abandon()
    drop_schedules(links)                   # their transfers are forgotten too
    if timed_out:
        trace_timeout(ctx, exc, c, told, late)
    elif first:
        why, code, culprit, origin = (told or abort_reason(ctx, exc))[:4]
        if links.arrivals:              # peers that dialed us: tell them too
            install_arrivals(links)
        links.told = (why, code, culprit, origin)   # ... and those that will
        if links.connector is not None:
            # ... and those that dial us once we are gone (lazy.py: _dial),
            # there before the error reaches the user: a program that ends
            # with os._exit on it would otherwise lose the record
            links.connector.record_abort(why, code, culprit, origin)
            links.connector.recorded()
        if ctx.node is not None:
            connect_members(ctx)        # node collectives move no frames
        for p in links.pairs:
            if p is not None and (<Pair>p).peer != origin:
                (<Pair>p).say_abort(why, code, culprit, origin)
    if told is not None and c is not NULL and not isinstance(exc, CollectiveTimeout):
        exc.args = (f"{exc}; rank {ctx.rank} was in "
                    f"{describe_call(&c.proto)}",) + exc.args[1:]
    if ctx.node is not None:
        node_wake_all(ctx, True)    # so that they read why at once
    for p in links.pairs:           # (and what trace_timeout or
        if p is not None:           # connect_members installed meanwhile)
            (<Pair>p).abandon()
    links.wake()
    if recorded is not None:
        raise recorded
    return 0


cdef object recorded_cause(Context ctx, BaseException exc):
    """A connection lost to a peer that stopped on an error first: the
    error it recorded in the store (lazy.py: record_abort, written before
    its connections close), as a peer's abort frame would have told it;
    else None. Its frame may have been lost with the connection: a peer
    that exits at once resets it while our bytes to it are unread, and
    we may see the reset before the frame (a send fails first). Within
    the failure path's store budget (lazy.py: Connector.failing): a store
    that does not answer in time leaves `exc`, what we saw."""
    if (not isinstance(exc, PeerLostError) or exc.rank is None
            or getattr(exc, "_abort", None) is not None
            or ctx.links.connector is None):
        return None
    connector = ctx.links.connector
    told = connector._abort_of(exc.rank, connector.failing())
    if told is None:
        return None
    why, code, culprit, origin = told
    if code == ABORT_PEER_LOST and culprit == ctx._world[ctx.rank]:
        # It lost us as we lost it (a link or port that went down under
        # both): its record is no cause of ours, and would name us.
        return None
    raw, _, waits = why.partition(b"\0")
    e = told_error(ctx._world[ctx.rank], exc.rank, raw, code, culprit,
                   exc.rank if origin < 0 else origin, waits)
    e.__cause__ = exc
    return e


cdef object told_error(int rank, int peer, bytes raw, int code, int culprit,
                       int origin, bytes waits):
    """The error a peer's abort told us of (its frame, or its record in
    the store): that error's class, naming the rank that stopped first
    and its reason (the root cause, not the echo of a peer giving up).
    `origin` is that rank, `_abort` what fail() passes on; `waits` (a
    timeout's) the world ranks the peer was waiting for."""
    why = raw.decode("utf-8", "replace")
    message = (f"rank {rank}: rank {origin} stopped the call" +
               ("" if origin == peer else f" (rank {peer} passed it on)") +
               f": {why}")
    if code == ABORT_TIMEOUT:
        e = CollectiveTimeout(message)
        e.culprit = culprit if culprit >= 0 else None
    elif code == ABORT_PEER_LOST:
        e = PeerLostError(message, rank=culprit if culprit >= 0 else None)
    elif code == ABORT_PROTOCOL:
        e = ProtocolError(message)
    elif code == ABORT_OTHER:
        e = GloocyError(message)
    else:
        e = MismatchError(message)
    e.origin = origin
    e._abort = (raw, code, culprit, origin,
                [int(w) for w in waits.split(b",") if w.isdigit()])
    return e


cdef tuple abort_reason(Context ctx, BaseException exc):
    """(why, AbortCode, world rank at fault or -1, -1) of our own error."""
    why = (str(exc) if isinstance(exc, GloocyError) or not str(exc)
           else f"{type(exc).__name__}: {exc}")
    why = (why or type(exc).__name__).encode()
    if isinstance(exc, MismatchError):
        return why, ABORT_MISMATCH, -1, -1
    if isinstance(exc, PeerLostError):
        return why, ABORT_PEER_LOST, -1 if exc.rank is None else exc.rank, -1
    if isinstance(exc, ProtocolError):
        return why, ABORT_PROTOCOL, -1, -1
    return why, ABORT_OTHER, -1, -1


cdef int trace_timeout(Context ctx, object exc, Coll *c, object told,
                       list late) except -1:
    """Our call timed out (`told` is None), or a peer's did and told us.
    The ranks we wait for may themselves wait for others (a ring, a
    tree): tell every peer whom we wait for and listen TRACE_GRACE for
    theirs (they time out about now too, or hear of it from us). The
    ranks someone waits for that never speak are the ones that never
    came: the message names them, `culprit` is the first. `late`: the
    ranks we wait for (found before the pairs forgot the call's transfers)."""
    cdef int me = ctx._world[ctx.rank]
    waits = {me: {ctx._world[i] for i in late}}    # world rank -> whom it waits for
    if told is not None:
        waits[told[3]] = set(told[4])
    call = describe_call(&c.proto)
    mine = ", ".join(map(str, late)) or "?"
    why = (f"rank {ctx.rank}: {call} timed out waiting for rank(s) {mine}".encode()
           + b"\0" + ",".join(map(str, sorted(waits[me]))).encode())
    connector = ctx.links.connector
    if connector is not None:       # for the ranks we have no pair to
        connector.record_abort(why, ABORT_TIMEOUT, -1, -1)
    live = []
    for p in ctx.links.pairs:
        if p is not None and p is not unconnected_pair:   # (the stand-in can't speak)
            (<Pair>p).say_abort(why, ABORT_TIMEOUT, -1, -1)
            live.append(p)
    deadline = time.monotonic() + TRACE_GRACE
    while live and time.monotonic() < deadline:
        for p in list(live):
            try:
                (<Pair>p).progress()
            except GloocyError as e:
                live.remove(p)
                heard = getattr(e, "_abort", None)
                if heard is not None and heard[1] == ABORT_TIMEOUT:
                    waits[heard[3]] = set(heard[4])
        time.sleep(0.002)
    missing = sorted(set().union(*waits.values()) - set(waits))
    if connector is not None:
        missing = _heard_in_store(connector, waits, missing, deadline)
    if told is None:
        text = f"rank {ctx.rank}: {call} timed out waiting for rank(s) {mine}"
    else:
        text = (f"rank {ctx.rank}: {call} stopped when "
                f"{rank_name(ctx, told[3])} timed out")
        if late:
            text += f"; rank {ctx.rank} was waiting for rank(s) {mine}"
    if missing:
        exc.culprit = missing[0]
        if told is not None or [ctx._world[i] for i in late] != missing:
            named = ", ".join([rank_name(ctx, w) for w in missing])
            text += "; " + named + " never came"
    exc.args = (text,) + exc.args[1:]
    return 0


cdef list _heard_in_store(object connector, dict waits, list missing,
                          double listen_until):
    """The ranks that never came, once the waits of those we heard nothing
    from (no connection to them: pairs connect when first used) are read
    where they recorded them (record_abort): a rank in the middle of a
    ring that we never talked to may have come and waited too. A record
    not there yet is waited for as the pairs are listened to, until
    `listen_until` (the ranks time out about now too). Returns the ranks
    someone waits for that recorded nothing (or whose records the store
    did not give within the failure path's budget: failing())."""
    until = connector.failing()
    # Ours first: a rank waiting for our record must not wait behind our
    # own waits (a store client makes one request at a time).
    connector.recorded()
    asked = set()
    while True:
        unknown = [w for w in missing if w not in asked]
        if not unknown:
            return missing
        for w in unknown:
            asked.add(w)
            told = connector._abort_of(w, until, listen_until)
            if told is not None and told[1] == ABORT_TIMEOUT:
                theirs = told[0].partition(b"\0")[2]
                waits[w] = {int(x) for x in theirs.split(b",") if x.isdigit()}
        missing = sorted(set().union(*waits.values()) - set(waits))


cdef str rank_name(Context ctx, int world):
    """How our messages name the process of `world` rank."""
    if ctx._local[world] >= 0:
        return f"rank {ctx._local[world]}"
    return f"world rank {world}"


cdef list waited_for(Context ctx):
    """The ranks we wait for: in a node collective, those that have not
    arrived where we are; else those whose data we wait for (or, when
    none, whose reading)."""
    cdef Pair p
    cdef uint64_t mine
    if ctx.node is not None:
        mine = ring_load(&ctx.node.ctl[ctx.rank].phase)
        behind = [j for j in range(ctx.size)
                  if ring_load(&ctx.node.ctl[j].phase) < mine]
        if behind:
            return behind
    expecting, busy = [], []
    for i, pair in enumerate(ctx._pairs):
        if pair is not None:
            p = <Pair>pair
            if p.expecting():
                expecting.append(i)
            if p.busy():
                busy.append(i)
    return expecting or busy


cdef int _raise_timeout(Context ctx, Coll *c) except -1 with gil:
    waiting = waited_for(ctx)
    e = CollectiveTimeout(
        f"rank {ctx.rank}: {describe_call(&c.proto)} timed out waiting for "
        f"rank(s) {', '.join(map(str, waiting)) or '?'}")
    e.ranks = waiting
    raise e


cdef int _raise_links_failed(Context ctx) except -1 with gil:
    raise ContextPoisoned(
        f"rank {ctx.rank}: a call on another communicator over the same "
        f"connections failed: {ctx.links.error}")


def say_abort_on(Pair pair, bytes why, int code, int culprit, int origin):
    """Tell pair's peer why we stop, as fail() does (for lazy.py's pairs to
    peers that left after a failure: see departed_pair)."""
    pair.say_abort(why, code, culprit, origin)
