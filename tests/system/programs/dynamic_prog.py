"""Programs of tests/system/test_dynamic.py: parents and children of
gloocy.MPI's dynamic processes. ``python dynamic_prog.py MODE [args]``."""

import os
import socket
import sys
import time

from gloocy import MPI

HERE = os.path.abspath(__file__)


def child():
    """Spawned: reduce our ranks and tell the parents about our world."""
    parent = MPI.Comm.Get_parent()
    world = MPI.COMM_WORLD
    total = parent.allreduce(world.rank + 1)        # to the parents: their sum
    facts = (world.rank, world.size, world.Get_attr(MPI.APPNUM), sys.argv[2:])
    gathered = parent.gather(facts, root=0)         # children are the leaf group
    assert gathered is None
    parent.send(total, dest=0, tag=5)
    parent.Disconnect()
    assert parent == MPI.COMM_NULL and MPI.Comm.Get_parent() == MPI.COMM_NULL


def spawn(count):
    """Spawn `count` children; check what they compute against closed forms."""
    world = MPI.COMM_WORLD
    errcodes = []
    inter = world.Spawn(sys.executable, [HERE, "child", "x", "y"], count,
                        errcodes=errcodes)
    assert (inter.size, inter.remote_size) == (world.size, count)
    assert errcodes == [MPI.SUCCESS] * count, errcodes
    assert MPI.Comm.Get_parent() == MPI.COMM_NULL
    # parents get the children's sum 1 + ... + count; children the parents'
    got = inter.allreduce(100 * (world.rank + 1))
    assert got == count * (count + 1) // 2, got
    facts = inter.gather(None, root=MPI.ROOT if world.rank == 0 else MPI.PROC_NULL)
    if world.rank == 0:
        assert facts == [(r, count, 0, ["x", "y"]) for r in range(count)], facts
        sums = [inter.recv(source=r, tag=5) for r in range(count)]
        parents = 100 * world.size * (world.size + 1) // 2
        assert sums == [parents] * count, sums
    inter.Disconnect()
    print("spawn ok", world.rank, count, flush=True)


def spawn_multiple():
    world = MPI.COMM_WORLD
    errcodes = []
    inter = world.Spawn_multiple([sys.executable, sys.executable],
                                 [[HERE, "child", "a"], [HERE, "child", "b"]],
                                 [1, 2], errcodes=errcodes)
    assert errcodes == [[MPI.SUCCESS], [MPI.SUCCESS] * 2], errcodes
    assert inter.allreduce(0) == 6
    facts = inter.gather(None, root=MPI.ROOT if world.rank == 0 else MPI.PROC_NULL)
    if world.rank == 0:
        assert facts == [(0, 3, 0, ["a"]), (1, 3, 1, ["b"]), (2, 3, 1, ["b"])], facts
        [inter.recv(source=r, tag=5) for r in range(3)]
    inter.Disconnect()
    print("spawn_multiple ok", world.rank, flush=True)


def failures():
    """A command that cannot start, and children that die before joining:
    an MPI error (ERR_SPAWN) on every parent, never a hang."""
    world = MPI.COMM_WORLD
    for command, args in (("/nonexistent/gloocy-test-command", None),
                          (sys.executable, ["-c", "import sys; sys.exit(3)"])):
        start = time.monotonic()
        try:
            world.Spawn(command, args, 2)
        except MPI.Exception as e:
            assert e.Get_error_class() == MPI.ERR_SPAWN, e
        else:
            raise AssertionError(f"{command} spawned")
        assert time.monotonic() - start < 30
    start = time.monotonic()        # children that never join: the deadline
    try:
        world.Spawn("sleep", ["37.25"], 1, timeout=2)
    except MPI.Exception:
        assert time.monotonic() - start < 30
    else:
        raise AssertionError("sleep joined")
    if world.size == 1:
        for bad in ((sys.executable, [[]], [1]), ([sys.executable], [[], []], [1]),
                    ([sys.executable], [[]], [1, 1])):
            try:
                world.Spawn_multiple(*bad)
            except ValueError:
                pass
            else:
                raise AssertionError(f"Spawn_multiple{bad} accepted")
    print("failures ok", world.rank, flush=True)


