"""Which address a rank advertises to its peers.

In order: GLOOCY_HOST; else the interface GLOOCY_SOCKET_IFNAME names
(NCCL's grammar: "eth,ib" interfaces starting with eth or ib, "^docker,lo"
any but those, "=eth0" exactly eth0); else the address of the route
towards the store's host (loopback when the store is local). A loopback
address is never advertised to peers on other hosts: that is an error.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct

from gloocy.errors import RendezvousError

__all__ = ["advertised_address", "interfaces", "listen_port_and_advertised",
           "matching"]

_SIOCGIFADDR = 0x8915


def _ipv4_of(name):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR,
                                 struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def _ipv6_by_interface():
    out = {}
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                hexaddr, _, _, scope, _, name = line.split()
                if scope == "20":          # link-local: needs a scope id
                    continue
                addr = ":".join(hexaddr[i:i + 4] for i in range(0, 32, 4))
                out.setdefault(name, str(ipaddress.IPv6Address(addr)))
    except OSError:
        pass
    return out


def interfaces():
    """[(name, IPv4 address or None, IPv6 address or None)] of this host."""
    v6 = _ipv6_by_interface()
    return [(name, _ipv4_of(name), v6.get(name))
            for _, name in socket.if_nameindex()]


def matching(spec, names):
    """The names NCCL's interface grammar `spec` selects, in order."""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    wanted = [w for w in spec.split(",") if w]

    def hit(name):
        return any(name == w if exact else name.startswith(w) for w in wanted)
    return [n for n in names if hit(n) != exclude]


def _is_loopback(host):
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback
               for info in infos)


def _route_to(host):
    """Our address on the route to `host` (no packet is sent)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        infos = socket.getaddrinfo(host, 9, family, socket.SOCK_DGRAM)
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(infos[0][4])
            return s.getsockname()[0]
    except OSError as e:
        raise RendezvousError(f"no route to the store's host {host!r}: {e}") from None


def advertised_address(store_host, env=None):
    """The address to bind and publish, given the host the store is on."""
    env = os.environ if env is None else env
    remote = store_host is not None and not _is_loopback(store_host)
    host = env.get("GLOOCY_HOST")
    spec = env.get("GLOOCY_SOCKET_IFNAME")
    if not host and spec:
        table = interfaces()
        names = matching(spec, [name for name, _, _ in table])
        want_v6 = env.get("GLOOCY_SOCKET_FAMILY", "").upper() in ("AF_INET6", "IPV6", "6")
        found = [(v6 if want_v6 else v4) for name, v4, v6 in table if name in names]
        found = [a for a in found if a]
        if not found:
            have = ", ".join(f"{n} {v4 or v6 or '-'}" for n, v4, v6 in table)
            raise RendezvousError(
                f"GLOOCY_SOCKET_IFNAME={spec!r} selects no interface with an "
                f"{'IPv6' if want_v6 else 'IPv4'} address (interfaces: {have})")
        host = found[0]
    if not host:
        host = _route_to(store_host) if remote else "127.0.0.1"
    if remote and _is_loopback(host):
        raise RendezvousError(
            f"this host would advertise {host!r}, a loopback address, to peers "
            f"on other hosts (the store is on {store_host!r}); set GLOOCY_HOST "
            "or GLOOCY_SOCKET_IFNAME to a routable address")
    return host


def listen_port_and_advertised(env=None):
    """(port to listen on, address to publish instead of ours or None).

    GLOOCY_PORT=P: listen on P + the local rank instead of a free port (for
    firewalls that open a range). GLOOCY_ADVERTISE=HOST:P: publish HOST and
    P + the local rank instead (a NAT or port forward in front of us)."""
    from gloocy.rendezvous.env import detect

    env = os.environ if env is None else env
    port, advertise = env.get("GLOOCY_PORT"), env.get("GLOOCY_ADVERTISE")
    port = None if port == "0" else port            # 0: any free port, as usual
    if not port and not advertise:
        return 0, None
    local = detect(env).local_rank or 0

    def number(text, name):
        if not text.isdigit() or not 0 < int(text) + local < 65536:
            raise RendezvousError(f"{name}: {text!r} is not a port number "
                                  "(1-65535, local rank added)")
        return int(text) + local
    if advertise:
        host, sep, p = advertise.rpartition(":")
        if not sep or not host:
            raise RendezvousError(f"GLOOCY_ADVERTISE={advertise!r} is not HOST:PORT")
        advertise = f"{host}:{number(p, 'GLOOCY_ADVERTISE')}"
    return (number(port, "GLOOCY_PORT") if port else 0), advertise or None
