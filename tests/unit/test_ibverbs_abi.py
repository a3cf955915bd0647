"""The ibverbs transport without processes. gloocy's own declarations of
the verbs ABI (gloocy/transport/_ibv_abi.h) against the system's
<infiniband/verbs.h> (libibverbs-dev): every declared field at the same
offset, every allocated struct the same size, every enum value the same --
compiled as static asserts, so a mismatch fails the build of one C file,
naming the field. Then GLOOCY_IB_HCA's grammar (NCCL's) and the knobs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ibmock                                  # noqa: E402
from ibmock import abi_check                   # noqa: E402

from gloocy.transport.ibverbs import parse_hca, select_ports   # noqa: E402

MISSING = ibmock.missing()


@pytest.mark.skipif(bool(MISSING), reason=f"cannot compile against verbs.h: {MISSING}")
def test_declarations_match_the_real_verbs_header(tmp_path):
    src = tmp_path / "abi.c"
    src.write_text(abi_check.source())
    cc = os.environ.get("CC", "cc")
    run = subprocess.run([cc, "-fsyntax-only", "-Wall", "-Werror", str(src)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-4000:]
    assert src.read_text().count("_Static_assert") > 150


@pytest.mark.skipif(bool(MISSING), reason=f"cannot compile against verbs.h: {MISSING}")
def test_the_check_catches_a_wrong_offset(tmp_path):
    # The same check over a header with one field moved must fail.
    header = tmp_path / "_ibv_abi.h"
    header.write_text(abi_check.ABI_HEADER.read_text().replace(
        "    uint32_t byte_len;\n", "    uint32_t byte_len, oops;\n", 1))
    src = tmp_path / "abi.c"
    src.write_text(abi_check.source().replace(str(abi_check.ABI_HEADER), str(header)))
    run = subprocess.run([os.environ.get("CC", "cc"), "-fsyntax-only", str(src)],
                         capture_output=True, text=True)
    assert run.returncode != 0 and "ibv_wc." in run.stderr


NAMES = ["mlx5_0", "mlx5_1", "mlx5_10", "mlx4_0"]


@pytest.mark.parametrize("spec, want", [
    ("", [("mlx5_0", 1), ("mlx5_1", 1), ("mlx5_10", 1), ("mlx4_0", 1)]),
    ("mlx5", [("mlx5_0", 1), ("mlx5_1", 1), ("mlx5_10", 1)]),
    ("mlx5_1", [("mlx5_1", 1), ("mlx5_10", 1)]),          # a prefix
    ("=mlx5_1", [("mlx5_1", 1)]),                          # exact
    ("mlx5_0:2,mlx4", [("mlx5_0", 2), ("mlx4_0", 1)]),
    ("^mlx5", [("mlx4_0", 1)]),
    ("^=mlx5_1,mlx4_0", [("mlx5_0", 1), ("mlx5_10", 1)]),
    ("=mlx5_0:1,=mlx4_0", [("mlx5_0", 1)]),               # '=' once, for the list
    ("ib", []),
])
def test_hca_selection_follows_nccls_grammar(spec, want):
    assert select_ports(NAMES, spec) == want


def test_a_bad_port_is_named():
    with pytest.raises(ValueError, match="port 'x' of 'mlx5_0'"):
        parse_hca("mlx5_0:x")


@pytest.mark.parametrize("name, value, why", [
    ("GLOOCY_IB_SLOTS", "2", "GLOOCY_IB_SLOTS='2': must be a whole number >= 4"),
    ("GLOOCY_IB_SLOT_BYTES", "big", "GLOOCY_IB_SLOT_BYTES='big'"),
    ("GLOOCY_IB_RDV_BYTES", "0", "GLOOCY_IB_RDV_BYTES='0'"),
    ("GLOOCY_IB_GID_INDEX", "-2", "GLOOCY_IB_GID_INDEX='-2'"),
    ("GLOOCY_IB_HCA", "mlx5_0:one", "port 'one' of 'mlx5_0'"),
    ("GLOOCY_IB_REG_CACHE_BYTES", "-1", "GLOOCY_IB_REG_CACHE_BYTES='-1'"),
    ("GLOOCY_IB_TIMEOUT", "32", "GLOOCY_IB_TIMEOUT='32': must be at most 31"),
    ("GLOOCY_IB_RETRY_CNT", "8", "GLOOCY_IB_RETRY_CNT='8': must be at most 7"),
])
def test_bad_knobs_are_named_before_any_connection(monkeypatch, name, value, why):
    from gloocy.transport import _settings
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as info:
        _settings("auto", 0)
    assert why in str(info.value)


def _gid_table(root, entries):
    """A sysfs GID table of device mlx5_0 port 1: index -> (type, gid)."""
    port = root / "mlx5_0" / "ports" / "1"
    (port / "gid_attrs" / "types").mkdir(parents=True)
    (port / "gids").mkdir()
    for i, (kind, gid) in entries.items():
        (port / "gid_attrs" / "types" / str(i)).write_text(kind + "\n")
        (port / "gids" / str(i)).write_text(gid + "\n")
    return root


LINK_LOCAL = "fe80:0000:0000:0000:0202:c9ff:fe00:0001"
V4_MAPPED = "0000:0000:0000:0000:0000:ffff:0a00:0001"
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


@pytest.mark.parametrize("entries, want", [
    # as NCCL picks: RoCE v2, IPv4-mapped first
    ({0: ("IB/RoCE v1", LINK_LOCAL), 1: ("RoCE v2", LINK_LOCAL),
      2: ("IB/RoCE v1", V4_MAPPED), 3: ("RoCE v2", V4_MAPPED)}, 3),
    ({0: ("IB/RoCE v1", LINK_LOCAL), 1: ("RoCE v2", LINK_LOCAL)}, 1),
    ({0: ("IB/RoCE v1", LINK_LOCAL), 1: ("RoCE v2", ZERO)}, None),
    ({0: ("IB/RoCE v1", LINK_LOCAL)}, None),          # InfiniBand
])
def test_the_roce_v2_gid_is_found_in_the_kernels_table(tmp_path, entries, want):
    from gloocy.transport.ibverbs import roce_v2_gid
    assert roce_v2_gid("mlx5_0", 1, str(_gid_table(tmp_path, entries))) == want


def test_without_a_gid_table_no_gid_is_chosen(tmp_path):
    from gloocy.transport.ibverbs import roce_v2_gid
    assert roce_v2_gid("mlx5_0", 1, str(tmp_path)) is None
