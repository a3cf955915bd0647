"""Type stubs for gloocy.transport._stream (Cython): frames over a byte stream."""

from typing_extensions import disjoint_base

from gloocy._core import Pair


@disjoint_base
class StreamPair(Pair):
    """A Pair over an ordered byte stream (abstract)."""

    @property
    def address(self) -> str: ...        # where the peer is, for messages
