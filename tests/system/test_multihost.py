"""Several hosts on one machine: network namespaces joined by a bridge (in
a namespace of its own, so the machine's own network is untouched), one
`gloocy-run --nnodes` per namespace, private addresses only inside."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from gloocy.testing import netns
from peers import mpiexec, needs_mpi

pytestmark = pytest.mark.skipif(netns.missing() is not None,
                                reason=str(netns.missing()))

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


@pytest.fixture
def hosts():
    """Two namespaces through a bridge (gloocy.testing.netns); yields their
    tag (names start with it), names and addresses; removes them after."""
    with netns.Hosts(2) as made:
        yield made.tag, made.names, made.addrs, made


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
    tag, names, addrs, _ = hosts
    got = run_nodes(tmp_path, names, f"{addrs[0]}:29555", 2, 1000)
    assert got == expected(2, 2)


def test_rate_limited_link_stays_correct(hosts, tmp_path):
    """One host's link limited to 20 Mbit/s (tbf): 4 MiB allreduces still
    give exact results."""
    tag, names, addrs, _ = hosts
    subprocess.run(["tc", "-n", names[1], "qdisc", "add", "dev", f"{tag}v1",
                    "root", "tbf", "rate", "20mbit", "burst", "32kbit",
                    "latency", "400ms"], check=True, capture_output=True)
    got = run_nodes(tmp_path, names, f"{addrs[0]}:29556", 1, 1 << 19)
    assert got == expected(2, 1)


# -- added delay: a user-space proxy in front of one host ----------------------------------

# This kernel has no netem, so delay is added by a TCP proxy the test owns.
# Each direction of each connection is a reader thread queueing (due time,
# chunk) and a writer thread sending every chunk once its due time comes:
# order is kept and every byte arrives DELAY late. On SIGTERM it prints the
# bytes it forwarded each way and exits.
PROXY = textwrap.dedent("""
    import os, queue, signal, socket, sys, threading, time
    listen_host, listen_port, target_host, target_port, delay = sys.argv[1:]
    listen_port, target_port, delay = int(listen_port), int(target_port), float(delay)
    sent = {"to_target": 0, "from_target": 0}
    lock = threading.Lock()

    def pump(src, dst, key):
        chunks = queue.SimpleQueue()

        def read():
            while True:
                try:
                    data = src.recv(1 << 16)
                except OSError:
                    data = b""
                chunks.put((time.monotonic() + delay, data))
                if not data:
                    return

        def write():
            while True:
                due, data = chunks.get()
                time.sleep(max(0.0, due - time.monotonic()))
                try:
                    if not data:                  # pass the end of stream on
                        dst.shutdown(socket.SHUT_WR)
                        return
                    dst.sendall(data)
                except OSError:
                    return
                with lock:
                    sent[key] += len(data)
        for f in (read, write):
            threading.Thread(target=f, daemon=True).start()

    def stop(*_):
        print(sent["to_target"], sent["from_target"], flush=True)
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)

    listener = socket.create_server((listen_host, listen_port))
    print("listening", flush=True)
    while True:
        client, _ = listener.accept()
        target = socket.create_connection((target_host, target_port))
        for s in (client, target):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pump(client, target, "to_target")
        pump(target, client, "from_target")
