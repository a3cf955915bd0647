"""Shared fixtures: cached worlds of ranks (gloocy.testing) and a hard timeout.

    def test_sum(world):
        w = world(3, GLOOCY_SEGMENT_BYTES=64)    # a live World, cached per (size, env)
        assert w.run(some_module_level_fn, 10) == [...]

The worlds are gloocy.testing's: rank processes by default; a module
that sets ``BACKEND = "threads"`` (or a call ``world(size,
backend="threads", **env)``) gets worlds of rank threads, over the
module's transport ("mix" stays processes: pretend hosts are per process). gloocy.testing's pytest plugin (its ``world`` fixture, which
this one replaces in the suite, and ``@pytest.mark.world``) is loaded
below when gloocy is not installed (the entry point loads it otherwise).

`worlds` is session-scoped and `world` module-scoped (both usable from
hypothesis tests without health-check warnings). A world is handed out again only while it is
``reusable``; after a failure, a timeout or a kill the next request starts a
fresh one. Every test has a hard timeout (default 120 s; per test
``@pytest.mark.hard_timeout(seconds)``; globally GLOOCY_TEST_HARD_TIMEOUT)
after which every rank of every world is SIGKILLed and the test fails.
After every test, open worlds that are no longer ``reusable`` (a rank
killed, timed out or failed) are closed, so no zombie outlives the test
that made it. Every test is checked for leaks: in this process by
`_nothing_leaks`, in the ranks of every world by gloocy.testing (see
gloocy/testing/processes.py).
"""

import os
import signal
import sys
import sysconfig
import threading

import pytest

from gloocy import testing
from gloocy.testing.processes import TEST_HOSTS

pytest_plugins = ["gloocy.testing.plugin"]

HARD_TIMEOUT = float(os.environ.get("GLOOCY_TEST_HARD_TIMEOUT", "120"))


def long_runs():
    """True under `pytest --long` (or GLOOCY_TEST_LONG=1): repeated loops
    run their long version."""
    return os.environ.get("GLOOCY_TEST_LONG", "") not in ("", "0")


