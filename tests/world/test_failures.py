"""Failures must become clear exceptions, never hangs or aborts: a peer
killed mid-collective, strangers at the door, deadlines, bad input. Each
runs over shared memory, TCP and a mix of both (TRANSPORTS).

Times are measured from the event (a kill, a signal) to the moment a rank
saw it, on CLOCK_MONOTONIC, which every process of the machine shares; a
bound is far from the alternative it rules out (a deadline of 60 s, a
handshake timeout) and generous for a loaded 2-core machine."""

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import gloocy
from gloocy.rendezvous import TCPStore, TCPStoreServer
from gloocy.transport.handshake import HANDSHAKE_TIMEOUT as _HANDSHAKE_TIMEOUT

from conftest import TRANSPORT_ENV
from peers import free_port
from gloocy.testing.processes import TEST_HOSTS, ProcessWorld as World
from test_shm import kill_the_last_rank

TRANSPORTS = ("shm", "tcp", "mix")
# README: "a killed rank is named by every other rank within a second". The
# tests allow 10 s from the kill to the error on each survivor: room for a
# loaded 2-core machine running 4 ranks (3 s was once exceeded, at 3.14 s,
# with the machine's load at 80-100), and still far below every deadline
# here (60 s), so the loss was seen, not timed out.
NAMED_WITHIN = 10.0

# Each rank of these jobs runs PREAMBLE + the test's body with `comm` built by
# gloocy.connect() through a store that the test serves. A rank the test
# holds waits for its word (a line on stdin) before it connects; in the body,
# wait_for_test() waits for the next word.
PREAMBLE = f"""
import json, os, sys, time, threading, signal
import numpy as np
import gloocy
rank, size = int(sys.argv[1]), int(sys.argv[2])
if os.environ.get("{TEST_HOSTS}"):      # the mixed world: pretend hosts
    os.environ["GLOOCY_HOST_ID"] = f"test-host-{{rank % int(os.environ['{TEST_HOSTS}'])}}"
def wait_for_test():
    sys.stdin.readline()
if str(rank) in os.environ.get("HOLD", "").split(","):
    wait_for_test()
comm = gloocy.connect(rank, size, sys.argv[3], secret=bytes.fromhex(sys.argv[4]),
                      job=sys.argv[5], timeout=float(os.environ.get("T", "60")))
def report(**kw):
    print(json.dumps(dict(rank=rank, **kw)), flush=True)
"""


class Job:
    """`size` rank processes running `body`, meeting through our own store,
    over `transport` (a name of conftest.TRANSPORT_ENV); the ranks in `hold`
    wait for release() before they connect; `rank_env`: {rank: its own env}."""

    def __init__(self, tmp_path, size, body, transport, *, hold=(), env=None,
                 rank_env=None):
        self.secret = secrets.token_bytes(32)
        self.job = secrets.token_hex(8)
        self.server = TCPStoreServer(secret=self.secret).start()
        script = tmp_path / "rank.py"
        script.write_text(PREAMBLE + textwrap.dedent(body))
        env = {**os.environ, **TRANSPORT_ENV[transport], **(env or {}),
               "HOLD": ",".join(map(str, hold))}
        self.procs = []
        for rank in range(size):
            cmd = [sys.executable, str(script), str(rank), str(size),
                   self.server.url, self.secret.hex(), self.job]
            self.procs.append(subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env={**env, **(rank_env or {}).get(rank, {})}))

    def release(self, rank):
        """Give `rank` the word it waits for (wait_for_test, or `hold`)."""
        self.procs[rank].stdin.write(b"\n")
        self.procs[rank].stdin.flush()

    def store(self):
        return TCPStore(self.server.host, self.server.port, secret=self.secret,
                        timeout=10)

    def results(self, timeout=60):
        """Per rank: (exit code, list of reported dicts, stderr)."""
        out = []
        try:
            for p in self.procs:
                stdout, stderr = p.communicate(timeout=timeout)
                reports = [json.loads(line) for line in stdout.decode().splitlines()
                           if line.startswith("{")]
                out.append((p.returncode, reports, stderr.decode()))
        finally:
            self.close()
        return out

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            for pipe in (p.stdin, p.stdout, p.stderr):
                if pipe is not None:
                    pipe.close()
        self.server.close()


