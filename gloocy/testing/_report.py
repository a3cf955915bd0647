"""What a rank returns when its call fails, and the exceptions a world
raises: shared by the thread and the process back ends."""

from __future__ import annotations

import os
import pickle
import traceback

OUTPUT_TAIL = 4000          # characters of a rank's output shown on failure


class RankError:
    """What one rank raised (or how its process died) during a call."""

    def __init__(self, rank, type_name, message, traceback_text="", *,
                 type_names=(), exception=None, exitcode=None, output=""):
        self.rank = rank
        self.type_name = type_name
        self.type_names = tuple(type_names) or (type_name,)
        self.message = message
        self.traceback = traceback_text
        self.exception = exception
        self.exitcode = exitcode
        self.output = output

    @classmethod
    def from_exception(cls, rank, exc, output=""):
        return cls(rank, type(exc).__name__, str(exc), format_exception(exc),
                   type_names=[c.__name__ for c in type(exc).__mro__],
                   exception=exc, output=output)

    def is_a(self, name):
        """True when the exception's class or one of its bases is called
        `name` (a class works too: its __name__ is used)."""
        return getattr(name, "__name__", name) in self.type_names

    def __repr__(self):
        return f"<RankError rank {self.rank}: {self.type_name}: {self.message}>"

    def describe(self):
        text = f"--- rank {self.rank}: {self.type_name}: {self.message}\n"
        if self.traceback:
            text += "".join(f"[rank {self.rank}] {line}\n"
                            for line in self.traceback.rstrip().splitlines())
        if self.output.strip():
            text += (f"--- rank {self.rank} output (last {OUTPUT_TAIL} chars):\n"
                     f"{self.output[-OUTPUT_TAIL:].rstrip()}\n")
        return text


class RankFailure(AssertionError):
    """One or more ranks raised; the message shows every traceback, each
    line prefixed with its rank. ``errors`` {rank: RankError}, ``results``
    (the list run() would have returned), ``hung`` (ranks that did not
    finish)."""

    def __init__(self, message, errors=None, results=None, hung=()):
        super().__init__(message)
        self.errors = dict(errors or {})
        self.results = results
        self.hung = list(hung)


class RankTimeout(RankFailure):
    """Some ranks did not finish in time; the message holds every hung
    rank's stacks. The world is dead."""


class RankLeak(RankFailure):
    """Some ranks hold more fds, threads or child processes after a call
    than when the world formed (process worlds)."""


_HERE = os.path.dirname(os.path.abspath(__file__))


def format_exception(exc):
    """The traceback without the world's own frames at its top."""
    tb = exc.__traceback__
    while tb is not None and os.path.dirname(
            os.path.abspath(tb.tb_frame.f_code.co_filename)) == _HERE:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def error_payload(exc):
    """A rank's exception as a picklable dict (process worlds)."""
    try:
        pickled = pickle.dumps(exc)
    except Exception:
        pickled = None
    return dict(type_name=type(exc).__name__,
                type_names=[c.__name__ for c in type(exc).__mro__],
                message=str(exc), traceback=format_exception(exc),
                pickled=pickled)


def fn_name(fn):
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"


def ranks_text(ranks):
    ranks = list(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))


def check_ranks(ranks, size, what):
    """`ranks` (None: all) as a list of distinct ranks of a world of `size`."""
    ranks = list(range(size)) if ranks is None else list(ranks)
    bad = [r for r in ranks if not isinstance(r, int) or not 0 <= r < size]
    if bad or len(set(ranks)) != len(ranks):
        raise ValueError(f"ranks: {ranks} are not distinct ranks of {what}")
    return ranks


def args_for(args_per_rank, size, ranks):
    """run_each's {rank: args tuple} from a list of `size` tuples or a dict."""
    if ranks is None:
        ranks = (sorted(args_per_rank) if isinstance(args_per_rank, dict)
                 else list(range(size)))
    if not isinstance(args_per_rank, dict) and len(args_per_rank) != size:
        raise ValueError(f"args_per_rank: expected {size} tuples, got "
                         f"{len(args_per_rank)}")
    return {r: tuple(args_per_rank[r]) for r in ranks}, list(ranks)


# A rank that raised an error its peers do not hear of through gloocy, while
# others still run, is taken for a crashed process this long after (the
# others may just be finishing).
CRASH_AFTER = 0.25


def peers_not_told(error):
    """Whether a rank's error (a RankError) is one its peers do not hear of
    through gloocy: the rank's own (an assertion, an IndexError...) or bad
    input that gloocy refused before sending a byte. (A dead process's
    peers have already lost it.)"""
    if error.type_name == "ProcessDied":
        return False
    return (not error.is_a("GloocyError") or error.is_a("ArgumentError")
            or error.is_a("OpError"))


def failure(fn, errors, results):
    """RankFailure for `errors` ({rank: RankError}); the ranks' own errors
    come first, the gloocy errors (often what the others made of them:
    a lost peer, a timeout) after."""
    first = sorted(errors.values(), key=lambda e: e.is_a("GloocyError"))
    return RankFailure(f"{ranks_text(errors)} failed in {fn_name(fn)}:\n"
                       + "".join(e.describe() for e in first),
                       errors, results)


def timeout_text(hung, ranks, results, waited, timeout, grace, what, fate):
    """The head of a RankTimeout's message: who hung, who finished, what
    the failed ranks raised; `fate` says what became of the world."""
    errors = {r: e for r, e in results.items() if isinstance(e, RankError)}
    text = (f"{ranks_text(hung)} did not finish {what} within {waited:.3g} s "
            f"(timeout {timeout:g} s"
            + (f", grace {grace:g} s after a failure" if errors else "")
            + f"); {fate}.\n")
    done = [r for r in ranks if r not in hung]
    if done:
        text += f"{ranks_text(done)} finished.\n"
    return text + "".join(e.describe() for e in errors.values()), errors


def check_started(world, results):
    """RankFailure when some rank's gloocy.connect failed."""
    errors = {r: e for r, e in enumerate(results) if isinstance(e, RankError)}
    if errors:
        raise RankFailure(f"{ranks_text(errors)} of {world!r} failed to start:\n"
                          + "".join(e.describe() for e in errors.values()),
                          errors, results)