def examples(n):
    """Hypothesis's max_examples for a heavy world test: n under --long,
    a quarter of it (at least 2) by default."""
    return n if long_runs() else max(2, n // 4)


def repeats(n):
    """How many times a repeated loop runs: n under --long, 3 by default."""
    return n if long_runs() else min(n, 3)


def pytest_addoption(parser):
    parser.addoption(
        "--long", action="store_true",
        help="the long versions of the repeated loops (exit races, fuzzing, "
        "hypothesis examples) and the tests marked long; same as "
        "GLOOCY_TEST_LONG=1 (README, Tests)")


def pytest_configure(config):
    if config.getoption("--long"):
        os.environ["GLOOCY_TEST_LONG"] = "1"    # read by test modules: LONG
    config.addinivalue_line(
        "markers", "hard_timeout(seconds): kill every rank and fail the test "
        f"after this many seconds (default {HARD_TIMEOUT:g})")
    config.addinivalue_line(
        "markers", "transports(*names): run this test over these transports "
        "only (names of conftest.TRANSPORT_ENV), not the module's TRANSPORTS")
    config.addinivalue_line(
        "markers", "slow: oversubscribed runs (N = 4 on 2 cores); "
        "-m 'not slow' leaves them out")
    config.addinivalue_line(
        "markers", "long: a variant that repeats a path other tests cover; "
        "runs under --long only")


def pytest_collection_modifyitems(config, items):
    if long_runs():
        return
    skip = pytest.mark.skip(reason="a long-run variant: runs under --long")
    for item in items:
        if item.get_closest_marker("long"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def worlds():
    """The session's cache of worlds (gloocy.testing.Worlds, rank processes
    unless asked otherwise); all closed at the end."""
    cache = testing.Worlds(backend="processes")
    yield cache
    cache.close()
    closed, testing.close_leaks[:] = list(testing.close_leaks), []
    assert not closed, "\n".join(closed)


# The transports a test module's worlds run over: a module sets
# TRANSPORTS = ("shm", "tcp", "mix") to run each of its tests over each; a
# test marked @pytest.mark.transports("shm", "tcp") runs over those only.
TRANSPORT_ENV = {
    "auto": {},                               # shared memory: one host
    "shm": {"GLOOCY_TRANSPORT": "shm"},
    "tcp": {"GLOOCY_TRANSPORT": "tcp"},
    # Ranks alternate between two pretend hosts (processes.TEST_HOSTS):
    # shared memory between ranks of one, TCP across.
    "mix": {TEST_HOSTS: "2"},
}


def pytest_generate_tests(metafunc):
    if "transport" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("transports")
        metafunc.parametrize("transport", marker.args if marker else
                             getattr(metafunc.module, "TRANSPORTS", ("auto",)),
                             scope="session")


@pytest.fixture(scope="module")
def world(worlds, transport, request):
    """world(size, *, backend=None, **env) -> a live gloocy.testing World
    with `env` in its ranks' environment (values are turned into strings),
    over the module's transport(s). The back end: `backend`, else the
    module's BACKEND ("threads" or "processes", the default)."""
    default = getattr(request.module, "BACKEND", "processes")

    def get(size, *, backend=None, **env):
        backend = backend or default
        if backend == "threads" and transport != "mix":
            return worlds.get(size, env, backend="threads", transport=(
                "tcp" if transport == "tcp" else "shm" if transport == "shm"
                else "auto"))
        return worlds.get(size, {**TRANSPORT_ENV[transport], **env},
                          backend="processes")
    return get


def _dev_shm():
    return {name for name in os.listdir("/dev/shm")
            if not name.startswith(("mpich", "ucx_shm_", "torch"))}   # the peers' own


_PACKAGES = tuple({sysconfig.get_paths()[k] + "/" for k in ("purelib", "platlib")})
_torch_pipe = set()     # the one pipe torch.distributed keeps (see below)
_MPICH_SHM = ("/dev/shm/mpich_shm_", "/dev/shm/ucx_shm_")


def _not_kept_by_libraries(new):
    """The part of a growth in this process that is not state a library
    keeps for the life of the process once used (no test could free it):
    data files of installed packages left open (matplotlib keeps its fonts
    open), and the one pipe (both ends) that torch.distributed's libuv
    makes with its first TCPStore and never closes, and the shared memory
    MPICH maps once mpi4py's MPI is loaded here (it opens more on later
    use). Anything else counts."""
    fds = {(fd, what) for fd, what in new.fds if not what.startswith(_PACKAGES)}
    if "mpi4py.MPI" in sys.modules:
        fds = {f for f in fds if not f[1].startswith(_MPICH_SHM)}
    pipes = {what for _, what in fds if what.startswith("pipe:")}
    if ("torch.distributed" in sys.modules and not _torch_pipe and len(pipes) == 1
            and sum(what in pipes for _, what in fds) == 2):
        _torch_pipe.update(pipes)
    return new._replace(fds={f for f in fds if f[1] not in _torch_pipe})


@pytest.fixture(autouse=True)
def _nothing_leaks():
    """Every test leaves this process as it found it: no new file
    descriptor, Python thread or child process (beyond what the open
    worlds of rank processes hold: testing.open_worlds_resources), and
    nothing in /dev/shm (gloocy's shared memory is never named: a killed
    rank included). The ranks of the worlds check themselves (gloocy.testing:
    RankLeak after a call, close_leaks after Free)."""
    before, shm = testing.resources(), _dev_shm()
    yield
    testing.close_spoiled()  # spoiled worlds go now: their leaks are this test's
    grown = testing.grown(before, lambda new: _not_kept_by_libraries(
        new - testing.open_worlds_resources()))
    left = sorted(_dev_shm() - shm)
    closed = list(testing.close_leaks)
    testing.close_leaks.clear()
    assert not grown, f"this test left behind in the test process: {grown}"
    assert not left, f"left behind in /dev/shm: {left}"
    assert not closed, "\n".join(closed)


class HardTimeout(Exception):
    """The test ran past its hard timeout."""


@pytest.fixture(autouse=True)
def _hard_timeout(request, _nothing_leaks):   # the leak check comes after
    marker = request.node.get_closest_marker("hard_timeout")
    seconds = float(marker.args[0]) if marker else HARD_TIMEOUT
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def expire(signum, frame):
        testing.abort_all()
        raise HardTimeout(f"{request.node.nodeid} ran longer than its hard "
                          f"timeout of {seconds:g} s; every rank was killed")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        testing.reap_dead()      # no zombies left behind by a dead world
