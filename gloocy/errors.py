"""The one exception hierarchy of gloocy.

Every error gloocy raises on purpose is a ``GloocyError``; the subclasses say
what went wrong and carry the facts a user needs (which peer, which call).
"""

__all__ = [
    "GloocyError",
    "PeerLostError",
    "CollectiveTimeout",
    "MismatchError",
    "RendezvousError",
    "RendezvousTimeout",
    "ProtocolError",
    "ContextPoisoned",
]


class GloocyError(RuntimeError):
    """Base class of every error gloocy raises on purpose."""


class PeerLostError(GloocyError, ConnectionError):
    """A peer went away (crashed, was killed, closed its end) mid-job.

    ``rank`` is the lost peer's rank in the world of the communicator that
    noticed it.
    """

    def __init__(self, message, rank=None):
        super().__init__(message)
        self.rank = rank


class CollectiveTimeout(GloocyError, TimeoutError):
    """A collective or point-to-point call did not finish before its deadline."""


class MismatchError(GloocyError):
    """Ranks called different collectives, or the same one with different
    counts, dtypes, ops or roots."""


class RendezvousError(GloocyError):
    """Ranks could not find each other through the store."""


class RendezvousTimeout(RendezvousError, TimeoutError):
    """A store operation did not finish before its deadline."""


class ProtocolError(GloocyError):
    """A peer sent bytes that are not a valid gloocy frame or handshake."""


class ContextPoisoned(GloocyError):
    """The communicator saw a fatal error earlier and refuses further work."""