""")

DELAYED = textwrap.dedent("""
    import sys, time
    import numpy as np
    from gloocy import MPI
    comm = MPI.COMM_WORLD
    # Every element different, so a reordered or lost chunk would show.
    for n in (1, 1000, 1 << 19):                  # 8 B, 8 kB, 4 MiB
        x = np.arange(n, dtype=np.int64) * (comm.rank + 1)
        comm.Allreduce(MPI.IN_PLACE, x)
        assert np.array_equal(x, np.arange(n, dtype=np.int64)
                              * (comm.size * (comm.size + 1) // 2)), n
    one = np.ones(1)
    comm.Barrier()
    start = time.monotonic()
    for _ in range(5):                            # doubles each time
        comm.Allreduce(MPI.IN_PLACE, one)
    elapsed = time.monotonic() - start
    sys.stdout.write(f"{comm.rank} {comm.size} {int(one[0])} {elapsed:.4f}\\n")
""")


def test_delay_through_a_proxy_stays_correct(hosts, tmp_path):
    """Each node's rank listens on a fixed port (GLOOCY_PORT) and publishes
    the address of a proxy in front of it instead (GLOOCY_ADVERTISE): the
    ranks reach each other only through a proxy in the bridge's namespace
    adding 30 ms each way, whichever of them dials (connections are made
    on first use, by either side). The store is reached directly."""
    tag, names, addrs, _ = hosts
    delay, rank_port = 0.03, 29610             # fresh namespaces: all free
    proxy_ports = (29620, 29621)               # in front of node 0's rank, node 1's
    bridge, proxy_addr = hosts[3].bridge, hosts[3].bridge_addr
    (tmp_path / "proxy.py").write_text(PROXY)
    (tmp_path / "prog.py").write_text(DELAYED)
    proxies = [subprocess.Popen(
        ["ip", "netns", "exec", bridge, sys.executable, str(tmp_path / "proxy.py"),
         proxy_addr, str(port), addrs[k], str(rank_port), str(delay)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k, port in enumerate(proxy_ports)]
    try:
        for proxy in proxies:
            assert proxy.stdout.readline() == "listening\n", proxy.stderr.read()
        base = dict(os.environ, GLOOCY_SECRET="cd" * 16)
        envs = [dict(base, GLOOCY_PORT=str(rank_port),
                     GLOOCY_ADVERTISE=f"{proxy_addr}:{port}") for port in proxy_ports]
        procs = [subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "gloocy.run",
             "--nnodes", "2", "--node-rank", str(k), "--store", f"{addrs[0]}:29557",
             "-n", "1", sys.executable, str(tmp_path / "prog.py")],
            env=envs[k], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for k, ns in enumerate(names)]
        outs = []
        try:
            for p in procs:
                out, err = p.communicate(timeout=60)
                assert p.returncode == 0, err[-3000:]
                outs.extend(out.splitlines())
        finally:
            for p in procs:
                p.kill()
        carried = []                           # (to its rank, from its rank) each
        for proxy in proxies:
            proxy.terminate()
            carried.append(tuple(map(int, proxy.communicate(timeout=10)[0].split())))
    finally:
        for proxy in proxies:
            proxy.kill()
            proxy.wait()
    lines = sorted(line.split()[:4] for line in outs)
    assert lines == [["[0]", "0", "2", "32"], ["[1]", "1", "2", "32"]]
    # The proxies carried the mesh: for the 4 MiB allreduce alone each rank
    # must receive 4 MiB worth of the other's (incompressible) data.
    to_rank0 = carried[0][0] + carried[1][1]
    from_rank0 = carried[0][1] + carried[1][0]
    assert to_rank0 >= 4 << 20 and from_rank0 >= 4 << 20, carried
    # And delayed it: a 1-element allreduce needs the other rank's data of
    # the same round, which needs ours of the round before, so 5 rounds
    # take at least 4 one-way delays whatever the machine's speed.
    assert all(float(line.split()[4]) >= 4 * delay for line in outs), outs


# -- mpiexec starting the ranks inside the namespaces --------------------------------------

MPI_PROGRAM = textwrap.dedent("""
    import os, sys
    import numpy as np
    import gloocy
    from gloocy import MPI
    comm = gloocy.init()        # under mpiexec, no store: addresses via mpi4py
    x = np.arange(1000, dtype=np.int64) * (comm.rank + 1)
    comm.Allreduce(MPI.IN_PLACE, x)
    ok = bool(np.array_equal(x, np.arange(1000) * (comm.size * (comm.size + 1) // 2)))
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    sys.stdout.write(f"{comm.rank} {comm.size} {ok} {node.size} "
                     f"{os.environ['GLOOCY_HOST']}\\n")
""")


@needs_mpi
def test_mpiexec_starts_ranks_in_namespaces(hosts, tmp_path):
    """`mpiexec -n 1 ip netns exec NS0 ... : -n 1 ip netns exec NS1 ...`:
    hydra runs in the root namespace and reaches its ranks over inherited
    descriptors (PMI_FD). Both ranks have the machine's host name, so
    MPICH takes them for neighbours and its own traffic (the one allgather
    of addresses) goes through shared memory, which network namespaces do
    not separate. gloocy's mesh then runs over the bridge between the
    namespaces, each rank listening on its namespace's address."""
    tag, names, addrs, _ = hosts
    prog = tmp_path / "prog.py"
    prog.write_text(MPI_PROGRAM)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GLOOCY_", "PMI_", "PMIX_", "HYDRA_", "OMPI_"))}
    env["GLOOCY_DEBUG"] = "1"             # init() says how it bootstrapped
    cmd = [mpiexec()]
    for k, (ns, addr) in enumerate(zip(names, addrs)):
        cmd += [":"] * (k > 0) + ["-n", "1", "ip", "netns", "exec", ns, "env",
                                  f"GLOOCY_HOST={addr}", sys.executable, str(prog)]
    # A session of its own, so that a hang kills hydra and its ranks alike.
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 0, err[-3000:]
    assert err.count("addresses through mpi4py") == 2, err[-3000:]
    # Each rank's node communicator has itself only: two hosts.
    assert sorted(out.splitlines()) == [
        f"{r} 2 True 1 {addrs[r]}" for r in range(2)]
