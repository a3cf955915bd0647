"""The collective and point-to-point world tests again, over ibverbs on the
libibverbs stand-in (tests/ibmock): GLOOCY_TRANSPORT=ibverbs puts every
peer, local ones too, on an RDMA queue pair, at N = 1-5.

By default a few small messages every protocol path (eager slots, the
rendezvous above 32 KiB, ...) runs; `--long` runs the whole of both modules
(GLOOCY_IB_RDV_BYTES is lowered so that far more frames take the
rendezvous)."""

import os

import pytest

import conftest
import ibmock

MISSING = ibmock.missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"the ibverbs stand-in "
                                f"cannot be built here: {MISSING}")
LONG = os.environ.get("GLOOCY_TEST_LONG") == "1"
TRANSPORTS = ("ibverbs",)
if not MISSING:
    conftest.TRANSPORT_ENV.setdefault("ibverbs", {
        **ibmock.session_env(), "GLOOCY_TRANSPORT": "ibverbs",
        # small rendezvous and slots: every size class takes every path
        "GLOOCY_IB_RDV_BYTES": "4096", "GLOOCY_IB_SLOT_BYTES": "1024",
        "GLOOCY_IB_SLOTS": "8"})

import test_collectives      # noqa: E402
import test_p2p              # noqa: E402

# The default run: one test of each kind; --long: all of them.
QUICK = {"test_collectives": None, "test_p2p": None}


def _reuse(module):
    for name in dir(module):
        fn = getattr(module, name)
        if not name.startswith("test_") or not callable(fn):
            continue
        marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "transports"]
        if marks:
            continue                  # written for named transports only
        globals()[f"{name}__{module.__name__[5:]}"] = fn


_reuse(test_collectives)
_reuse(test_p2p)