def test_killed_rank_is_named_by_every_other_rank(tmp_path, transport):
    # Rank 2 SIGKILLs itself in the middle of a stream of large allreduces.
    job = Job(tmp_path, 4, """
        x = np.ones(8 << 20, np.float32)
        comm.Allreduce(gloocy.IN_PLACE, x)
        def die():
            report(killed_at=time.monotonic())
            os.kill(os.getpid(), signal.SIGKILL)
        if rank == 2:
            threading.Timer(0.2, die).start()
        try:
            while True:
                comm.Allreduce(gloocy.IN_PLACE, x)
        except gloocy.PeerLostError as e:
            report(error="PeerLostError", lost=e.rank, msg=str(e),
                   at=time.monotonic())
    """, transport)
    results = job.results()
    code, reports, _ = results[2]
    assert code == -signal.SIGKILL
    (killed,) = reports
    for rank in (0, 1, 3):
        code, reports, stderr = results[rank]
        assert code == 0, stderr
        (r,) = reports
        assert r["error"] == "PeerLostError" and r["lost"] == 2, r
        assert "rank 2" in r["msg"]
        assert 0 <= r["at"] - killed["killed_at"] < NAMED_WITHIN, r


# A job launched as torchrun launches it: rank 0 serves the store, so killing
# it takes the store too; the others must still name it at once.
STORE_HOST_BODY = """
import json, os, signal, sys, threading, time
import numpy as np
import gloocy
comm = gloocy.init(timeout=60)
x = np.ones(1024)
comm.Allreduce(gloocy.IN_PLACE, x)
if comm.rank == 0:
    def die():
        print(json.dumps(dict(killed_at=time.monotonic())), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Timer(0.2, die).start()
try:
    while True:
        comm.Barrier()
        comm.Allreduce(gloocy.IN_PLACE, x)
except gloocy.PeerLostError as e:
    print(json.dumps(dict(lost=e.rank, msg=str(e), at=time.monotonic())), flush=True)
"""


