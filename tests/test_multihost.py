"""Several hosts on one machine: network namespaces joined by a bridge (in
a namespace of its own, so the machine's own network is untouched), one
`gloocy-run --nnodes` per namespace, private addresses only inside."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None,
    reason="needs root and iproute2's `ip` and `tc` to make network namespaces")

PROGRAM = textwrap.dedent("""
    import sys
    import numpy as np
    from gloocy import MPI
    comm = MPI.COMM_WORLD
    n = int(sys.argv[1])
    x = np.full(n, comm.rank + 1, np.int64)
    comm.Allreduce(MPI.IN_PLACE, x)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    hosts = comm.allgather(node.allgather(comm.rank))
    ok = bool(np.all(x == comm.size * (comm.size + 1) // 2))
    sys.stdout.write(f"{comm.rank} {comm.size} {ok} {sorted(set(map(tuple, hosts)))}\\n")
""")


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True)


@pytest.fixture
def hosts():
    """Two namespaces on 10.77.0.0/24 through a bridge; yields their names
    and addresses; removes everything after."""
    tag = f"gl{os.getpid() % 100000}"
    bridge, names = f"{tag}br", [f"{tag}h0", f"{tag}h1"]
    made = []
    try:
        for ns in [bridge, *names]:
            ip("netns", "add", ns)
            made.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", bridge, "link", "add", "br0", "type", "bridge")
        ip("-n", bridge, "link", "set", "br0", "up")
        addrs = []
        for i, ns in enumerate(names):
            ip("link", "add", f"{tag}v{i}", "netns", ns, "type", "veth",
               "peer", "name", f"{tag}b{i}", "netns", bridge)
            ip("-n", ns, "addr", "add", f"10.77.0.{10 + i}/24", "dev", f"{tag}v{i}")
            ip("-n", ns, "link", "set", f"{tag}v{i}", "up")
            ip("-n", bridge, "link", "set", f"{tag}b{i}", "master", "br0")
            ip("-n", bridge, "link", "set", f"{tag}b{i}", "up")
            addrs.append(f"10.77.0.{10 + i}")
        yield tag, names, addrs
    finally:
        for ns in made:
            ip("netns", "del", ns, check=False)


def run_nodes(tmp_path, names, store, ranks_per_node, n, timeout=90):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    env = dict(os.environ, GLOOCY_SECRET="ab" * 16)
    procs = [subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "gloocy.run",
         "--nnodes", str(len(names)), "--node-rank", str(k), "--store", store,
         "-n", str(ranks_per_node), sys.executable, str(prog), str(n)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for k, ns in enumerate(names)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, err.decode()[-3000:]
            outs.extend(out.decode().splitlines())
    finally:
        for p in procs:
            p.kill()
    return sorted(outs)


def expected(nodes, per_node):
    size = nodes * per_node
    groups = sorted({tuple(range(k * per_node, (k + 1) * per_node)) for k in range(nodes)})
    return sorted(f"[{r}] {r} {size} True {groups}" for r in range(size))


def test_collectives_across_two_hosts(hosts, tmp_path):
    tag, names, addrs = hosts
    got = run_nodes(tmp_path, names, f"{addrs[0]}:29555", 2, 1000)
    assert got == expected(2, 2)


def test_rate_limited_link_stays_correct(hosts, tmp_path):
    """One host's link limited to 20 Mbit/s (tbf): 4 MiB allreduces still
    give exact results."""
    tag, names, addrs = hosts
    subprocess.run(["tc", "-n", names[1], "qdisc", "add", "dev", f"{tag}v1",
                    "root", "tbf", "rate", "20mbit", "burst", "32kbit",
                    "latency", "400ms"], check=True, capture_output=True)
    got = run_nodes(tmp_path, names, f"{addrs[0]}:29556", 1, 1 << 19)
    assert got == expected(2, 1)
