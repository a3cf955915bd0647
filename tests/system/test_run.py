"""gloocy-run, driven as a user would: real processes, real signals."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gloocy.run import GRACE

ROOT = Path(__file__).resolve().parents[2]   # the clone (tests/system/ is two below)
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
LAUNCHER = [sys.executable, "-m", "gloocy.run"]


@pytest.fixture(autouse=True, params=["fork-server", "exec"])
def launch_mode(request, monkeypatch):
    """Every test twice: Python ranks forked from gloocy-run's fork server
    (the default) and started as fresh interpreters."""
    monkeypatch.setitem(ENV, "GLOOCY_FORK_SERVER", "1" if request.param == "fork-server" else "0")
    return request.param


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def launch(tmp_path, *args, input=None, timeout=20):
    return subprocess.run(
        [*LAUNCHER, *args], cwd=tmp_path, env=ENV, capture_output=True, timeout=timeout,
        input=input, stdin=None if input is not None else subprocess.DEVNULL)


def alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # zombies are dead


def assert_all_gone(pids, within=5.0):   # generous: a loaded machine
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not [p for p in pids if alive(p)]


def pids_in(text):
    return [int(p) for p in re.findall(rb"pid (\d+)", text)]


def test_env_store_barrier_and_no_secret_on_command_lines(tmp_path):
    prog = script(tmp_path, "env.py", """
        import json, os, sys
        from gloocy.rendezvous import connect
        rank, size = int(os.environ["GLOOCY_RANK"]), int(os.environ["GLOOCY_SIZE"])
        secret = os.environ["GLOOCY_SECRET"]
        with connect(os.environ["GLOOCY_STORE"], secret=bytes.fromhex(secret), timeout=10) as store:
            store.set(f"addr/{rank}", f"host-of-{rank}".encode())
            if store.add("arrived") == size:   # add() barrier
                store.set("go", b"")
            store.get("go")
            peers = [store.get(f"addr/{r}").decode() for r in range(size)]
        cmdlines = [open(f"/proc/{p}/cmdline", "rb").read() for p in (os.getpid(), os.getppid())]
        env = {k: v for k, v in os.environ.items() if k.startswith("GLOOCY_") or k == "PYTHONUNBUFFERED"}
        print(json.dumps({"env": env, "peers": peers, "argv": sys.argv[1:],
                          "secret_on_cmdline": any(secret.encode() in c for c in cmdlines)}))
        """)
    r = launch(tmp_path, "-n", "3", prog, "--flag", "x")
    assert r.returncode == 0, r.stderr.decode()
    reports = {}
    for line in r.stdout.decode().splitlines():
        rank, payload = re.fullmatch(r"\[(\d+)\] (.*)", line).groups()
        reports[int(rank)] = json.loads(payload)
    assert sorted(reports) == [0, 1, 2]
    job_ids = set()
    for rank, rep in reports.items():
        env = rep["env"]
        assert env["GLOOCY_RANK"] == env["GLOOCY_LOCAL_RANK"] == str(rank)
        assert env["GLOOCY_SIZE"] == env["GLOOCY_LOCAL_SIZE"] == "3"
        assert re.fullmatch(r"tcp://127\.0\.0\.1:\d+", env["GLOOCY_STORE"])
        assert len(bytes.fromhex(env["GLOOCY_SECRET"])) == 32
        assert env["GLOOCY_LAUNCHER"] == "gloocy-run" and env["PYTHONUNBUFFERED"] == "1"
        assert "GLOOCY_TIMEOUT" not in env
        assert rep["peers"] == ["host-of-0", "host-of-1", "host-of-2"]
        assert rep["argv"] == ["--flag", "x"]
        assert rep["secret_on_cmdline"] is False
        job_ids.add(env["GLOOCY_JOB_ID"])
    assert len(job_ids) == 1


def test_output_prefixed_per_stream_and_stdin_to_rank_0(tmp_path):
    prog = script(tmp_path, "out.py", """
        import os, sys
        rank = os.environ["GLOOCY_RANK"]
        data = sys.stdin.read()   # rank 0 gets ours; the others get EOF at once
        print(f"in={data.strip()!r}")
        print("to stderr", file=sys.stderr)
        sys.stdout.write("no newline")
        """)
    r = launch(tmp_path, "-n", "3", prog, input=b"hello ranks\n")
    assert r.returncode == 0, r.stderr.decode()
    out, err = r.stdout.decode().splitlines(), r.stderr.decode().splitlines()
    assert "[0] in='hello ranks'" in out
    for rank in range(3):
        assert f"[{rank}] no newline" in out
        assert f"[{rank}] to stderr" in err
        if rank:
            assert f"[{rank}] in=''" in out
    assert len(out) == 6 and len(err) == 3


def test_any_command_runs_as_given(tmp_path):
    r = launch(tmp_path, "-n", "2", "sh", "-c", 'echo "r=$GLOOCY_RANK"')
    assert r.returncode == 0
    assert sorted(r.stdout.decode().splitlines()) == ["[0] r=0", "[1] r=1"]


def test_failing_rank_stops_the_others(tmp_path):
    prog = script(tmp_path, "fail.py", """
        import os, sys, time
        print("pid", os.getpid())
        if os.environ["GLOOCY_RANK"] == "2":
            time.sleep(0.3)
            print("exit at", time.monotonic(), flush=True)
            sys.exit(3)
        time.sleep(60)
        """)
    r = launch(tmp_path, "-n", "3", prog)
    ended = time.monotonic()
    assert r.returncode == 3
    exited = float(re.search(rb"exit at ([\d.]+)", r.stdout).group(1))
    # The sleepers died at SIGTERM: had the launcher waited its grace period
    # for them (then SIGKILL), it would have ended GRACE s after rank 2.
    assert ended - exited < GRACE
    assert "gloocy-run: rank 2 exited with code 3" in r.stderr.decode()
    assert b"rank 0" not in r.stderr and b"rank 1" not in r.stderr  # only the first failure is named
    assert_all_gone(pids_in(r.stdout))


def test_rank_killed_by_signal(tmp_path):
    prog = script(tmp_path, "kill.py", """
        import os, signal, time
        print("pid", os.getpid())
        if os.environ["GLOOCY_RANK"] == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
        """)
    r = launch(tmp_path, "-n", "3", prog)
    assert r.returncode == 137
    assert "gloocy-run: rank 1 was killed by signal 9 (SIGKILL)" in r.stderr.decode()
    assert_all_gone(pids_in(r.stdout))


def test_timeout_kills_a_hung_job(tmp_path):
    prog = script(tmp_path, "hang.py", """
        import os, time
        print("pid", os.getpid())
        time.sleep(60)
        """)
    start = time.monotonic()
    r = launch(tmp_path, "--timeout", "1", "-n", "2", prog)
    assert r.returncode == 124
    assert 1.0 <= time.monotonic() - start < 30   # the ranks would sleep 60 s
    assert "gloocy-run: job timed out after 1 s" in r.stderr.decode()
    assert_all_gone(pids_in(r.stdout))


def test_leftover_grandchildren_are_killed(tmp_path):
    prog = script(tmp_path, "orphan.py", """
        import subprocess
        child = subprocess.Popen(["sleep", "60"])
        print("pid", child.pid)
        """)
    r = launch(tmp_path, "-n", "2", prog)
    assert r.returncode == 0
    pids = pids_in(r.stdout)
    assert len(pids) == 2
    assert_all_gone(pids)


def _start_ready_job(tmp_path, body, npids=3):
    prog = script(tmp_path, "wait.py", body)
    proc = subprocess.Popen([*LAUNCHER, "-n", "3", prog], cwd=tmp_path, env=ENV,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pids = []
    while len(pids) < npids:
        line = proc.stdout.readline()
        assert line, proc.stderr.read().decode()
        pids += pids_in(line)
    return proc, pids


def test_sigint_is_forwarded(tmp_path):
    proc, pids = _start_ready_job(tmp_path, """
        import os, time
        try:
            print("pid", os.getpid())
            time.sleep(60)
        except KeyboardInterrupt:
            print("interrupted")
            raise
        """)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 130
    assert out.count(b"interrupted") == 3  # each rank saw a KeyboardInterrupt
    assert_all_gone(pids)


def test_second_sigint_kills_stubborn_ranks(tmp_path):
    proc, pids = _start_ready_job(tmp_path, """
        import os, signal, time
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("pid", os.getpid())
        time.sleep(60)
        """)
    first = time.monotonic()
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None  # ranks ignore SIGINT; the launcher waits its grace period
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=10)
    # killed at the second SIGINT, before the grace period of the first ran out
    assert time.monotonic() - first < GRACE
    assert proc.returncode == 130
    assert_all_gone(pids)



def test_sigterm_reaches_each_rank_and_its_children(tmp_path):
    """SIGTERM to gloocy-run goes to each rank's process group, the rank's
    own children included; the job's code is 128 + SIGTERM."""
    proc, pids = _start_ready_job(tmp_path, """
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print("pid", os.getpid(), "pid", child.pid, flush=True)
        time.sleep(60)
        """, npids=6)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()
    assert_all_gone(pids)