def test_killed_store_host_is_named_by_every_other_rank(tmp_path, transport):
    script = tmp_path / "rank.py"
    script.write_text(STORE_HOST_BODY)
    port = free_port()
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("GLOOCY_", "RANK", "WORLD_SIZE", "LOCAL_", "MASTER_"))}
    procs = [subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**base, **TRANSPORT_ENV[transport], "RANK": str(r), "WORLD_SIZE": "4",
             "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "4",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        for r in range(4)]
    try:
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert procs[0].returncode == -signal.SIGKILL, outs[0][1].decode()
    (killed,) = [json.loads(line) for line in outs[0][0].decode().splitlines()]
    for rank in (1, 2, 3):
        assert procs[rank].returncode == 0, outs[rank][1].decode()
        (r,) = [json.loads(line) for line in outs[rank][0].decode().splitlines()]
        assert r["lost"] == 0 and "rank 0" in r["msg"], r
        assert 0 <= r["at"] - killed["killed_at"] < NAMED_WITHIN, r


@pytest.mark.parametrize("n", [1, 8 << 20], ids=["in-an-allreduce",
                                                 "in-a-large-send"])
def test_a_killed_peer_is_named_by_each_survivor_in_time(transport, n):
    # The survivors wait on the last rank, which the test kills.
    for rank, (lost, after) in enumerate(kill_the_last_rank(TRANSPORT_ENV[transport], n)):
        assert lost == 2, rank
        assert 0 <= after < NAMED_WITHIN, (rank, after)


def test_gloocy_run_names_the_killed_rank_and_fails(tmp_path, transport):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, threading
        import numpy as np, gloocy
        if os.environ.get("{TEST_HOSTS}"):   # the mixed world: pretend hosts
            rank = int(os.environ["GLOOCY_RANK"])
            os.environ["GLOOCY_HOST_ID"] = f"test-host-{{rank % int(os.environ['{TEST_HOSTS}'])}}"
        comm = gloocy.init()
        x = np.ones(4 << 20, np.float32)
        if comm.rank == 1:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGKILL)).start()
        while True:
            comm.Allreduce(gloocy.IN_PLACE, x)
    """))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "gloocy.run", "-n", "3",
                           str(script)], capture_output=True, timeout=60,
                          env={**os.environ, **TRANSPORT_ENV[transport]})
    assert proc.returncode == 128 + signal.SIGKILL
    assert b"rank 1" in proc.stderr
    assert time.monotonic() - t0 < 30


def test_a_peer_that_exits_cleanly_is_not_reported_as_lost(tmp_path, transport):
    # Rank 0 leaves right after the last collective; the others still finish
    # theirs and see no error.
    job = Job(tmp_path, 3, """
        x = np.full(1000, rank + 1.0)
        comm.Allreduce(gloocy.IN_PLACE, x)
        if rank == 0:
            comm.Free()
        else:
            time.sleep(0.5)
        report(value=float(x[0]))
    """, transport)
    for code, reports, stderr in job.results():
        assert code == 0, stderr
        assert reports == [dict(rank=reports[0]["rank"], value=6.0)]


@pytest.mark.parametrize("call", ["comm.recv(source=1)", "comm.probe(source=1)",
                                  "comm.mprobe(source=1)",
                                  "comm.recv(source=gloocy.ANY_SOURCE)"])
def test_object_receives_and_probes_name_a_peer_that_died(tmp_path, transport, call):
    # These wait for a whole message rather than into a posted buffer; they
    # too must name the dead peer at once, not wait for the deadline (60 s).
    job = Job(tmp_path, 2, f"""
        comm.Barrier()
        if rank == 1:
            comm.send("before", dest=0)
            time.sleep(0.2)
            os._exit(0)                  # no goodbye
        first = comm.recv(source=1)
        t0 = time.monotonic()
        try:
            {call}
        except gloocy.PeerLostError as e:
            report(first=first, lost=e.rank, after=time.monotonic() - t0)
    """, transport)
    (code, reports, stderr), _ = job.results()
    assert code == 0, stderr
    [r] = reports
    assert r["first"] == "before" and r["lost"] == 1, r
    assert r["after"] < NAMED_WITHIN, r


@pytest.mark.parametrize("call", ["comm.recv(source=2)", "comm.probe(source=2)",
                                  "comm.mprobe(source=2)"])
def test_object_receives_name_a_peer_gone_before_it_was_ever_connected(
        tmp_path, transport, call):
    # No pair to rank 2 was ever made: the wait connects it, as a posted
    # receive does, and so names the loss at once (it waited out the
    # deadline, 60 s, with nobody named).
    job = Job(tmp_path, 3, f"""
        if rank == 2:
            os._exit(0)                  # no goodbye, never connected
        time.sleep(0.5)
        if rank == 0:
            t0 = time.monotonic()
            try:
                {call}
            except gloocy.PeerLostError as e:
                report(lost=e.rank, after=time.monotonic() - t0)
    """, transport)
    (code, reports, stderr), *_ = job.results()
    assert code == 0, stderr
    [r] = reports
    assert r["lost"] == 2 and r["after"] < NAMED_WITHIN, r


def test_ranks_that_exit_at_once_on_an_error_pass_on_its_root_cause(tmp_path,
                                                                    transport):
    # Rank 5 dies before anyone spoke to it. A rank that hears of it from
    # its barrier ends with os._exit at once (no interpreter shutdown to
    # wait for anything); a rank that dials such a rank later must still
    # name rank 5, from the record the exited rank left in the store before
    # its error was raised, not the exited rank as lost.
    job = Job(tmp_path, 6, """
        if rank == 5:
            os._exit(0)
        time.sleep(0.5)
        try:
            comm.Barrier(timeout=20)
        except gloocy.GloocyError as e:
            report(error=type(e).__name__, named=getattr(e, "rank", None),
                   origin=getattr(e, "origin", None), text=str(e)[:300])
        os._exit(0)
    """, transport)
    got = [reports for code, reports, _ in job.results()[:5]]
    assert all(len(r) == 1 for r in got), got
    assert all(r["named"] == 5 for [r] in got), got


@pytest.mark.transports("tcp")
def test_a_dial_out_of_file_descriptors_says_so_at_once(tmp_path, transport):
    # No socket can be made: the fd limit is the reason to give, at once,
    # not "could not connect before the deadline" after retrying to it.
    job = Job(tmp_path, 2, """
        import resource
        time.sleep(0.3)
        if rank == 0:
            used = len(os.listdir("/proc/self/fd")) - 1   # (less the listing's own)
            resource.setrlimit(resource.RLIMIT_NOFILE, (used, used))
            t0 = time.monotonic()
            try:
                comm.send("hello", dest=1)
            except gloocy.RendezvousError as e:
                report(text=str(e), after=time.monotonic() - t0)
        else:
            time.sleep(2)
    """, transport)
    (code, reports, stderr), _ = job.results()
    assert len(reports) == 1, stderr
    [r] = reports
    assert "out of file descriptors" in r["text"] and "ulimit -n" in r["text"], r
    assert "rank 1" in r["text"] and r["after"] < NAMED_WITHIN, r


# Rank STARVED runs out of file descriptors (its soft limit lowered to
# those it has, less `free`); then rank DIALER, which never spoke to it,
# dials it. The third rank passes the word between them.
OUT_OF_FDS_BODY = """
    import resource
    starved, dialer = int(os.environ["STARVED"]), int(os.environ["DIALER"])
    messenger = 3 - starved - dialer
    if rank != dialer:                # pair starved-messenger
        comm.sendrecv(rank, dest=starved + messenger - rank,
                      source=starved + messenger - rank)
    if rank != starved:               # pair dialer-messenger
        comm.sendrecv(rank, dest=dialer + messenger - rank,
                      source=dialer + messenger - rank)
    if rank == starved:
        used = len(os.listdir("/proc/self/fd")) - 1   # (less the listing's own)
        free = int(os.environ["FREE"])
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (used + free, hard))
        filler = []                   # to the limit (should an fd have been
        while True:                   # closed since), then `free` less
            try:
                filler.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        for fd in filler[:free]:
            os.close(fd)
        comm.send("ready", dest=messenger)
    elif rank == messenger:
        comm.send(comm.recv(source=starved), dest=dialer)
    else:
        comm.recv(source=messenger)
        t0 = time.monotonic()
        try:
            comm.send("hello", dest=starved)
            report(sent=True)
        except gloocy.GloocyError as e:
            report(error=type(e).__name__, text=str(e), after=time.monotonic() - t0)
    if rank != dialer:
        wait_for_test()               # (the dialer has reported)
        other = starved + messenger - rank
        try:
            report(again=comm.sendrecv(rank, dest=other, source=other))
        except gloocy.GloocyError as e:   # the dialer's failure, told (fail())
            report(told_by=getattr(e, "origin", None), text=str(e))
