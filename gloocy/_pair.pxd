# The abstract Pair (_pair.pxi): what every transport implements, and the
# Xfer queues and unexpected-frame stash they share.

cdef enum:
    EAGER_MAX = 65536             # unexpected frames up to this are stashed, not parked;
                                  # a stash's first allocation at most


# An acknowledgement this side owes (or is sending) for a synchronous send
# it matched: the Pair owns it and frees it once sent.
ctypedef struct Ack:
    Xfer x                        # the KIND_P2P_ACK frame (no payload)
    bint posted                   # handed to post_send
    Ack *link                     # next in the pair's list


cdef class Pair:
    cdef readonly int rank            # our rank
    cdef readonly int peer            # the peer's rank
    cdef readonly bint closed         # closed locally; every post fails
    cdef readonly bint peer_gone      # the peer closed its end
    cdef readonly bint peer_said_bye  # ... and said goodbye first (clean exit)
    cdef Xfer *unexp_head             # frames that arrived before their receive
    cdef Xfer *unexp_tail             # (XF_HEAP copies, oldest first)
    cdef Xfer **wild_head             # the Context's any-source receives, shared
    cdef Xfer **wild_tail             # by its pairs (oldest first)
    cdef Ack *acks                    # acknowledgements owed or in flight
    cdef int acks_lost                # ... that could not be allocated

    # The receive an arriving frame goes to: the oldest match among `posted`
    # (this pair's list) and the any-source receives; unlinked from either.
    cdef Xfer *claim(self, const Header *h, Xfer **posted, Xfer **posted_tail) noexcept nogil

    # Queue a send / receive; never blocks. A receive is matched to incoming
    # frames by (comm_id, seq, tag) and checked with check_frame().
    cdef int post_send(self, Xfer *x) except -1 nogil
    cdef int post_recv(self, Xfer *x) except -1 nogil
    # Move bytes without blocking. Returns 1 if anything moved, else 0.
    cdef int progress(self) except -1 nogil
    # True while posted sends or receives are unfinished.
    cdef bint busy(self) noexcept nogil
    # True while a posted receive is unfinished (we wait for the peer).
    cdef bint expecting(self) noexcept nogil
    # What to poll(2) for when blocking: fd and events (0: nothing to wait for).
    cdef int wait_fd(self) noexcept nogil
    cdef short wait_events(self) noexcept nogil
    # Or, about to sleep: the futex words (at most `room`) the peer clears
    # and wakes when it moves what we wait for, written to `w`; how many,
    # else WORDS_NONE (poll this pair instead: the default) or WORDS_READY.
    cdef int wait_words(self, WordWait *w, int room) noexcept nogil
    # The peer has gone and nothing of it is left to read: a receive from it
    # can never complete (exhausted); PeerLostError saying so (gone).
    cdef bint exhausted(self) noexcept nogil
    cdef int gone(self) except -1 nogil
    # Forget every posted Xfer (after a failure their memory goes away).
    cdef void abandon(self) noexcept nogil
    # Close; say goodbye first when `clean`. Idempotent.
    cdef int shutdown(self, bint clean) except -1
    # Withdraw a posted receive nothing has arrived for; True if withdrawn.
    cdef bint cancel_recv(self, Xfer *x) noexcept nogil
    # Best effort, before abandon(): tell the peer we stop because of `why`,
    # an AbortCode, which rank is at fault (`culprit`, -1: none known) and
    # which rank stopped first (`origin`, -1: we did); only when our stream
    # to it is between frames.
    cdef int say_abort(self, bytes why, int code, int culprit, int origin) except -1
    # For the node collectives (shared-memory pairs only; no-ops elsewhere):
    # make the peer's poll(2) on its wait_fd() return; forget such wake-ups.
    cdef void wake_peer(self) noexcept nogil
    cdef void drain_wakeups(self) noexcept nogil

    # The unexpected-frame queue, shared by every transport: stash() a frame
    # no receive matches (its payload then goes to the returned copy);
    # find_unexpected() the oldest one a receive matches (complete ones
    # only, unless `partial`); drop_unexpected() forgets and frees one.
    cdef Xfer *stash(self, const Header *h) except NULL nogil
    # Room for more of a stashed frame's payload (its buf doubles, up to
    # its length): memory follows the bytes that came, not the header's word.
    cdef int grow_stash(self, Xfer *u) except -1 nogil
    cdef Xfer *find_unexpected(self, const Xfer *want, bint partial) noexcept nogil
    cdef void drop_unexpected(self, Xfer *u) noexcept nogil
    # Take a complete stashed frame out of the queue (acknowledged if it is
    # a synchronous send's); its malloc'ed payload is the caller's.
    cdef char *unstash(self, Xfer *u) noexcept nogil
    # Deliver a complete stashed frame into receive x (checked), drop it.
    cdef int take_unexpected(self, Xfer *u, Xfer *x) except -1 nogil
    # MismatchError if a stashed frame belongs to receive x's call but has
    # another fingerprint (x itself matched none), or belongs to a call of
    # ours that is over (sequence number below `seq`).
    cdef int check_stash(self, const Xfer *x) except -1 nogil
    # A receive matched frame h: if it is a synchronous send's, owe its
    # sender the acknowledgement (sent by flush_acks, from the engine).
    cdef void matched(self, const Header *h) noexcept nogil
    # Post the acknowledgements owed, free the ones sent; 1 if any posted.
    cdef int flush_acks(self) except -1 nogil
    cdef Xfer *find_stale(self, uint32_t comm_id, uint64_t seq) noexcept nogil


# Xfer queues (head/tail singly linked lists), shared by every transport.
cdef void xfer_append(Xfer **head, Xfer **tail, Xfer *x) noexcept nogil
cdef bint xfer_unlink(Xfer **head, Xfer **tail, Xfer *x) noexcept nogil
# Park (stop reading the stream until its receive is posted) rather than stash
# a large collective frame that arrived early: only when a receive of the same
# communicator is posted, so that its call is running and will post it; never
# while nonblocking collectives run (one may need a frame behind it).
cdef bint should_park(const Header *h, const Xfer *posted) noexcept nogil