@pytest.mark.parametrize("args, message", [
    (["-n", "0", "x.py"], "-n must be >= 1"),
    (["-n", "2"], "missing the program"),
    (["x.py"], "-n"),
])
def test_usage_errors(tmp_path, args, message):
    r = launch(tmp_path, *args)
    assert r.returncode == 2
    assert message in r.stderr.decode()


def test_missing_program(tmp_path):
    r = launch(tmp_path, "-n", "2", "no-such-program-gloocy")
    assert r.returncode == 127
    assert "cannot start 'no-such-program-gloocy'" in r.stderr.decode()


def test_mpi_abort_ends_the_job_with_its_code(tmp_path):
    """MPI.COMM_WORLD.Abort(code) on one rank: the job ends (nobody waits
    for the rank that left) and gloocy-run exits with that code."""
    prog = script(tmp_path, "abort.py", """
        from gloocy import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 1:
            comm.Abort(3)
        comm.Barrier()
        print("after the barrier", flush=True)
    """)
    t0 = time.monotonic()
    out = launch(tmp_path, "-n", "3", sys.executable, prog, timeout=60)
    assert out.returncode == 3, out.stderr.decode()
    assert b"rank 1" in out.stderr
    assert b"after the barrier" not in out.stdout
    assert time.monotonic() - t0 < 30


