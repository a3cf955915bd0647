"""gloocy.testing's pytest plugin as a user meets it: pytest run in a
fresh directory (its own process, no conftest of ours) on test files
written as README shows. The oracles: pytest's own counts of passed and
failed tests, the text of its report, and the same falsifying example
found again from the seed the report printed."""

import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap

import pytest

import gloocy

PLUGIN = "gloocy.testing.plugin"
ROOT = os.path.dirname(os.path.dirname(gloocy.__file__))


def plugin_installed():
    return any(ep.value == PLUGIN
               for ep in importlib.metadata.entry_points(group="pytest11"))


def run_pytest(directory, *args):
    """pytest in `directory`, as its own process; (exit code, output)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_ADDOPTS", None)
    load = [] if plugin_installed() else ["-p", PLUGIN]   # what the entry point does
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-W", "ignore",
         *load, *args], cwd=directory, env=env, capture_output=True, text=True,
        timeout=240)
    return proc.returncode, proc.stdout + proc.stderr


def test_the_entry_point_names_the_plugin():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()             # (tomllib is Python 3.11's; gloocy runs on 3.10)
    section = text.split("[project.entry-points.pytest11]", 1)[1].split("\n[", 1)[0]
    entries = [line.split() for line in section.splitlines()
               if line.strip() and not line.lstrip().startswith("#")]
    assert entries == [[f'"{PLUGIN}"', "=", f'"{PLUGIN}"']], section


@pytest.mark.skipif(not plugin_installed(),
                    reason="gloocy is not installed (pip install .): no pytest11 entry points")
def test_the_installed_entry_point_loads_the_plugin(tmp_path):
    (tmp_path / "test_a.py").write_text("def test_a(world):\n"
                                        "    assert world(2).run(lambda c: c.size) == [2, 2]\n")
    code, out = run_pytest(tmp_path, "-p", "no:gloocy.testing.plugin")
    assert code != 0 and "fixture 'world' not found" in out, out
    code, out = run_pytest(tmp_path)
    assert code == 0 and "1 passed" in out, out


USER_TESTS = '''
    import numpy as np, pytest, gloocy
    from gloocy import MPI

    @pytest.mark.world(sizes=[1, 2, 3, 5])
    def test_sum(comm):
        x = np.full(3, comm.rank + 1.0)
        comm.Allreduce(gloocy.IN_PLACE, x)
        assert x[0] == comm.size * (comm.size + 1) / 2

    @pytest.mark.world(sizes=[3], backend="processes")
    def test_in_rank_processes(comm):
        # only a rank process has the world as its MPI.COMM_WORLD
        assert MPI.COMM_WORLD.Get_size() == 3
        assert MPI.COMM_WORLD.Get_rank() == comm.rank

    @pytest.mark.world(sizes=[3])
    def test_rank_2_disagrees(comm):
        total = comm.allreduce(comm.rank)
        print(f"rank {comm.rank} got {total}")
        assert comm.rank != 2, f"rank 2 disagrees with {total}"

    def test_with_a_world(world):
        assert world(3).run(lambda comm: comm.rank) == [0, 1, 2]

    def test_the_fixture_takes_world_options_and_environment(world):
        w = world(2, transport="tcp", comm_timeout=9, GLOOCY_TCP_DEAD_S=5)
        assert (w.transport, w.comm_timeout, w.env) == ("tcp", 9.0,
                                                        {"GLOOCY_TCP_DEAD_S": "5"})
        assert world(2, transport="tcp", comm_timeout=9, GLOOCY_TCP_DEAD_S=5) is w
        with pytest.raises(TypeError, match="world\\(\\): tranport is not an option"):
            world(2, tranport="tcp")
        assert repr(world) == "world"      # as hypothesis shows it
'''


def test_marker_fixture_and_failures_naming_the_rank(tmp_path):
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    code, out = run_pytest(tmp_path, "-q")
    assert code == 1, out
    assert "1 failed, 7 passed" in out, out        # 4 sizes + processes + 2 fixture
    assert "rank 2 of a threads world of 3 failed in test_rank_2_disagrees[size3]" in out, out
    assert "[rank 2] AssertionError: rank 2 disagrees with 3" in out, out
    assert "rank 2 got 3" in out                   # what the rank printed
    assert "[rank 0]" not in out and "[rank 1]" not in out

    code, out = run_pytest(tmp_path, "-q", "--gloocy-backend", "processes",
                           "-k", "disagrees")
    assert code == 1, out
    assert "rank 2 of a processes world of 3 failed in test_rank_2_disagrees[size3]" in out, out


SEARCH = '''
    import numpy as np, gloocy
    from hypothesis import given, settings, strategies as st
    from gloocy.testing import strategies as gst

    def total(comm, x):
        s = np.array([x.sum()])
        comm.Allreduce(gloocy.IN_PLACE, s)
        return int(s[0])

    @settings(deadline=None, database=None, max_examples=300)
    @given(gst.per_rank(gst.arrays("int64", st.integers(0, 4), max_abs=100), 1, 8))
    def test_total(world, shares):
        got = world(len(shares)).run_each(total, [(s,) for s in shares])
        assert got == [sum(int(s.sum()) for s in shares)] * len(shares)
        assert len(shares) < 3 or sum(s.size for s in shares) < 5   # the planted bug
'''


def falsifying(out):
    # (hypothesis >= 6.16x says "Failing test case")
    found = re.search(r"(?:Falsifying example|Failing test case): test_total\("
                      r"(.*?)\n\s*E?\s*\)", out, re.S)
    assert found, out
    return re.sub(r"[\sE]+", "", found.group(1))


def shape_of(example):
    """(ranks, values in all) of a falsifying `shares=[array([...]), ...]`."""
    arrays = re.findall(r"array\(\[([^\]]*)\]", example)
    return len(arrays), sum(len([v for v in a.split(",") if v]) for a in arrays)


# hypothesis searches at random, except on CI machines (its "ci" profile,
# chosen when $CI is set, is derandomized): the tests name the profile.
RANDOM, DERANDOMIZED = "--hypothesis-profile=default", "--hypothesis-profile=ci"


def test_a_failing_search_prints_its_seed_and_the_seed_finds_it_again(tmp_path):
    (tmp_path / "test_search.py").write_text(textwrap.dedent(SEARCH))
    code, out = run_pytest(tmp_path, "-q", RANDOM)
    assert code == 1, out
    seed = re.search(r"--hypothesis-seed=(\d+)", out)
    assert seed and "the same search again" in out, out
    first = falsifying(out)
    # shrunk to an example of the bug (3 ranks and 5 values at least; the
    # shrinker may stop at 4 ranks of 5 values, or at 3)
    ranks, values = shape_of(first)
    assert ranks >= 3 and values >= 5 and ranks + values <= 9, first
    again = run_pytest(tmp_path, "-q", RANDOM, f"--hypothesis-seed={seed.group(1)}")[1]
    assert falsifying(again) == first
    assert f"--hypothesis-seed={seed.group(1)}" in again


def test_a_derandomized_search_prints_no_seed_and_finds_the_same_again(tmp_path):
    """On CI (or with derandomize=True) the search is the same each run:
    there is no seed to print, and a rerun finds the same example."""
    (tmp_path / "test_search.py").write_text(textwrap.dedent(SEARCH))
    code, out = run_pytest(tmp_path, "-q", DERANDOMIZED)
    assert code == 1, out
    assert "--hypothesis-seed" not in out and "the same search again" not in out, out
    first = falsifying(out)
    assert first.count("array(") == 3, first
    assert falsifying(run_pytest(tmp_path, "-q", DERANDOMIZED)[1]) == first