def accept(path):
    """A job that opens a port, writes its name to `path` and accepts."""
    world = MPI.COMM_WORLD
    port = MPI.Open_port() if world.rank == 0 else None
    if world.rank == 0:
        with open(path + ".tmp", "w") as f:
            f.write(port)
        os.rename(path + ".tmp", path)
    inter = world.Accept(port, root=0)
    data = inter.bcast(list(range(10)) if world.rank == 0 else None,
                       root=MPI.ROOT if world.rank == 0 else MPI.PROC_NULL)
    assert data is None
    got = inter.allreduce(world.rank + 1)
    rsize = inter.remote_size
    assert got == rsize * (rsize + 1) // 2
    merged = inter.Merge(high=False)
    assert merged.rank == world.rank and merged.size == world.size + rsize
    assert merged.allreduce(1) == world.size + rsize
    merged.Free()
    inter.Disconnect()
    if world.rank == 0:
        MPI.Close_port(port)
    print("accept ok", world.rank, rsize, flush=True)


def connect(path):
    world = MPI.COMM_WORLD
    port = None
    if world.rank == 0:
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            assert time.monotonic() < deadline, "no port name"
            time.sleep(0.05)
        port = open(path).read()
    inter = world.Connect(port, root=0)
    assert inter.bcast(None, root=0) == list(range(10))
    got = inter.allreduce(world.rank + 1)
    rsize = inter.remote_size
    assert got == rsize * (rsize + 1) // 2
    merged = inter.Merge(high=True)
    assert merged.rank == rsize + world.rank
    assert merged.allreduce(1) == world.size + rsize
    merged.Free()
    inter.Disconnect()
    print("connect ok", world.rank, rsize, flush=True)


def join(fd):
    """One end of a socketpair: Join, then a message each way."""
    inter = MPI.Comm.Join(int(fd))
    assert os.get_blocking(int(fd)), "Join left the socket non-blocking"
    assert (inter.size, inter.remote_size, inter.rank) == (1, 1, 0)
    me = os.getpid()
    other = inter.sendrecv(me, dest=0, source=0)
    assert other != me
    inter.Disconnect()
    print("join ok", flush=True)


def join_pair():
    a, b = socket.socketpair()
    import subprocess
    with a, b:
        peer = subprocess.Popen([sys.executable, HERE, "join", str(b.fileno())],
                                pass_fds=[b.fileno()])
        b.close()
        join(a.fileno())
    assert peer.wait(60) == 0


def child_wait():
    """Spawned: wait for a message the parent will never send."""
    MPI.Comm.Get_parent().recv(source=0)


def orphan():
    """Spawn a waiting child, then die without a word: the child must not
    outlive us."""
    MPI.COMM_SELF.Spawn(sys.executable, [HERE, "child_wait"], 1)
    print("orphaning", flush=True)
    os._exit(0)


def names():
    port = MPI.Open_port()
    service = f"gloocy-test-{os.getpid()}-{MPI.COMM_WORLD.rank}"
    MPI.Publish_name(service, port)
    assert MPI.Lookup_name(service) == port
    MPI.Unpublish_name(service, port)
    try:
        MPI.Lookup_name(service)
    except MPI.Exception as e:
        assert e.Get_error_class() == MPI.ERR_NAME
    else:
        raise AssertionError("an unpublished name was found")
    MPI.Close_port(port)
    print("names ok", flush=True)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"child": lambda *a: child(), "spawn": lambda n: spawn(int(n)),
     "spawn_multiple": spawn_multiple, "failures": failures, "accept": accept,
     "connect": connect, "join": join, "join_pair": join_pair,
     "names": names, "orphan": orphan, "child_wait": child_wait}[mode](*args)
