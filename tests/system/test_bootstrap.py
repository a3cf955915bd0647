"""gloocy.init() under the launchers users have: the environment of
gloocy-run, torchrun, Slurm and MPI launchers, and an mpi4py bootstrap."""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest

from gloocy.rendezvous.env import detect, first_host
from peers import (REDIS_SERVER, TORCHRUN, RedisServer, mpiexec, needs_mpi, needs_torch,
                   redis_cmd)

PROGRAM = textwrap.dedent("""
    import sys
    import numpy as np, gloocy
    comm = gloocy.init()
    x = np.array([comm.rank + 1.0])
    comm.Allreduce(gloocy.IN_PLACE, x)
    sys.stdout.write(f"{comm.rank} {comm.size} {int(x[0])}\\n")   # one write
    sys.stdout.flush()
""")

_FOREIGN = ("GLOOCY_", "PMI_", "PMIX_", "HYDRA_", "OMPI_", "SLURM_", "RANK",
            "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_",
            "TORCHELASTIC_", "MPI_LOCAL")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(tmp_path, envs, timeout=60):
    """One process per environment, started at once; their outputs."""
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    procs = [subprocess.Popen([sys.executable, str(prog)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for env in envs]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, err.decode()
            outs.append(out.decode())
    finally:
        for p in procs:
            p.kill()
    return outs


def expect(outs):
    size = len(outs)
    total = size * (size + 1) // 2
    assert sorted(outs) == [f"{r} {size} {total}\n" for r in range(size)]


# -- reading the environment -------------------------------------------------------

def test_nothing_is_a_world_of_one():
    launch = detect(clean_env())
    assert (launch.source, launch.rank, launch.size, launch.store) == ("none", None, None, None)


def test_gloocy_run_variables_come_first():
    launch = detect(clean_env(GLOOCY_RANK=1, GLOOCY_SIZE=4, GLOOCY_STORE="tcp://h:1",
                              GLOOCY_LAUNCHER="gloocy-run", RANK=3, WORLD_SIZE=8,
                              PMI_RANK=5, PMI_SIZE=9))
    assert (launch.source, launch.rank, launch.size, launch.store, launch.host_store) == \
        ("gloocy-run", 1, 4, "tcp://h:1", False)


def test_torchrun_variables():
    launch = detect(clean_env(RANK=2, WORLD_SIZE=4, LOCAL_RANK=0, LOCAL_WORLD_SIZE=2,
                              MASTER_ADDR="10.0.0.7", MASTER_PORT=29400,
                              TORCHELASTIC_RUN_ID="abc"))
    # torchrun's agent holds MASTER_PORT with its own store: rank 0 serves
    # ours on a free port and leaves its URL there.
    assert launch == type(launch)("torchrun", 2, 4, 0, 2, None, True, "abc.0",
                                  "10.0.0.7:29400")
    again = detect(clean_env(RANK=0, WORLD_SIZE=2, MASTER_ADDR="::1", MASTER_PORT=5000,
                             TORCHELASTIC_RUN_ID="x", TORCHELASTIC_RESTART_COUNT=3))
    assert (again.agent_store, again.job) == ("[::1]:5000", "x.3")
    plain = detect(clean_env(RANK=0, WORLD_SIZE=2, MASTER_ADDR="::1", MASTER_PORT=5000))
    assert (plain.store, plain.agent_store) == ("tcp://[::1]:5000", None)
    given = detect(clean_env(RANK=0, WORLD_SIZE=2, MASTER_PORT=5000, TORCHELASTIC_RUN_ID="x",
                             GLOOCY_STORE="redis://h:1"))
    assert (given.store, given.host_store, given.agent_store) == ("redis://h:1", False, None)


def test_slurm_variables():
    launch = detect(clean_env(SLURM_PROCID=5, SLURM_NTASKS=8, SLURM_LOCALID=1,
                              SLURM_NODELIST="gpu[03-05,09],cpu1", SLURM_JOB_ID=123,
                              SLURM_STEP_ID=0, SLURM_TASKS_PER_NODE="2(x4)"))
    assert (launch.source, launch.rank, launch.size, launch.local_rank,
            launch.local_size, launch.host_store) == ("slurm", 5, 8, 1, 2, True)
    assert launch.store.startswith("tcp://gpu03:")
    assert launch.job == "slurm-123.0"


@pytest.mark.parametrize("text, host", [("node1", "node1"), ("n[1-4]", "n1"),
                                        ("a[07,09-12],b[1-2]", "a07"), ("x,y", "x")])
def test_first_host_of_a_slurm_node_list(text, host):
    assert first_host(text) == host


def test_mpi_launcher_variables():
    hydra = detect(clean_env(PMI_RANK=1, PMI_SIZE=3, MPI_LOCALRANKID=1, MPI_LOCALNRANKS=3))
    assert (hydra.source, hydra.rank, hydra.size, hydra.local_rank,
            hydra.local_size, hydra.store) == ("mpi", 1, 3, 1, 3, None)
    ompi = detect(clean_env(OMPI_COMM_WORLD_RANK=0, OMPI_COMM_WORLD_SIZE=2,
                            OMPI_COMM_WORLD_LOCAL_RANK=0, OMPI_COMM_WORLD_LOCAL_SIZE=2))
    assert (ompi.source, ompi.rank, ompi.size, ompi.local_size) == ("mpi", 0, 2, 2)


# -- real launches --------------------------------------------------------------------

def test_torchrun_environment(tmp_path):
    port = free_port()
    expect(run_ranks(tmp_path, [clean_env(RANK=r, WORLD_SIZE=3, LOCAL_RANK=r,
                                          MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
                                for r in range(3)]))


def test_slurm_environment(tmp_path):
    port = free_port()
    expect(run_ranks(tmp_path, [clean_env(SLURM_PROCID=r, SLURM_NTASKS=3, SLURM_LOCALID=r,
                                          SLURM_NODELIST="localhost", SLURM_JOB_ID=7,
                                          GLOOCY_STORE_PORT=port)
                                for r in range(3)]))


@needs_torch
@contextlib.contextmanager
def taken_above_a_free_port():
    """A port that was free just now (torchrun's store binds it), with the
    port above it held by a listener of ours while the block runs. (Port
    q - 1 of a free q was once someone else's: torchrun failed with
    EADDRINUSE on its own store.)"""
    for _ in range(50):
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            other.listen()
            port = other.getsockname()[1] - 1
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            yield port
            return
    raise RuntimeError("no free port below a free port in 50 tries")


def test_under_real_torchrun(tmp_path):
    """Two worlds one after the other, with MASTER_PORT + 1 taken by
    someone else (no port next to torchrun's is assumed free)."""
    prog = tmp_path / "prog.py"
    prog.write_text("import gloocy\ngloocy.init().Free()\n" + PROGRAM)
    with taken_above_a_free_port() as port:
        out = subprocess.run([*TORCHRUN, "--nproc_per_node", "2", "--master_port",
                              str(port), str(prog)], env=clean_env(),
                             capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    expect(out.stdout.decode().splitlines(keepends=True))


@needs_mpi
@pytest.mark.parametrize("how", ["pmi environment", "store from the environment"])
def test_under_mpiexec(tmp_path, how):
    """mpiexec -n 3: without a store, the addresses go through mpi4py;
    with GLOOCY_STORE, rank 0 serves it and MPI is not touched."""
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    env = clean_env(GLOOCY_DEBUG=1)
    if how != "pmi environment":
        env["GLOOCY_STORE"] = f"tcp://127.0.0.1:{free_port()}"
    out = subprocess.run([mpiexec(), "-n", "3", sys.executable, str(prog)], env=env,
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    expect(out.stdout.decode().splitlines(keepends=True))
    said = out.stderr.decode()
    assert ("through mpi4py" in said) == (how == "pmi environment"), said


# -- who joins --------------------------------------------------------------------------

def _start(tmp_path, envs):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    return [subprocess.Popen([sys.executable, str(prog)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for env in envs]


def _finish(procs, timeout=60):
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        finally:
            p.kill()
        outs.append((p.returncode, err.decode()))
    return outs


def test_two_processes_claiming_one_rank(tmp_path):
    """Rank 1 twice (and rank 2 never): the second claimant is told at once;
    the others give up at the deadline naming the rank that never came."""
    port = free_port()
    env = dict(WORLD_SIZE=3, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, GLOOCY_TIMEOUT=8)
    procs = _start(tmp_path, [clean_env(RANK=r, **env) for r in (0, 1, 1)])
    results = _finish(procs)
    assert all(code != 0 for code, _ in results)
    assert sum("another process already joined" in err and "as rank 1" in err
               for _, err in results) == 1, results
    # (eager: "did not connect"; lazy, the default: "did not join the job")
    assert "rank(s) [2] did not" in results[0][1], results[0][1]
    # ... and so does the rank 1 that joined: rank 0 names the missing rank
    # in the go it waits for (lazy; eager: the dial to rank 2 fails)
    waited = [err for _, err in results[1:] if "another process" not in err]
    assert len(waited) == 1 and "rank(s) [2] did not" in waited[0], waited


NOT_DUMPABLE = textwrap.dedent("""
    import ctypes, os
    if os.environ["GLOOCY_RANK"] == "0":      # PR_SET_DUMPABLE: 0
        assert ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) == 0
    from gloocy import MPI
    MPI.COMM_WORLD.Barrier()
""")


@pytest.mark.skipif(shutil.which("capsh") is None,
                    reason="capsh (libcap2-bin) drops CAP_SYS_PTRACE for this test")
def test_a_segment_rank_0_cannot_share_is_a_clear_error(tmp_path):
    """Rank 0 not dumpable and no rank allowed to trace it: its node segment
    cannot be opened through /proc, and the others say so, naming the way
    out, instead of a bare PermissionError."""
    prog = tmp_path / "prog.py"
    prog.write_text(NOT_DUMPABLE)
    run = subprocess.run(
        ["capsh", "--drop=cap_sys_ptrace", "--", "-c",
         f"{sys.executable} -m gloocy.run -n 2 {sys.executable} {prog}"],
        env=clean_env(GLOOCY_TIMEOUT=20), capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "rank 1: cannot open rank 0's shared-memory segment" in run.stdout + run.stderr
    assert "GLOOCY_TRANSPORT=tcp" in run.stdout + run.stderr


def test_ranks_that_disagree_on_the_world_size(tmp_path):
    port = free_port()
    procs = _start(tmp_path, [clean_env(RANK=r, WORLD_SIZE=size, MASTER_ADDR="127.0.0.1",
                                        MASTER_PORT=port, GLOOCY_TIMEOUT=8)
                              for r, size in ((0, 2), (1, 3))])
    (code0, err0), (code1, err1) = _finish(procs)
    assert code0 != 0 and code1 != 0
    assert "world of 3 but rank 0 has 2" in err1
    # rank 0 hears it from rank 1 (in the store), not at its deadline
    assert "rank 0: the job cannot start: rank 1 has a world of 3" in err0, err0


# -- other stores -------------------------------------------------------------------------

def test_ranks_meet_through_a_file_store(tmp_path):
    store = f"file://{tmp_path / 'store'}"
    expect(run_ranks(tmp_path, [clean_env(GLOOCY_RANK=r, GLOOCY_SIZE=3, GLOOCY_STORE=store)
                                for r in range(3)]))
    left = [p.name for p in (tmp_path / "store").iterdir() if p.name != "lock"]
    assert left == [], f"the job's keys were left: {left}"


def test_ranks_meet_through_redis_and_leave_no_keys(tmp_path):
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    srv = RedisServer(tmp_path)
    try:
        store = f"redis://127.0.0.1:{srv.port}/2"
        expect(run_ranks(tmp_path, [clean_env(GLOOCY_RANK=r, GLOOCY_SIZE=3,
                                              GLOOCY_STORE=store) for r in range(3)]))
        assert redis_cmd(srv.port, "DBSIZE", db=2) == 0
    finally:
        srv.stop()


# -- the address a rank advertises ------------------------------------------------------

from gloocy.errors import RendezvousError  # noqa: E402
from gloocy.rendezvous.address import advertised_address, interfaces, matching  # noqa: E402


@pytest.mark.parametrize("spec, want", [
    ("eth,ib", ["eth0", "eth1", "ib0"]),         # prefixes
    ("^lo,docker", ["eth0", "eth1", "ib0"]),     # all but
    ("=eth0", ["eth0"]),                         # exactly
    ("^=eth0", ["lo", "eth1", "ib0", "docker0"]),
    ("wlan", []),
])
def test_interface_grammar_is_nccls(spec, want):
    assert matching(spec, ["lo", "eth0", "eth1", "ib0", "docker0"]) == want


def test_loopback_store_means_loopback_address():
    assert advertised_address("127.0.0.1", {}) == "127.0.0.1"
    assert advertised_address(None, {}) == "127.0.0.1"


def test_a_loopback_name_is_never_advertised_to_remote_peers():
    with pytest.raises(RendezvousError, match="loopback"):
        advertised_address("192.0.2.77", {"GLOOCY_HOST": "localhost"})


def test_interface_by_name():
    lo = [v4 for name, v4, _ in interfaces() if name == "lo"]
    assert advertised_address("127.0.0.1", {"GLOOCY_SOCKET_IFNAME": "=lo"}) == lo[0]
    with pytest.raises(RendezvousError, match="selects no interface"):
        advertised_address("127.0.0.1", {"GLOOCY_SOCKET_IFNAME": "=nosuch0"})


def test_route_to_a_remote_store_is_not_loopback():
    """The address on the route to a (documentation-range) remote host; the
    machine needs a route there (skip otherwise)."""
    try:
        host = advertised_address("192.0.2.77", {})
    except RendezvousError as e:
        pytest.skip(f"no route off this machine: {e}")
    import ipaddress
    assert not ipaddress.ip_address(host).is_loopback


def test_listen_port_and_advertised_add_the_local_rank():
    from gloocy.rendezvous.address import listen_port_and_advertised
    me = dict(GLOOCY_RANK="3", GLOOCY_SIZE="4", GLOOCY_LOCAL_RANK="1")
    assert listen_port_and_advertised({}) == (0, None)
    assert listen_port_and_advertised(
        dict(me, GLOOCY_PORT="30000", GLOOCY_ADVERTISE="gw:40000")) == (30001, "gw:40001")
    assert listen_port_and_advertised(dict(GLOOCY_ADVERTISE="[::1]:5000")) == (0, "[::1]:5000")
    for name, value in [("GLOOCY_PORT", "abc"), ("GLOOCY_PORT", "65535"),  # 65536 with rank 1
                        ("GLOOCY_PORT", "-1"), ("GLOOCY_ADVERTISE", "gw"),
                        ("GLOOCY_ADVERTISE", "gw:x"), ("GLOOCY_ADVERTISE", ":5")]:
        with pytest.raises(RendezvousError, match=name):
            listen_port_and_advertised(dict(me, **{name: value}))


@needs_torch
def test_torchrun_agent_store_carries_rank_0s_url():
    """Against a real torch TCPStore standing in for torchrun's agent."""
    import torch.distributed as dist
    from gloocy.errors import RendezvousError
    from gloocy.rendezvous.torchrun import meeting_point

    agent = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    address = f"127.0.0.1:{agent.port}"
    with pytest.raises(RendezvousError, match="rank 0 did not publish"):
        meeting_point(address, 1, "job-a", 0.3)
    url, announce = meeting_point(address, 0, "job-b", 5)
    assert url == "tcp://127.0.0.1:0"
    announce("tcp://127.0.0.1:4242")
    assert meeting_point(address, 1, "job-b", 5) == ("tcp://127.0.0.1:4242", None)
    with pytest.raises(RendezvousError, match="unreachable"):
        meeting_point(f"127.0.0.1:{free_port()}", 1, "job-c", 0.3)
