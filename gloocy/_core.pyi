"""Type stubs for gloocy._core (Cython): buffers, kernels, Context, Pair."""

from typing import Any, Callable, Final, Sequence, TypeVar

from numpy import ndarray
from typing_extensions import Buffer, Self, TypeAlias, disjoint_base

from gloocy.errors import (CollectiveTimeout as CollectiveTimeout,
                           ContextPoisoned as ContextPoisoned,
                           GloocyError as GloocyError,
                           MismatchError as MismatchError,
                           PeerLostError as PeerLostError,
                           ProtocolError as ProtocolError)

OP_NAMES: Final[dict[int, str]]       # op code -> "SUM", "PROD", ...
OP_CODES: Final[dict[str, int]]       # "SUM" -> op code
DTYPE_NAMES: Final[dict[int, str]]    # dtype code -> "float32", ...; 0 is "bytes"
DTYPE_CODES: Final[dict[str, int]]    # "float32" -> dtype code
KIND_NAMES: Final[dict[int, str]]     # frame kind -> "barrier", "bcast", ...
ALGORITHMS: Final[dict[str, int]]     # allreduce algorithm name -> code

# Anything with the buffer protocol (numpy's stubs say so of ndarray only
# on Python >= 3.12, hence the union).
_Buffer: TypeAlias = "Buffer | ndarray[Any, Any]"
_P = TypeVar("_P", bound="Pair | None")   # any list of pairs, e.g. list[TcpPair | None]


def set_buffer_watch(watch: Callable[[object, int, int], object] | None,
                     min_bytes: int = 0) -> None:
    """Call watch(obj, address, nbytes) for every user buffer of at least
    min_bytes as a call acquires it; None: stop."""


def reduce_local(src: _Buffer, acc: _Buffer, op: int, dtype: int) -> None:
    """acc <op>= src elementwise; both are contiguous unsigned-byte buffers
    holding the same whole number of `dtype` elements (kernel tests)."""


@disjoint_base
class Buf:
    """A buffer held for the length of one call (internal)."""


@disjoint_base
class Pair:
    """Tagged, ordered, reliable byte messages to one peer (abstract; each
    transport subclasses it)."""

    @property
    def rank(self) -> int: ...           # our rank
    @property
    def peer(self) -> int: ...           # the peer's rank
    @property
    def closed(self) -> bool: ...        # closed locally; every post fails
    @property
    def peer_gone(self) -> bool: ...     # the peer closed its end
    @property
    def peer_said_bye(self) -> bool: ... # ... and said goodbye first
    def __new__(cls, *args: object, **kwargs: object) -> Self: ...
    def close(self, clean: bool = True) -> None: ...


class LazyPair(Pair):
    """The stand-in for every peer not connected yet (one object)."""


UNCONNECTED: LazyPair                    # in every slot not connected yet


