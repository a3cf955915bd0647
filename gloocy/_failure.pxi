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
            # ... and those that dial us once we are gone (lazy.py: _dial)
            links.connector.record_abort(why, code, culprit, origin)
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
    return 0


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
