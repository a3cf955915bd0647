"""A link cut without FIN or RST: two hosts (network namespaces, see
test_multihost.py) lose each other silently, during a collective or while
idle. Nothing tells either rank; only deadlines and TCP keepalive
(GLOOCY_TCP_DEAD_S) can."""

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import gloocy
from gloocy import transport
from test_multihost import hosts, pytestmark as needs_namespaces  # noqa: F401

TRANSPORTS = ("tcp",)         # for the `world` fixture: the mesh is TCP

# A rank of a 2-host job: one allreduce, "ready", then either allreduces
# until the link dies ("call"), or idling until the test's `go` file
# appears and then one barrier ("idle"). It reports what that raised.
PROGRAM = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from gloocy import MPI
    mode, go = sys.argv[1], sys.argv[2]
    comm = MPI.COMM_WORLD
    x = np.ones(1 << 19)                          # 4 MiB
    comm.Allreduce(MPI.IN_PLACE, x)
    print("ready", flush=True)
    calls, start = 0, None
    try:
        if mode == "call":
            while True:
                x[:] = 1
                start = time.monotonic()
                comm.Allreduce(MPI.IN_PLACE, x)
                calls += 1
        while not os.path.exists(go):
            time.sleep(0.02)
        start = time.monotonic()
        comm.Barrier()
        error = None
    except Exception as e:
        error = e
    print(json.dumps(dict(type=type(error).__name__, message=str(error),
                          start=start, end=time.monotonic(), calls=calls)),
          flush=True)
""")


def cut(how, tag, names):
    """Make host 1 unreachable, telling nobody: its interface down, or a
    token bucket on it that lets no packet out (every packet is larger
    than its 1-byte bucket)."""
    if how == "link down":
        subprocess.run(["ip", "-n", names[1], "link", "set", f"{tag}v1", "down"],
                       check=True, capture_output=True)
    else:
        subprocess.run(["tc", "-n", names[1], "qdisc", "add", "dev", f"{tag}v1",
                        "root", "tbf", "rate", "1kbit", "burst", "1", "limit", "1"],
                       check=True, capture_output=True)


def run_and_cut(tmp_path, hosts, how, mode, env, wait_after_cut=0.0):
    """Start the 2-rank job (one rank per host), cut the link half a second
    after both are ready, create the go file `wait_after_cut` seconds after the
    cut. Returns the time of the cut and each rank's report."""
    tag, names, addrs, _ = hosts
    prog, go = tmp_path / "prog.py", tmp_path / "go"
    prog.write_text(PROGRAM)
    env = dict(os.environ, GLOOCY_SECRET="ef" * 16, **env)
    procs = [subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "gloocy.run",
         "--nnodes", "2", "--node-rank", str(k), "--store", f"{addrs[0]}:29570",
         "-n", "1", sys.executable, str(prog), mode, str(go)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k, ns in enumerate(names)]
    try:
        for p in procs:
            line = p.stdout.readline()
            assert line.endswith("ready\n"), line + p.stderr.read()
        # Half a second: in "call" mode allreduces are then on the wire; in
        # "idle" mode the last ACKs have arrived (Linux delays one by up to
        # 200 ms). Data still unacknowledged at the cut would be retransmitted
        # instead of probed, and keepalive would never start.
        time.sleep(0.5)
        cut(how, tag, names)
        cut_at = time.monotonic()
        time.sleep(wait_after_cut)
        go.touch()
        reports = []
        for p in procs:
            out, err = p.communicate(timeout=90)
            assert p.returncode == 0, err[-3000:]
            reports.append(json.loads(out.split("] ", 1)[1]))
        return cut_at, reports
    finally:
        for p in procs:
            p.kill()
            p.wait()


def names_peer(report, peer):
    """A CollectiveTimeout or PeerLostError whose message names `peer`
    ("waiting for rank(s) 1", "lost peer rank 1", "rank 1 stopped the
    call": a peer that timed out first and could still tell us so)."""
    return (report["type"] in ("CollectiveTimeout", "PeerLostError")
            and re.search(rf"\brank(\(s\))? {peer}\b", report["message"]))


# Each test runs by default with one way of cutting, the two tests between
# them with both (the link down makes host 1's own sends fail, the token
# bucket leaves both sides silent); --long runs each test with both.
CUTS = ["link down", "tbf drops all"]