@disjoint_base
class Context:
    """This rank's view of a group: its pairs, counters and deadlines."""

    timeout: float          # default deadline of a call, seconds
    segment: int            # pipeline segment size in bytes
    spin_ns: int            # how long a wait spins before it yields or sleeps
    small_allreduce: int    # bytes up to which "auto" picks recursive doubling

    def __new__(cls, rank: int, size: int, pairs: list[_P], *,
                comm_id: int = 0, timeout: float = 300.0,
                segment: int = 1 << 18, spin_us: int = 50,
                small_allreduce: int = 1 << 16, node_fd: int = -1,
                yield_us: int = 0) -> Self: ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def comm_id(self) -> int: ...
    @property
    def seq(self) -> int: ...                     # collectives issued so far
    @property
    def error(self) -> BaseException | None: ...  # set => poisoned
    @property
    def closed(self) -> bool: ...
    def close(self, *, linger: float = 1.0) -> None:
        """Close every pair; after a lost peer, first wait up to `linger`
        seconds for the other ranks to hang up."""
    def close_all(self, *, linger: float = 1.0) -> None:
        """Close the connections under this context and every one derived
        from it, saying goodbye (what a process does when it leaves)."""
    def barrier(self, *, timeout: float | None = None,
                algorithm: str | None = None) -> None: ...
    @property
    def last_algorithm(self) -> str | None: ...   # what the last call ran
    def bcast(self, buf: _Buffer, root: int, *, timeout: float | None = None,
              algorithm: str | None = None) -> None: ...
    def allreduce(self, sendbuf: _Buffer | None, recvbuf: _Buffer, op: int, *,
                  timeout: float | None = None,
                  algorithm: str | None = None) -> None: ...
    def allgatherv(self, sendbuf: _Buffer | None, recvbuf: _Buffer,
                   counts: Sequence[int], displs: Sequence[int] | None = None,
                   *, timeout: float | None = None,
                   algorithm: str | None = None) -> None:
        """counts/displs in bytes."""
    def reduce(self, sendbuf: _Buffer | None, recvbuf: _Buffer | None,
               op: int, root: int, *, timeout: float | None = None,
               algorithm: str | None = None) -> None: ...
    def reduce_scatter(self, sendbuf: _Buffer | None, recvbuf: _Buffer,
                       counts: Sequence[int], op: int, *,
                       timeout: float | None = None,
                       algorithm: str | None = None) -> None:
        """counts in elements."""
    def scan(self, sendbuf: _Buffer | None, recvbuf: _Buffer, op: int, *,
             exclusive: bool = False, timeout: float | None = None) -> None: ...
    def gatherv(self, sendbuf: _Buffer | None, recvbuf: _Buffer | None,
                counts: Sequence[int] | None, displs: Sequence[int] | None,
                root: int, *, timeout: float | None = None,
                algorithm: str | None = None, uniform: bool = False) -> None:
        """uniform: the API's Gather (every block one size on every rank:
        "auto" may then choose by it; scatterv and alltoallv alike)."""
    def scatterv(self, sendbuf: _Buffer | None, recvbuf: _Buffer | None,
                 counts: Sequence[int] | None, displs: Sequence[int] | None,
                 root: int, *, timeout: float | None = None,
                 algorithm: str | None = None, uniform: bool = False) -> None: ...
    def alltoallv(self, sendbuf: _Buffer | None,
                  sendcounts: Sequence[int] | None,
                  senddispls: Sequence[int] | None, recvbuf: _Buffer,
                  recvcounts: Sequence[int], recvdispls: Sequence[int] | None,
                  *, timeout: float | None = None,
                  algorithm: str | None = None, uniform: bool = False) -> None: ...
    def send(self, buf: _Buffer, dest: int, tag: int = 0, *,
             timeout: float | None = None) -> None: ...
    def recv(self, buf: _Buffer, source: int = -1, tag: int = -1, *,
             timeout: float | None = None) -> tuple[int, int, int]:
        """(source, tag, nbytes); -1 means any."""
    def probe(self, source: int = -1, tag: int = -1, *, block: bool = True,
              timeout: float | None = None) -> tuple[int, int, int] | None: ...
    def isend(self, buf: _Buffer, dest: int, tag: int = 0) -> P2PHandle: ...
    def irecv(self, buf: _Buffer, source: int = -1,
              tag: int = -1) -> P2PHandle: ...
    # Nonblocking collectives: schedules run by any progress call.
    def ibarrier(self) -> NbcHandle: ...
    def ibcast(self, buf: _Buffer, root: int) -> NbcHandle: ...
    def iallreduce(self, sendbuf: _Buffer | None, recvbuf: _Buffer,
                   op: int) -> NbcHandle: ...
    def ireduce(self, sendbuf: _Buffer | None, recvbuf: _Buffer | None,
                op: int, root: int) -> NbcHandle: ...
    def iallgatherv(self, sendbuf: _Buffer | None, recvbuf: _Buffer,
                    counts: Sequence[int],
                    displs: Sequence[int] | None = None) -> NbcHandle: ...
    def igatherv(self, sendbuf: _Buffer | None, recvbuf: _Buffer | None,
                 counts: Sequence[int] | None, displs: Sequence[int] | None,
                 root: int) -> NbcHandle: ...
    def iscatterv(self, sendbuf: _Buffer | None, recvbuf: _Buffer | None,
                  counts: Sequence[int] | None, displs: Sequence[int] | None,
                  root: int) -> NbcHandle: ...
    def ialltoallv(self, sendbuf: _Buffer | None,
                   sendcounts: Sequence[int] | None,
                   senddispls: Sequence[int] | None, recvbuf: _Buffer,
                   recvcounts: Sequence[int],
                   recvdispls: Sequence[int] | None) -> NbcHandle: ...
    def ireduce_scatter(self, sendbuf: _Buffer | None, recvbuf: _Buffer,
                        counts: Sequence[int], op: int) -> NbcHandle: ...
    def iscan(self, sendbuf: _Buffer | None, recvbuf: _Buffer, op: int,
              exclusive: bool = False) -> NbcHandle: ...


@disjoint_base
class P2PHandle:
    """An Isend or Irecv in flight."""

    @property
    def done(self) -> bool: ...
    @property
    def cancelled(self) -> bool: ...
    @property
    def result(self) -> tuple[int, int, int] | None: ...
    def wait(self, timeout: float | None = None) -> tuple[int, int, int] | None: ...
    def test(self) -> tuple[int, int, int] | None: ...
    def cancel(self) -> bool: ...


@disjoint_base
class NbcHandle:
    """A nonblocking collective in flight (a schedule of steps)."""

    @property
    def done(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> None: ...
    def test(self) -> bool: ...


class UserOp:
    """A user op as OP_USER's kernel calls it: fold(acc, src) sets
    acc = acc <op> src on memoryviews of elements of `itemsize` bytes;
    `commute`: any algorithm may run it (else operands in rank order)."""
    def __init__(self, fold: Any, itemsize: int, commute: bool = False) -> None: ...


def set_user_op(op: UserOp | None = None) -> None:
    """This thread's user op for OP_USER reductions (None: unset, which
    raises what it raised meanwhile)."""


def finish_schedules(ctx: Context) -> None:
    """Run the unfinished nonblocking collectives over ctx's links to the end."""


def apply_c_op(function: int, ctx: int, src: _Buffer, acc: _Buffer,
               count: int) -> None:
    """acc = acc <op> src with a C function at address `function`."""


def check_floating(buf: _Buffer, name: str = "recvbuf") -> None: ...
def divide(buf: _Buffer, by: int) -> None: ...


ALGORITHM_TABLES: Final[dict[str, dict[str, int]]]   # collective -> name -> code
ALGORITHM_ENV: Final[dict[str, str]]                  # collective -> env variable
ALGORITHM_NAMES: Final[dict[int, str]]
ALGORITHM_THRESHOLDS: Final[dict[str, int]]
TWO_LEVEL_MIN: Final[dict[str, int]]                  # collective -> bytes


def auto_algorithm(collective: str, size: int, nbytes: int, *,
                   itemsize: int = 4, small_allreduce: int = 65536,
                   node: bool = False, hosts: int = 1,
                   cma_min: int = ..., segment: int = 1048576) -> str:
    """The algorithm "auto" picks (`hosts`: hosts the ranks are on;
    `segment`: the bcast pipeline's segment)."""


def host_layout(ctx: Context) -> list[list[int]] | None:
    """ctx's ranks on each host, as the two-level collectives see them
    (None until a collective has learnt it)."""
