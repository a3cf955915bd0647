"""gloocy/waiting.py: what the host allows (cgroup v2 cpu.max, read from
files laid out as the kernel does) and the spin/yield times chosen from it,
or forced by GLOOCY_SPIN_US / GLOOCY_YIELD_US."""

import os

import pytest

from gloocy.waiting import SPIN_US, YIELD_US, cgroup_cpu_limit, usable_cpus, wait_tuning


def fake_cgroup(tmp_path, path, limits):
    """A /proc/self/cgroup naming `path` and cpu.max files {dir: text}."""
    proc = tmp_path / "cgroup"
    proc.write_text(f"0::{path}\n")
    root = tmp_path / "fs"
    for d, text in limits.items():
        (root / d).mkdir(parents=True, exist_ok=True)
        (root / d / "cpu.max").write_text(text + "\n")
    return str(proc), str(root)


@pytest.mark.parametrize("limits, cpus", [
    ({"job": "max 100000"}, None),                      # no quota
    ({"job": "150000 100000"}, 2),                      # 1.5 CPUs: rounded up
    ({"job": "50000 100000"}, 1),                       # half a CPU: one
    ({"": "max 100000", "job": "400000 100000", "job/step": "200000 100000"}, 2),
    ({"job": "100000 100000", "job/step": "800000 100000"}, 1),   # a parent's is tighter
    ({"job": "nonsense"}, None),
])
def test_the_tightest_cgroup_quota_counts(tmp_path, limits, cpus):
    proc, root = fake_cgroup(tmp_path, "/job/step", limits)
    assert cgroup_cpu_limit(proc, root) == cpus


def test_no_cgroup_v2_means_no_quota(tmp_path):
    proc = tmp_path / "cgroup"
    proc.write_text("12:cpu,cpuacct:/job\n")            # cgroup v1 only
    assert cgroup_cpu_limit(str(proc), str(tmp_path)) is None
    assert cgroup_cpu_limit(str(tmp_path / "absent"), str(tmp_path)) is None


def test_usable_cpus_is_within_the_affinity_mask():
    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize("ranks, cpus, want", [
    (1, 2, (SPIN_US, 0)), (2, 2, (SPIN_US, 0)),
    (3, 2, (0, YIELD_US)), (8, 2, (0, YIELD_US)), (2, 1, (0, YIELD_US)),
])
def test_spin_only_while_every_rank_has_a_cpu(ranks, cpus, want):
    got = wait_tuning(ranks, cpus=cpus, env={})
    assert (got["spin_us"], got["yield_us"]) == want


def test_the_knobs_force_either_time():
    env = {"GLOOCY_SPIN_US": "7", "GLOOCY_YIELD_US": "0"}
    assert wait_tuning(8, cpus=2, env=env) == {"spin_us": 7, "yield_us": 0}
    assert wait_tuning(1, cpus=2, env={"GLOOCY_YIELD_US": "30"}) == \
        {"spin_us": SPIN_US, "yield_us": 30}


@pytest.mark.parametrize("name, text", [("GLOOCY_SPIN_US", "fast"),
                                        ("GLOOCY_YIELD_US", "-1")])
def test_a_bad_knob_is_named(name, text):
    with pytest.raises(ValueError, match=name):
        wait_tuning(2, cpus=2, env={name: text})


# The node segment's floor under a wait's look (gloocy/_node.pxi): none
# unless GLOOCY_NODE_LOOK_US asks for one.
def test_the_node_look_floor_is_off_unless_asked_and_a_bad_one_is_named():
    from gloocy._core import node_look_floor_us
    assert node_look_floor_us({}) == 0
    assert node_look_floor_us({"GLOOCY_NODE_LOOK_US": ""}) == 0
    assert node_look_floor_us({"GLOOCY_NODE_LOOK_US": "1000"}) == 1000
    for text in ("-1", "1.5", "soon"):
        with pytest.raises(ValueError, match="GLOOCY_NODE_LOOK_US"):
            node_look_floor_us({"GLOOCY_NODE_LOOK_US": text})