def test_launcher_killed_by_sigkill_takes_its_ranks_along(tmp_path):
    """SIGKILL leaves gloocy-run no chance to clean up: its ranks must go
    all the same (the kernel's parent-death signal), ranks 1 and 2 in a
    barrier that rank 0, asleep, never joins, and nothing may be left in
    /dev/shm by the shared-memory mesh they used."""
    shm_before = set(os.listdir("/dev/shm"))
    proc, pids = _start_ready_job(tmp_path, """
        import os, time
        import numpy as np
        from gloocy import MPI
        comm = MPI.COMM_WORLD
        x = np.ones(1 << 16)
        comm.Allreduce(MPI.IN_PLACE, x)       # the mesh carried data
        assert x[0] == comm.size
        print("pid", os.getpid(), flush=True)
        if comm.rank == 0:
            time.sleep(60)
        comm.Barrier()
        """)
    try:
        assert all(alive(p) for p in pids)
        proc.kill()
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        assert_all_gone(pids, within=5.0)     # generous: a loaded machine
    finally:
        for p in pids:                        # never leave a rank behind
            if alive(p):
                os.kill(p, signal.SIGKILL)
    left = {name for name in set(os.listdir("/dev/shm")) - shm_before
            if not name.startswith(("mpich", "torch"))}   # the peers' own
    assert not left, f"left behind in /dev/shm: {sorted(left)}"
