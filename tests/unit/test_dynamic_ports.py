"""gloocy.dynamic and gloocy.spawn without processes: port names, the
children's environment, Spawn_multiple's argument checks, the process ids
of other worlds, the local name table."""

import pytest

from gloocy import dynamic, spawn
from gloocy.errors import (ERR_ARG, ERR_NAME, ERR_PORT, ERR_SERVICE, ERR_SPAWN,
                           ArgumentError, GloocyError)


def test_port_names_round_trip():
    port = dynamic.Port("tcp://127.0.0.1:4242", "port-ab12", bytes(range(32)))
    again = dynamic.Port.parse(port.name)
    assert (again.url, again.prefix, again.secret) == (port.url, port.prefix,
                                                       port.secret)
    assert port.name.startswith("gloocy-port:tcp://127.0.0.1:4242/port-ab12#0001")


@pytest.mark.parametrize("name", ["", "tag#0$connentry#20EE", "gloocy-port:",
                                  "gloocy-port:tcp://h:1/p#zz",
                                  "gloocy-port:http://h:1/p#00",
                                  "gloocy-port:tcp://h/p#00", 42])
def test_bad_port_names_are_port_errors(name):
    with pytest.raises(ArgumentError) as info:
        dynamic.Port.parse(name)
    assert info.value.error_class == ERR_PORT
    assert isinstance(info.value, ValueError)


def test_closing_a_port_not_open_here_is_an_error():
    with pytest.raises(GloocyError) as info:
        dynamic.close_port("gloocy-port:tcp://127.0.0.1:1/p#00")
    assert info.value.error_class == ERR_PORT


def test_open_and_close_port_serves_then_stops(no_threads_left):
    name = dynamic.open_port()
    port = dynamic.Port.parse(name)
    from gloocy import rendezvous
    store = rendezvous.connect(port.url, secret=port.secret, timeout=5)
    store.set("k", b"v")
    assert store.get("k") == b"v"
    store.close()
    dynamic.close_port(name)


@pytest.fixture
def no_threads_left():
    import threading
    before = set(threading.enumerate())
    yield
    import time
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(threading.enumerate()) - before


def test_children_environment_is_a_world_of_their_own():
    port = dynamic.Port("tcp://127.0.0.1:4242", "port-x", b"\x01" * 32)
    parent = {"GLOOCY_RANK": "3", "GLOOCY_SIZE": "8", "PMI_RANK": "1",
              "RANK": "2", "WORLD_SIZE": "4", "GLOOCY_STORE": "tcp://elsewhere:1",
              "PATH": "/bin", "GLOOCY_TIMEOUT": "9"}
    env = spawn.child_environment(parent, rank=1, size=3, appnum=2, port=port)
    assert env["GLOOCY_RANK"] == "1" and env["GLOOCY_SIZE"] == "3"
    assert env["GLOOCY_STORE"] == port.url and env["GLOOCY_SECRET"] == "01" * 32
    assert env["GLOOCY_APPNUM"] == "2" and env[dynamic.ENV_PARENT] == port.name
    assert env["GLOOCY_LAUNCHER"] == "gloocy-run"     # nobody serves a store
    assert "PMI_RANK" not in env and "RANK" not in env and "WORLD_SIZE" not in env
    assert env["PATH"] == "/bin" and env["GLOOCY_TIMEOUT"] == "9"


@pytest.mark.parametrize("command, args, maxprocs, info, error", [
    ("python", None, None, None, ERR_ARG),                 # not a sequence
    (["python"], [[], []], None, None, ERR_ARG),           # args: 2 for 1
    (["python"], "x", [1], None, ERR_ARG),                 # args: a str
    (["python"], None, [1, 1], None, ERR_ARG),             # maxprocs: 2 for 1
    (["python"], None, [0], None, ERR_SPAWN),              # maxprocs < 1
    ([], None, None, None, ERR_ARG),                       # nothing to spawn
])
def test_spawn_multiple_arguments_are_checked(command, args, maxprocs, info, error):
    with pytest.raises(ArgumentError) as e:
        spawn._commands(command, args, maxprocs, info, True)
    assert e.value.error_class == error


def test_spawn_commands_by_count():
    got = spawn._commands(["a", "b"], [["1"], None], [2, 1], None, True)
    assert got == [(["a", "1"], 2, None), (["b"], 1, None)]


def test_processes_of_other_worlds_keep_their_ids():
    mine = (0, 1, 2)
    sent = dynamic._universal(mine)
    assert all(u >> dynamic.LOCAL_BITS for u in sent)
    assert dynamic._localized(sent) == mine
    foreign = ((12345 << dynamic.LOCAL_BITS) | 1,)
    assert dynamic._localized(foreign) == foreign
    assert dynamic._universal(foreign) == foreign


def test_local_names_publish_lookup_unpublish(monkeypatch):
    monkeypatch.setenv(dynamic.ENV_NAMES, "")
    port = "gloocy-port:tcp://127.0.0.1:1/p#00"
    dynamic.publish_name("svc", port)
    assert dynamic.lookup_name("svc") == port
    with pytest.raises(GloocyError) as e:
        dynamic.publish_name("svc", "gloocy-port:tcp://127.0.0.1:2/q#00")
    assert e.value.error_class == ERR_SERVICE
    dynamic.unpublish_name("svc", port)
    with pytest.raises(GloocyError) as e:
        dynamic.lookup_name("svc")
    assert e.value.error_class == ERR_NAME
    with pytest.raises(GloocyError) as e:
        dynamic.unpublish_name("svc", port)
    assert e.value.error_class == ERR_SERVICE


def test_a_pool_worker_refuses_to_spawn(monkeypatch):
    from gloocy.futures import _spawned
    monkeypatch.setattr(_spawned, "_in_worker", [True])
    with pytest.raises(RuntimeError, match="__main__"):
        _spawned.SpawnedPool(1).start()


def test_the_workers_load_the_clients_program(monkeypatch):
    import sys
    import types
    from gloocy.futures import _spawned
    script = types.ModuleType("__main__")
    script.__file__, script.__spec__ = "/somewhere/farm.py", None
    monkeypatch.setitem(sys.modules, "__main__", script)
    assert _spawned._main_program() == ["/somewhere/farm.py"]
    script.__spec__ = types.SimpleNamespace(name="pkg.farm")
    assert _spawned._main_program() == ["-m", "pkg.farm"]
    del script.__file__
    script.__spec__ = None
    assert _spawned._main_program() == ["-c", ""]