def cuts(default):
    return [how if how == default else pytest.param(how, marks=pytest.mark.long)
            for how in CUTS]


@needs_namespaces
@pytest.mark.parametrize("how", cuts("link down"))
def test_cut_during_a_collective_raises_by_the_deadline(tmp_path, hosts, how):
    """Ranks in 4 MiB allreduces when the link goes: each raises within its
    call's 3 s deadline, naming the other. (GLOOCY_TCP_DEAD_S is left at
    its default, 30 s, so only the deadline can end the call.)"""
    deadline = 3.0
    cut_at, reports = run_and_cut(tmp_path, hosts, how, "call",
                                  {"GLOOCY_TIMEOUT": str(deadline)})
    for rank, rep in enumerate(reports):
        assert names_peer(rep, 1 - rank), json.dumps(rep)
        assert rep["calls"] >= 1, rep             # the link carried allreduces
        # The call that raised began at most at the cut (or just after it, if
        # this rank had everything it needed), so it ends by cut + deadline;
        # 3 s more for a loaded 2-core machine (the promise is + 1 s).
        assert rep["end"] - cut_at <= deadline + 3.0, (rep, cut_at)


@needs_namespaces
@pytest.mark.parametrize("how", cuts("tbf drops all"))
def test_cut_while_idle_is_found_by_keepalive(tmp_path, hosts, how):
    """The link goes while both ranks are idle. With GLOOCY_TCP_DEAD_S=3,
    TCP keepalive declares the connection dead at most 3 s after the last
    packet, which came before the cut; 3 s later each rank makes a call
    with a 60 s deadline. That call must fail at once with PeerLostError
    naming the peer: a connection nobody had found dead would leave the
    barrier waiting for the whole 60 s."""
    dead_s, deadline = 3, 60.0
    cut_at, reports = run_and_cut(
        tmp_path, hosts, how, "idle",
        {"GLOOCY_TCP_DEAD_S": str(dead_s), "GLOOCY_TIMEOUT": str(deadline)},
        wait_after_cut=dead_s + 3.0)
    for rank, rep in enumerate(reports):
        assert rep["type"] == "PeerLostError" and names_peer(rep, 1 - rank), rep
        assert rep["start"] >= cut_at + dead_s, (rep, cut_at)
        # "At once" is milliseconds; 10 s of slack on a loaded machine is
        # still far from the 60 s a live-looking connection would take.
        assert rep["end"] - rep["start"] < 10.0, rep


def late_allreduce(comm, delay, n):
    time.sleep(delay)
    x = np.full(n, comm.rank + 1.0)
    comm.Allreduce(gloocy.IN_PLACE, x)
    return bool(np.all(x == comm.size * (comm.size + 1) / 2))


def test_a_late_peer_is_not_taken_for_a_dead_one(world):
    """Keepalive must not kill a connection to a host that is alive: rank 1
    comes to a 32 MiB allreduce 5 s late, longer than GLOOCY_TCP_DEAD_S=2,
    while rank 0 has already filled the socket buffers towards it (a zero
    window: rank 1's kernel acknowledges, its process does not read). A
    'no acknowledgement of our data for 2 s' rule (TCP_USER_TIMEOUT) would
    fail this job; keepalive answers come from the kernel, so it must not."""
    w = world(2, GLOOCY_TCP_DEAD_S=2)
    assert w.run_each(late_allreduce, [(0.0, 4 << 20), (5.0, 4 << 20)],
                      timeout=60) == [True, True]


@pytest.mark.parametrize("value", ["1", "-5", "2.5", "soon"])
def test_a_bad_dead_time_is_refused_before_connecting(monkeypatch, value):
    """GLOOCY_TCP_DEAD_S is whole seconds from 2 (or 0, off): anything else
    is a ValueError naming the variable, before any connection is made
    (a world of one connects to nobody, so only the check can raise)."""
    monkeypatch.setenv("GLOOCY_TCP_DEAD_S", value)
    with pytest.raises(ValueError, match="GLOOCY_TCP_DEAD_S"):
        transport.connect(None, 0, 1, b"")
    monkeypatch.setenv("GLOOCY_TCP_DEAD_S", "0")
    assert transport.connect(None, 0, 1, b"").pairs == [None]
