"""The CPU of one lazy connection's set-up, by side, away from the noise
of thousands of rank threads (issue 19).

    PYTHONPATH=. python bench/dial_cost.py --dials 2000 --rounds 3

This process is rank 0 of a large world (GLOOCY_TRANSPORT=tcp): its
listener thread answers dials. A child process dials it `--dials` times a
round, one after another, each as another rank (the defended handshake
in full: HELLO, both proofs, the verdict, the host ids), and closes each
connection once made. Printed per round: the listener thread's CPU per
dial it accepted (its schedstat), and the dialing process's CPU per dial
(getrusage). Compare two checkouts by running this file with each one's
PYTHONPATH, alternating.
"""

import argparse
import hashlib
import os
import resource
import secrets
import subprocess
import sys
import time


def thread_cpu_ns(tid):
    """CPU nanoseconds thread `tid` of this process has run so far."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def dialer(args):
    from gloocy.transport import handshake, shm
    secret, tag = bytes.fromhex(args.secret), bytes.fromhex(args.tag)
    addr = handshake.parse_addr(args.address)
    ours = shm.id_frame("tcp")
    first = args.first
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for peer in range(first, first + args.dials):
        deadline = time.monotonic() + 30.0
        fd = handshake.dial_fd(addr, secret, peer, 0, args.size, tag, deadline,
                               refusable=True, after_proof=ours)
        if fd is None:
            raise SystemExit(f"rank {peer}'s dial was refused")
        header = handshake.read_fd(fd, shm.ID_HEADER_BYTES, deadline, "a host id")
        _, n = shm.id_length(header, peer, 0, args.address)
        handshake.read_fd(fd, n, deadline, "a host id")
        os.close(fd)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    spent = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    print(f"{spent / args.dials * 1e6:.1f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dials", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dialer", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--address", default="", help=argparse.SUPPRESS)
    p.add_argument("--secret", default="", help=argparse.SUPPRESS)
    p.add_argument("--tag", default="", help=argparse.SUPPRESS)
    p.add_argument("--size", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--first", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.dialer:
        return dialer(args)

    from gloocy import transport
    from gloocy.rendezvous import TCPStore, TCPStoreServer
    from gloocy.transport import handshake, shm
    size = 1 + args.dials * args.rounds
    secret = secrets.token_bytes(32)
    job = "dial-cost-" + secrets.token_hex(4)
    server = TCPStoreServer(secret=secret).start()
    store = TCPStore("127.0.0.1", server.port, secret=secret, timeout=60.0)
    # The other ranks are the child's dials: they joined, on our host.
    store.set(f"{job}/all", b"1")
    digest = hashlib.sha256(shm.host_identity().encode()).hexdigest()[:32]
    store.add(f"{job}/host/{digest}", size - 1)
    _, connector = transport.connect_lazy(store, 0, size, secret, job=job,
                                          timeout=60.0, transport="tcp")
    try:
        tid = connector.listener.thread.native_id
        print(f"load average {os.getloadavg()[0]:.1f}; {args.dials} dials a round, "
              "one at a time; µs of CPU per dial:")
        for rnd in range(args.rounds):
            before, accepted = thread_cpu_ns(tid), connector.accepted
            out = subprocess.run(
                [sys.executable, __file__, "--dialer", "--dials", str(args.dials),
                 "--address", connector.listener.address, "--secret", secret.hex(),
                 "--tag", handshake.job_tag(job).hex(), "--size", str(size),
                 "--first", str(1 + rnd * args.dials)],
                check=True, capture_output=True, text=True).stdout.strip()
            until = time.monotonic() + 30.0
            while connector.accepted - accepted < args.dials and time.monotonic() < until:
                time.sleep(0.01)
            got = connector.accepted - accepted
            listener_us = (thread_cpu_ns(tid) - before) / 1e3 / max(got, 1)
            with connector.cond:          # (the pairs made: close them, untaken)
                ready = [connector.state[p] for p in connector.ready]
                connector.ready.clear()
            for pair in ready:
                if not isinstance(pair, BaseException):
                    pair.close(False)
            print(f"round {rnd}: listener {listener_us:.1f}, dialer process {out} "
                  f"({got} accepted)")
    finally:
        connector.close(False)
        store.close()
        server.close()


if __name__ == "__main__":
    sys.exit(main())