"""


def run_out_of_fds(tmp_path, transport, free, starved=1, dialer=0):
    """OUT_OF_FDS_BODY's job: the dialer's report (and its stderr), after
    which the starved rank and the messenger must still talk (the starved
    rank goes on with the pair it has)."""
    job = Job(tmp_path, 3, OUT_OF_FDS_BODY, transport,
              env={"T": "30", "FREE": free, "STARVED": str(starved),
                   "DIALER": str(dialer)})
    r = json.loads(job.procs[dialer].stdout.readline() or "{}")
    talkers = [rank for rank in range(3) if rank != dialer]
    for rank in talkers:
        job.release(rank)
    results = job.results()
    # Unless the dialer's own failure, told to its peers as every failure
    # is, reached them first: then that is what they raise.
    for rank in talkers:
        code, reports, stderr = results[rank]
        other = sum(talkers) - rank
        assert code == 0 and len(reports) == 1, (reports, stderr)
        assert (reports[0] == dict(rank=rank, again=other)
                or reports[0].get("told_by") == dialer), reports
    return r, results[dialer][2]


@pytest.mark.transports("tcp", "shm")
def test_a_listener_out_of_file_descriptors_names_itself_to_its_dialer(tmp_path,
                                                                      transport):
    # Rank 1's listener cannot accept rank 0's dial: rank 0 must hear at
    # once that rank 1 is out of file descriptors (ulimit -n), not wait out
    # its deadline (T = 30 s) for a connection never accepted.
    r, stderr = run_out_of_fds(tmp_path, transport, "0")
    assert r.get("error") == "RendezvousError", (r, stderr)
    assert "rank 1 is out of file descriptors" in r["text"], r
    assert "ulimit -n" in r["text"] and r["after"] < 30, r


@pytest.mark.transports("tcp")
def test_a_listener_out_of_fds_refuses_every_dial_then_recovers(tmp_path, transport):
    # The spare fd comes back after each refusal (three in a row are
    # refused, not left in the backlog), and once the rank has fds again
    # its listener accepts. The test dials as rank 0, which never does.
    from gloocy.errors import RendezvousError
    from gloocy.transport import _tcp, handshake, shm
    job = Job(tmp_path, 2, """
        if rank == 1:
            import resource
            used = len(os.listdir("/proc/self/fd")) - 1
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (used, hard))
            filler = []
            while True:
                try:
                    filler.append(os.open(os.devnull, os.O_RDONLY))
                except OSError:
                    break
            report(full=True)
            wait_for_test()
            for fd in filler:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            report(freed=True)
        wait_for_test()
    """, transport, env={"T": "30"})
    with job.store() as store:
        addr = handshake.parse_addr(store.get(f"{job.job}/tcp/1", timeout=20).decode())

    def dial():
        return handshake.dial_fd(addr, job.secret, 0, 1, 2, handshake.job_tag(job.job),
                                 time.monotonic() + 20, refusable=True,
                                 after_proof=shm.id_frame("tcp"))
    try:
        assert json.loads(job.procs[1].stdout.readline())["full"]
        for _ in range(3):
            with pytest.raises(RendezvousError, match="rank 1 is out of file desc"):
                dial()
        job.release(1)
        assert json.loads(job.procs[1].stdout.readline())["freed"]
        fd = dial()
        assert fd is not None
        _tcp.close_now(fd)
    finally:
        job.release(0)
        job.release(1)
    assert [code for code, _, _ in job.results()] == [0, 0]


@pytest.mark.transports("shm")
def test_a_rank_out_of_fds_for_a_shared_segment_says_so(tmp_path, transport):
    # Rank 1 has one fd left: its listener accepts rank 0's dial, but it has
    # none left to take the shared-memory rings with. Rank 0 must hear why
    # at once, not wait for rank 1 to come for them until its deadline.
    r, stderr = run_out_of_fds(tmp_path, transport, "1")
    assert r.get("error") == "RendezvousError", (r, stderr)
    assert "rank 1 is out of file descriptors" in r["text"], r
    assert "ulimit -n" in r["text"] and r["after"] < 30, r


@pytest.mark.transports("tcp")
@pytest.mark.parametrize("modes", [("eager", "lazy", "lazy"), ("lazy", "lazy", "eager"),
                                   ("eager", "eager", "lazy")])
def test_ranks_that_disagree_on_gloocy_connect_all_say_so_at_once(tmp_path, transport,
                                                                  modes):
    # Only the ranks whose GLOOCY_CONNECT differs from rank 0's can see the
    # mismatch; the others (waiting for connections, or for rank 0's go,
    # that never come) must hear of it from them, not at their deadline.
    began = time.monotonic()
    job = Job(tmp_path, 3, "report(started=True)", transport, env={"T": "30"},
              rank_env={r: {"GLOOCY_CONNECT": m} for r, m in enumerate(modes)})
    results = job.results()
    took = time.monotonic() - began
    for rank, (code, reports, stderr) in enumerate(results):
        last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        assert code != 0 and not reports, (rank, reports, stderr)
        assert last.startswith("gloocy.errors.RendezvousError"), (rank, stderr)
        assert f"rank {rank}:" in last and "GLOOCY_CONNECT=" in last, (rank, last)
    assert took < 30, took        # every rank raised before its deadline


def test_a_receive_from_itself_outlives_a_peer_that_leaves(tmp_path, transport):
    # A receive from ourselves waits in the any-source list; a peer that
    # leaves meanwhile sends nothing it waits for, so must not fail it.
    job = Job(tmp_path, 2, """
        comm.Barrier()
        if rank == 1:
            comm.Free()                       # leaves cleanly, at once
        else:
            got = np.zeros(4)
            t = threading.Thread(target=comm.Recv, args=(got,),
                                 kwargs=dict(source=0, tag=5))
            t.start()
            time.sleep(0.5)                   # rank 1 has left meanwhile
            comm.Send(np.arange(4.0), dest=0, tag=5)
            t.join()
            report(got=got.tolist())
    """, transport)
    results = job.results()
    assert [code for code, _, _ in results] == [0, 0], results
    assert results[0][1] == [dict(rank=0, got=[0.0, 1.0, 2.0, 3.0])]


def _garbage(addr):
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(os.urandom(200))
        s.settimeout(2)
        try:
            assert s.recv(100) == b""          # closed on us
        except (ConnectionResetError, socket.timeout):
            pass


def _wrong_secret(addr, job_id):
    import hashlib, hmac, struct
    with socket.create_connection(addr, timeout=5) as s:
        tag = hashlib.sha256(job_id.encode()).digest()[:16]
        hello = struct.pack("<8sIiiI16s32s", b"GLCYHELO", 1, 1, 0, 2, tag,
                            os.urandom(32))
        s.sendall(hello)
        reply = s.recv(64)
        # We cannot prove knowledge of the secret; the rank must hang up.
        s.sendall(hmac.new(b"wrong", b"connector" + hello + reply[:32],
                           hashlib.sha256).digest())
        s.settimeout(5)
        try:
            assert s.recv(1) == b""
        except ConnectionResetError:
            pass


def test_strangers_are_refused_and_the_job_completes(tmp_path, transport):
    # Rank 1 is held back; meanwhile strangers knock on rank 0's listener:
    # a silent connection, garbage bytes, a handshake with a wrong secret.
    job = Job(tmp_path, 2, """
        x = np.arange(100, dtype=np.int64) * (rank + 1)
        comm.Allreduce(gloocy.IN_PLACE, x)
        comm.Barrier()
        report(ok=bool((x == np.arange(100) * 3).all()), at=time.monotonic())
    """, transport, hold={1})
    with job.store() as store:
        host, _, port = store.get(f"{job.job}/tcp/0", timeout=20).decode().rpartition(":")
    addr = (host, int(port))
    silent_since = time.monotonic()
    silent = socket.create_connection(addr, timeout=5)
    try:
        _garbage(addr)
        _wrong_secret(addr, job.job)
        job.release(1)
        results = job.results()
    finally:
        silent.close()
    for code, reports, stderr in results:
        assert code == 0, stderr
        assert reports[0]["ok"] is True
    # Had the silent stranger held rank 0's listener, rank 1 could not have
    # connected before the stranger's handshake timed out.
    assert results[1][1][0]["at"] - silent_since < _HANDSHAKE_TIMEOUT


def test_unauthenticated_frames_after_setup_never_reach_the_job(tmp_path, transport):
    # After set-up the listeners are closed: nobody can connect at all
    # (tried while rank 0 is up, past set-up, waiting for the test's word).
    # (Eager set-up: lazy connections keep the listener for the whole job,
    # which authenticates every dial: see the strangers test above.)
    job = Job(tmp_path, 2, """
        comm.Barrier()
        report(ready=True)
        wait_for_test()
        x = np.ones(10)
        comm.Allreduce(gloocy.IN_PLACE, x)
        report(value=float(x.sum()))
    """, transport, env={"GLOOCY_CONNECT": "eager"})
    with job.store() as store:
        host, _, port = store.get(f"{job.job}/tcp/0", timeout=20).decode().rpartition(":")
    assert json.loads(job.procs[0].stdout.readline())["ready"]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=2)
    assert job.procs[0].poll() is None         # refused by a live rank
    for rank in range(2):
        job.release(rank)
    for code, reports, stderr in job.results():
        assert code == 0, stderr
        assert reports[-1]["value"] == 20.0


def test_bad_input_raises_locally_and_the_job_goes_on(tmp_path, transport):
    # Only rank 1 makes each bad call; it must raise before sending anything,
    # so a good collective afterwards still gives the right answer.
    job = Job(tmp_path, 3, """
        import array
        cases = {
            "size": lambda: comm.Allreduce(np.ones(4), np.ones(5)),
            "readonly": lambda: comm.Allreduce(np.ones(4), _ro),
            "noncontig": lambda: comm.Allreduce(gloocy.IN_PLACE, np.ones((4, 4))[:, 1]),
            "root": lambda: comm.Bcast(np.ones(4), root=3),
            "negroot": lambda: comm.Bcast(np.ones(4), root=-1),
            "op_dtype": lambda: comm.Allreduce(gloocy.IN_PLACE, np.ones(4), op=gloocy.BAND),
            "dtype": lambda: comm.Allreduce(gloocy.IN_PLACE, np.zeros(4, "U1")),
            "not_buffer": lambda: comm.Bcast(object(), root=0),
            "mixed": lambda: comm.Allreduce(np.ones(4, np.float32), np.ones(2, np.float64)),
            "op": lambda: comm.Allreduce(gloocy.IN_PLACE, np.ones(4), op="sum"),
            "bcast_ro": lambda: comm.Bcast(b"abcd", root=0),
            "timeout": lambda: comm.Barrier(timeout=-1),
        }
        _ro = np.ones(4)
        _ro.setflags(write=False)
        if rank == 1:
            for name, call in cases.items():
                try:
                    call()
                except Exception as e:
                    report(case=name, error=[t.__name__ for t in type(e).__mro__],
                           msg=str(e))
                else:
                    report(case=name, error=None)
        x = np.full(10, rank + 1, dtype=np.int32)
        comm.Allreduce(gloocy.IN_PLACE, x)
        report(total=int(x[0]))
    """, transport)
    results = job.results()
    for code, reports, stderr in results:
        assert code == 0, stderr
        assert reports[-1]["total"] == 6
    errors = {r["case"]: (r["error"], r["msg"]) for r in results[1][1][:-1]}
    expected = {
        "size": ("ValueError", "sendbuf"),
        "readonly": ("BufferError", "read-only"),
        "noncontig": ("BufferError", "contiguous"),
        "root": ("ValueError", "root"),
        "negroot": ("ValueError", "root"),
        "op_dtype": ("TypeError", "BAND"),
        "dtype": ("TypeError", "recvbuf"),
        "not_buffer": ("TypeError", "buf"),
        "mixed": ("ValueError", "sendbuf"),
        "op": ("TypeError", "op"),
        "bcast_ro": ("BufferError", "read-only"),
        "timeout": ("ValueError", "timeout"),
    }
    assert set(errors) == set(expected)
    for case, (etype, word) in expected.items():
        got_types, msg = errors[case]
        assert etype in got_types, (case, errors[case])
        assert word in msg, (case, msg)


def test_gil_is_released_during_a_collective(tmp_path, transport):
    # A Python thread counts while the main thread is inside one long
    # allreduce; if the GIL were held, it could not tick during the call.
    job = Job(tmp_path, 2, """
        ticks = []
        stop = False
        def count():
            while not stop:
                ticks.append(time.perf_counter())
                time.sleep(0.001)
        x = np.ones(16 << 20, np.float32)
        comm.Allreduce(gloocy.IN_PLACE, x, algorithm="ring")
        t = threading.Thread(target=count)
        t.start()
        time.sleep(0.05)
        t0 = time.perf_counter()
        comm.Allreduce(gloocy.IN_PLACE, x, algorithm="ring")
        t1 = time.perf_counter()
        stop = True
        t.join()
        inside = [s for s in ticks if t0 < s < t1]
        report(seconds=t1 - t0, inside=len(inside), ok=bool((x == 4).all()))
    """, transport)
    for code, reports, stderr in job.results():
        assert code == 0, stderr
        r = reports[0]
        assert r["ok"]
        # The thread sleeps 1 ms per tick: about one tick per ms when the
        # GIL is free, none while a call holds it. One per 20 ms (and at
        # least 3) leaves room for a loaded machine.
        assert r["inside"] >= max(3, r["seconds"] * 1000 / 20), r


def test_timeout_raises_and_poisons_the_communicator(tmp_path, transport):
    job = Job(tmp_path, 2, """
        if rank == 0:
            t0 = time.monotonic()
            try:
                comm.Allreduce(gloocy.IN_PLACE, np.ones(10), timeout=0.5)
            except gloocy.CollectiveTimeout as e:
                report(error="CollectiveTimeout", is_timeout=isinstance(e, TimeoutError),
                       msg=str(e), seconds=time.monotonic() - t0)
            try:
                comm.Barrier()
            except gloocy.ContextPoisoned as e:
                report(error="ContextPoisoned", msg=str(e))
        else:
            # Stay until rank 0 is gone, never joining its allreduce.
            try:
                comm.Recv(np.zeros(1), 0, tag=99, timeout=60)
            except gloocy.GloocyError:
                pass
    """, transport)
    results = job.results()
    code, reports, stderr = results[0]
    assert code == 0, stderr
    first, second = reports
    assert first["error"] == "CollectiveTimeout" and first["is_timeout"]
    # the call's 0.5 s, not the communicator's 60 s (and rank 1 stays)
    assert 0.5 <= first["seconds"] < 5.0
    assert "rank(s) 1" in first["msg"] and "allreduce" in first["msg"]
    assert second["error"] == "ContextPoisoned" and "timed out" in second["msg"]


def test_mismatched_counts_raise_mismatch_error_on_both_ranks(tmp_path, transport):
    job = Job(tmp_path, 2, """
        x = np.ones(4 if rank == 0 else 8)
        try:
            comm.Allreduce(gloocy.IN_PLACE, x, timeout=10)
        except gloocy.MismatchError as e:
            report(error="MismatchError", msg=str(e))
    """, transport)
    for code, reports, stderr in job.results():
        assert code == 0, stderr
        (r,) = reports
        assert r["error"] == "MismatchError"
        assert "count=4" in r["msg"] and "count=8" in r["msg"], r


def test_mismatched_alltoall_blocks_are_named_by_their_bytes(tmp_path, transport):
    # An alltoall has no single count: its error names the blocks' bytes.
    job = Job(tmp_path, 2, """
        n = 64 if rank == 0 else 65
        try:
            comm.Alltoall(np.ones(2 * n), np.empty(2 * n), timeout=10)
        except gloocy.MismatchError as e:
            report(msg=str(e))
    """, transport)
    for code, reports, stderr in job.results():
        assert code == 0, stderr
        (r,) = reports
        assert "alltoall #" in r["msg"] and "count=" not in r["msg"], r
        assert "512" in r["msg"] and "520" in r["msg"], r


def test_different_collectives_raise_mismatch_error(tmp_path, transport):
    # Rank 0 broadcasts while rank 1 allreduces: rank 1 receives rank 0's
    # broadcast frame and must say so; rank 0 finishes its send first, and
    # hears of it in its next call.
    job = Job(tmp_path, 2, """
        x = np.ones(4)
        try:
            if rank == 0:
                comm.Bcast(x, root=0, timeout=3)
                comm.Barrier(timeout=3)
            else:
                comm.Allreduce(gloocy.IN_PLACE, x, timeout=3)
        except gloocy.GloocyError as e:
            report(error=type(e).__name__, msg=str(e))
    """, transport)
    results = job.results()
    code, reports, stderr = results[1]
    assert code == 0, stderr
    assert reports[0]["error"] == "MismatchError"
    assert "bcast" in reports[0]["msg"] and "allreduce" in reports[0]["msg"]
    code, reports, stderr = results[0]
    assert code == 0, stderr
    # Rank 0's broadcast finished; its next call hears of the mismatch from
    # rank 1, or finds rank 1's allreduce frame left over.
    assert reports[0]["error"] == "MismatchError", reports
    assert "allreduce" in reports[0]["msg"], reports


def test_ctrl_c_interrupts_a_waiting_collective(tmp_path, transport):
    job = Job(tmp_path, 2, """
        if rank == 0:
            # As under a terminal, whatever the test runner inherited (a
            # background shell starts its children with SIGINT ignored).
            signal.signal(signal.SIGINT, signal.default_int_handler)
            report(waiting=True)
            try:
                comm.Allreduce(gloocy.IN_PLACE, np.ones(10))
            except KeyboardInterrupt:
                report(interrupted=True, at=time.monotonic())
        else:
            # Stay until rank 0 is gone (however slow the machine), never
            # joining its allreduce.
            try:
                comm.Recv(np.zeros(1), 0, tag=99, timeout=60)
            except gloocy.GloocyError:
                pass
    """, transport)
    line = job.procs[0].stdout.readline()
    assert json.loads(line)["waiting"]
    time.sleep(0.5)                 # into the allreduce
    sent_at = time.monotonic()
    job.procs[0].send_signal(signal.SIGINT)
    code, reports, stderr = job.results()[0]
    assert code == 0, stderr
    # waiting is sliced (100 ms) so that Ctrl-C is seen: not the 60 s deadline
    assert reports[0]["interrupted"] and reports[0]["at"] - sent_at < 5.0


def test_a_world_of_one_needs_no_launcher(tmp_path):     # no peer: no transport
    script = tmp_path / "alone.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, gloocy
        comm = gloocy.init()
        x = np.arange(5.0)
        comm.Allreduce(gloocy.IN_PLACE, x, op=gloocy.PROD)
        comm.Bcast(x, root=0)
        comm.Barrier()
        print(comm.rank, comm.size, x.tolist(), comm.allreduce(7), comm.bcast("hi"))
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GLOOCY_")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True,
                         env=env, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().split("\n")[0] == "0 1 [0.0, 1.0, 2.0, 3.0, 4.0] 7 hi"


EAGER_RANK_0_OUT_OF_FDS = textwrap.dedent("""
    import os, resource, sys
    from gloocy.transport.handshake import connect_sockets

    def publish(address):
        # Listening: no fd is left for the dial to be accepted.
        used = len(os.listdir("/proc/self/fd")) - 1   # (listdir's own)
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (used, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        print(address, flush=True)

    try:
        connect_sockets(0, 2, b"s" * 32, publish, None, job="fds", timeout=30)
        print("connected", flush=True)
    except Exception as e:
        print(type(e).__name__, e, flush=True)
""")


def test_an_eager_rank_out_of_fds_names_its_limit():
    # Eager set-up (GLOOCY_CONNECT=eager): rank 0's accept finds no free fd.
    # It must say so (ulimit -n), not raise a bare OSError(EMFILE).
    from gloocy.transport.handshake import connect_sockets
    with subprocess.Popen([sys.executable, "-c", EAGER_RANK_0_OUT_OF_FDS],
                          stdout=subprocess.PIPE, text=True) as rank0:
        address = rank0.stdout.readline().strip()
        with pytest.raises(Exception):      # (its dial is cut as rank 0 gives up)
            connect_sockets(1, 2, b"s" * 32, lambda a: None,
                            lambda peer, timeout: address, job="fds", timeout=30)
        said = rank0.stdout.read()
        assert rank0.wait(30) == 0
    assert said.startswith("RendezvousError rank 0:"), said
    assert "rank(s) [1]" in said and "ulimit -n" in said, said


@pytest.mark.transports("shm")
@pytest.mark.parametrize("free", ["1", "2"])
def test_an_offerer_out_of_fds_for_the_rings_says_so(tmp_path, transport, free):
    # Rank 0's listener can take rank 2's first dial, but then rank 0, the
    # lower rank, offers the shared-memory rings: it has no fd for its
    # socket for them (free 1), or for the taker's connection on it (2).
    # Rank 2 must hear that rank 0 is out of file descriptors (ulimit -n),
    # not that the connection was reset or closed while it read the token.
    r, stderr = run_out_of_fds(tmp_path, transport, free, starved=0, dialer=2)
    assert r.get("error") == "RendezvousError", (r, stderr)
    assert "rank 0 is out of file descriptors" in r["text"], r
    assert "ulimit -n" in r["text"] and r["after"] < 30, r
