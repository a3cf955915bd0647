"""The pytest plugin of gloocy.testing (entry point ``pytest11``; or list
``"gloocy.testing.plugin"`` in a conftest's ``pytest_plugins``).

A test marked ``@pytest.mark.world(sizes=[1, 2, 3, 5], backend="threads")``
runs once per size, its body on every rank of a world of that size; its
``comm`` argument is the rank's communicator, its other fixtures are shared
by the ranks::

    @pytest.mark.world(sizes=[1, 2, 4])
    def test_sum(comm):
        x = np.full(3, comm.rank + 1.0)
        comm.Allreduce(gloocy.IN_PLACE, x)
        assert x[0] == comm.size * (comm.size + 1) / 2

A rank that fails makes the test fail with that rank's assertion and
traceback, every line prefixed ``[rank r]``. Other marker keywords:
``timeout`` (seconds, per size; default 30) and any World option
(``transport="shm"``, ``env={...}``, ``comm_timeout=...``).

The ``world`` fixture, ``world(size, *, backend=None, **env)``, hands out a
live World of `size` ranks (cached for the session while nothing fails in
it; usable inside hypothesis tests), whose ranks have `env` set. The back
end defaults to ``--gloocy-backend`` (``threads`` unless given).

A hypothesis test that uses a world and fails gets a section in its report
with the command that runs the same search again (``--hypothesis-seed``;
keep the example database out of it, ``database=None``, to see the seed
alone find the example).
"""

from __future__ import annotations

import pytest

from ._base import World, Worlds
from ._report import RankFailure, RankTimeout, ranks_text

DEFAULT_SIZES = (1, 2, 3, 4)
_WORLD_OPTIONS = ("transport", "env", "comm_timeout", "link_faults")   # the marker's
_FIXTURE_OPTIONS = {"transport", "timeout", "comm_timeout"}            # the fixture's


def pytest_addoption(parser):
    group = parser.getgroup("gloocy", "gloocy.testing worlds of ranks")
    group.addoption("--gloocy-backend", choices=("threads", "processes"),
                    default=None, help="back end of the worlds the `world` "
                    "fixture and @pytest.mark.world make (default: threads)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "world(sizes=(1, 2, 3, 4), backend='threads', timeout=30, "
        "**world_options): run the test body on every rank of a world of each "
        "size; the `comm` argument is the rank's communicator")


def _default_backend(config):
    return config.getoption("--gloocy-backend", None) or "threads"


@pytest.fixture(scope="session")
def gloocy_worlds(pytestconfig):
    """The session's cache of live worlds (gloocy.testing.Worlds)."""
    cache = Worlds(backend=_default_backend(pytestconfig))
    yield cache
    cache.close()


@pytest.fixture(scope="session")
def world(gloocy_worlds):
    """world(size, *, backend=None, env=None, **options) -> a live
    gloocy.testing World, kept for the session (a failed one is replaced).
    `options`: World's transport=, timeout= and comm_timeout= (make worlds
    with hosts or link_faults yourself: their links change as a test runs);
    upper-case keywords are environment variables (world(3, GLOOCY_X=1))."""
    return _WorldFixture(gloocy_worlds)


class _WorldFixture:
    """The `world` fixture's value (named so in hypothesis's reports)."""

    def __init__(self, worlds):
        self._worlds = worlds

    def __call__(self, size, *, backend=None, env=None, **options):
        env = dict(env or {})
        for name in [k for k in options if k.isupper()]:
            env[name] = options.pop(name)
        unknown = sorted(set(options) - _FIXTURE_OPTIONS)
        if unknown:
            raise TypeError(f"world(): {', '.join(unknown)} is not an option of "
                            f"World ({', '.join(sorted(_FIXTURE_OPTIONS))}); "
                            "environment variables are upper case")
        return self._worlds.get(size, env, backend=backend, **options)

    def __repr__(self):
        return "world"



@pytest.fixture
def comm(request):
    """The rank's communicator, in a test marked @pytest.mark.world (each
    rank gets its own); a world of one elsewhere."""
    import gloocy
    if request.node.get_closest_marker("world") is not None:
        yield None                  # each rank's is put in when it runs
        return
    c = gloocy.connect(0, 1, None)
    yield c
    c.Free()


@pytest.fixture
def gloocy_world_size(request):
    return request.param


def pytest_generate_tests(metafunc):
    marker = metafunc.definition.get_closest_marker("world")
    if marker is None:
        return
    sizes = marker.kwargs.get("sizes", marker.args[0] if marker.args else DEFAULT_SIZES)
    sizes = [sizes] if isinstance(sizes, int) else list(sizes)
    bad = [s for s in sizes if not isinstance(s, int) or s < 1]
    if bad or not sizes:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: "
                                f"@pytest.mark.world sizes={sizes!r}: need "
                                "positive ints")
    metafunc.fixturenames.append("gloocy_world_size")
    metafunc.parametrize("gloocy_world_size", sizes, indirect=True,
                         ids=[f"size{s}" for s in sizes])


def _run_test(comm, function, kwargs):
    """One rank's run of a marked test (module level: process worlds pickle it)."""
    if "comm" in kwargs:
        kwargs = {**kwargs, "comm": comm}
    return function(**kwargs)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    marker = pyfuncitem.get_closest_marker("world")
    callspec = getattr(pyfuncitem, "callspec", None)
    if marker is None or callspec is None or "gloocy_world_size" not in callspec.params:
        return None
    size = callspec.params["gloocy_world_size"]
    kw = marker.kwargs
    backend = kw.get("backend") or _default_backend(pyfuncitem.config)
    options = {k: v for k, v in kw.items() if k in _WORLD_OPTIONS}
    env = options.pop("env", None)
    cache = pyfuncitem._request.getfixturevalue("gloocy_worlds")
    w: World = cache.get(size, env, backend=backend, **options)
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    try:
        w.run(_run_test, pyfuncitem.obj, kwargs, timeout=kw.get("timeout"))
    except RankTimeout as e:
        failed = e
    except RankFailure as e:
        failed = e
        text = (f"{ranks_text(e.errors)} of a {backend} world of {size} failed "
                f"in {pyfuncitem.name}:\n"
                + "".join(err.describe() for err in e.errors.values()))
    else:
        return True
    if isinstance(failed, RankTimeout):
        text = f"in a {backend} world of {size}: {failed}"
    pytest.fail(text, pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    if "world" not in getattr(item, "fixturenames", ()) and \
            item.get_closest_marker("world") is None:
        return
    seed = _hypothesis_seed(item)
    if seed is not None:
        report.sections.append((
            "gloocy.testing: the same search again",
            f"pytest '{item.nodeid}' --hypothesis-seed={seed}"))


def _hypothesis_seed(item):
    """The seed of the hypothesis search that ran `item`, or None (not a
    hypothesis test; or one with a fixed @seed or derandomized, which
    reproduce as they are)."""
    if not getattr(item.obj, "is_hypothesis_test", False):
        return None
    given = item.config.getoption("hypothesis_seed", None)
    if given is not None:
        return given
    # The seed hypothesis drew for this run; it prints it itself only when
    # a search ends abnormally.
    return getattr(item.obj, "_hypothesis_internal_use_generated_seed", None)
