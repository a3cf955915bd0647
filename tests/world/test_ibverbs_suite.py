"""The collective and point-to-point world tests again, over ibverbs on the
libibverbs stand-in (tests/ibmock), at N = 1-5: "ibverbs"
(GLOOCY_TRANSPORT=ibverbs: every peer, local ones too, on an RDMA queue
pair) and "ibmix" (ranks on two pretend hosts: shared memory within one,
ibverbs across, chosen by `auto` because a device is there).

Slots and the rendezvous threshold are made small, so that modest messages
take every path (several eager slots per frame, credits running out, the
RDMA-read rendezvous). By default a selection of the tests runs (QUICK)
over "ibverbs" (test_ibverbs.py runs an ibmix world too); `--long` runs
every test of both modules over both.""" 

import os

import pytest

import conftest
import ibmock

MISSING = ibmock.missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"the ibverbs stand-in "
                                f"cannot be built here: {MISSING}")
LONG = os.environ.get("GLOOCY_TEST_LONG") == "1"
TRANSPORTS = ("ibverbs", "ibmix") if LONG else ("ibverbs",)
SMALL = {"GLOOCY_IB_RDV_BYTES": "4096", "GLOOCY_IB_SLOT_BYTES": "1024",
         "GLOOCY_IB_SLOTS": "8"}
# Pairs are connected on first use: the stand-in's queue pairs hold sockets
# and pipes inside the mock library, which the ranks' leak checks count as
# the connections' (ibmock.held_fds; at close they must be gone).
HELD = {"GLOOCY_TEST_HELD_FDS": "ibmock:held_fds"}
if not MISSING:
    conftest.TRANSPORT_ENV.setdefault("ibverbs", {
        **ibmock.session_env(), **SMALL, **HELD, "GLOOCY_TRANSPORT": "ibverbs"})
    conftest.TRANSPORT_ENV.setdefault("ibmix", {
        **ibmock.session_env(), **SMALL, **HELD, "GLOOCY_TEST_HOSTS": "2"})

import test_collectives      # noqa: E402
import test_p2p              # noqa: E402

# The default run; --long: every test of both modules.
QUICK = {"test_sendrecv_ring_large_both_ways", "test_nonblocking_collectives"}


def _reuse(module):
    for name in dir(module):
        fn = getattr(module, name)
        if not name.startswith("test_") or not callable(fn):
            continue
        if not LONG and name not in QUICK:
            continue
        marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "transports"]
        if marks:
            continue                  # written for named transports only
        globals()[f"{name}__{module.__name__[5:]}"] = fn


_reuse(test_collectives)
_reuse(test_p2p)
