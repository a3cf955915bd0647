"""Hosts on one machine: network namespaces joined by a bridge.

``Hosts(k)`` makes k namespaces, each with a veth whose other end is a
port of a bridge that lives in a namespace of its own, so that nothing is
added to the machine's own network. Host i has address ``addrs[i]``
(a private /24, only inside the namespaces); the bridge has ``bridge_addr``
(a store served there is reachable from every host: see ``serve_in``).
Needs root and iproute2's ``ip`` (and ``tc`` for ``limit``);
``missing()`` names what is not there.

    with Hosts(2) as hosts:
        subprocess.run(hosts.exec_prefix(0) + ["python", "rank.py"])
        hosts.limit("1gbit")                 # every host's link, both ways
        hosts.cut(0, 1)                      # hosts 0 and 1 lose each other
        hosts.unlimit()                      # every limit and cut taken off
        before = hosts.link_bytes()          # bytes through each host's link

The namespaces go away with ``close()`` (and with the ``with`` block).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import threading

__all__ = ["Hosts", "missing"]

_CLONE_NEWNET = 0x40000000


def missing():
    """Why namespace hosts cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"network namespaces need iproute2's `{tool}`"
    return None


def _tc(ns, *args):
    got = subprocess.run(["tc", "-n", ns, *args], capture_output=True, text=True)
    if got.returncode:
        raise RuntimeError(f"tc -n {ns} {' '.join(args)}: {got.stderr.strip()}")


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True,
                          text=True)


class Hosts:
    """``count`` network namespaces on one bridge (see the module text)."""

    _next = 0

    def __init__(self, count, *, subnet=None):
        why = missing()
        if why:
            raise RuntimeError(why)
        if not 1 <= count <= 200:
            raise ValueError(f"count must be in 1..200, got {count!r}")
        Hosts._next += 1
        serial = (os.getpid() * 7 + Hosts._next) % 200
        self.tag = f"gl{os.getpid() % 100000}x{Hosts._next}"
        self.subnet = subnet or f"10.{77 + serial // 100}.{serial % 100}"
        self.bridge = f"{self.tag}br"
        self.names = [f"{self.tag}h{i}" for i in range(count)]
        self.veths = [f"{self.tag}v{i}" for i in range(count)]   # in host i
        self.ports = [f"{self.tag}b{i}" for i in range(count)]   # in the bridge
        self.addrs = [f"{self.subnet}.{10 + i}" for i in range(count)]
        self.bridge_addr = f"{self.subnet}.1"
        self._made = []
        self._cut_peers = {}          # host -> the hosts cut from it
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _make(self):
        for ns in [self.bridge, *self.names]:
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge, "addr", "add", f"{self.bridge_addr}/24",
            "dev", "br0")
        _ip("-n", self.bridge, "link", "set", "br0", "up")
        for ns, veth, port, addr in zip(self.names, self.veths, self.ports,
                                        self.addrs):
            _ip("link", "add", veth, "netns", ns, "type", "veth",
                "peer", "name", port, "netns", self.bridge)
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", veth)
            _ip("-n", ns, "link", "set", veth, "up")
            _ip("-n", self.bridge, "link", "set", port, "master", "br0")
            _ip("-n", self.bridge, "link", "set", port, "up")

    def exec_prefix(self, i):
        """The command prefix that runs a program on host i."""
        return ["ip", "netns", "exec", self.names[i]]

    def limit(self, rate="1gbit", *, hosts=None):
        """Limit host links to `rate` each way (tc tbf on both ends of each
        veth); `hosts`: their indices (default all)."""
        for i in range(len(self.names)) if hosts is None else hosts:
            self._cut_peers.pop(i, None)       # the tbf replaces the cuts
            for ns, dev in ((self.names[i], self.veths[i]),
                            (self.bridge, self.ports[i])):
                subprocess.run(["tc", "-n", ns, "qdisc", "replace", "dev", dev,
                                "root", "tbf", "rate", rate, "burst", "256kb",
                                "latency", "50ms"], check=True,
                               capture_output=True)

    def cut(self, i, j):
        """Cut the link between hosts i and j silently, as a broken cable
        would: every packet between them is dropped on the way out of
        either host (nobody is told: the ranks find out by their deadlines
        or by TCP keepalive, GLOOCY_TCP_DEAD_S). Their links to the other
        hosts stay up. (This kernel has no netem: an htb class per cut
        peer whose 1-byte token bucket lets no packet through. A `limit`
        on host i or j is replaced.)"""
        if i == j or not (0 <= i < len(self.names) and 0 <= j < len(self.names)):
            raise ValueError(f"cut({i!r}, {j!r}): need two distinct hosts of "
                             f"{len(self.names)}")
        for a, b in ((i, j), (j, i)):
            ns, dev = self.names[a], self.veths[a]
            if self._cut_peers.setdefault(a, set()) == set():
                # everything else goes through class 1:1, unlimited
                for args in (["qdisc", "replace", "dev", dev, "root", "handle",
                              "1:", "htb", "default", "1"],
                             ["class", "add", "dev", dev, "parent", "1:",
                              "classid", "1:1", "htb", "rate", "100gbit"]):
                    _tc(ns, *args)
            if b in self._cut_peers[a]:
                continue
            self._cut_peers[a].add(b)
            cls = f"1:{0x100 + b:x}"
            for args in (["class", "add", "dev", dev, "parent", "1:", "classid",
                          cls, "htb", "rate", "8bit", "ceil", "8bit"],
                         ["qdisc", "add", "dev", dev, "parent", cls, "tbf",
                          "rate", "1kbit", "burst", "1", "limit", "1"],
                         ["filter", "add", "dev", dev, "parent", "1:",
                          "protocol", "ip", "prio", "1", "u32", "match", "ip",
                          "dst", f"{self.addrs[b]}/32", "flowid", cls]):
                _tc(ns, *args)

    def unlimit(self):
        """Take every limit and cut off."""
        self._cut_peers = {}
        for i in range(len(self.names)):
            for ns, dev in ((self.names[i], self.veths[i]),
                            (self.bridge, self.ports[i])):
                subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", dev,
                                "root"], capture_output=True)

    def link_bytes(self):
        """[(sent, received)] bytes through each host's link so far (the
        bridge port's counters: what left and reached the host)."""
        out = []
        for port in self.ports:
            got = json.loads(_ip("-j", "-s", "-n", self.bridge, "link", "show",
                                 "dev", port).stdout)[0]["stats64"]
            # The port's tx went to the host, its rx came from it.
            out.append((got["rx"]["bytes"], got["tx"]["bytes"]))
        return out

    def in_namespace(self, ns, fn, *args):
        """fn(*args) in a thread that has entered namespace `ns` (a socket
        made there stays in it: a store server, a listener)."""
        box = {}

        def enter():
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/run/netns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
                try:
                    if libc.setns(fd, _CLONE_NEWNET) != 0:
                        err = ctypes.get_errno()
                        raise OSError(err, f"setns into {ns}: {os.strerror(err)}")
                finally:
                    os.close(fd)
                box["value"] = fn(*args)
            except BaseException as e:
                box["error"] = e

        t = threading.Thread(target=enter, name=f"netns-{ns}")
        t.start()
        t.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def serve_in(self, make):
        """make() in the bridge's namespace: e.g. a TCPStoreServer bound to
        bridge_addr, which every host reaches."""
        return self.in_namespace(self.bridge, make)

    def close(self):
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"Hosts({len(self.names)}, subnet={self.subnet!r})"
