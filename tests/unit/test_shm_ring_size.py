"""How big each shared-memory ring between two local ranks is: at most a
fixed share of memory per rank, however many ranks share the host (issue
16, item 4). The rule is checked against a closed form written here."""

import pytest

from gloocy.transport import shm

KiB, MiB = 1 << 10, 1 << 20


def expected_ring(local_ranks):
    """The largest power of two p from 4 KiB to 256 KiB with
    p x (local_ranks - 1) <= 4 MiB (4 KiB if none fits)."""
    p = 256 * KiB
    while p > 4 * KiB and p * (local_ranks - 1) > 4 * MiB:
        p //= 2
    return p


@pytest.mark.parametrize("local_ranks", [1, 2, 3, 16, 17, 18, 33, 64, 65, 128,
                                         129, 1000, 1025, 5000, 10**7])
def test_the_ring_shrinks_with_the_local_ranks(monkeypatch, local_ranks):
    monkeypatch.delenv("GLOOCY_SHM_RING_BYTES", raising=False)
    ring = shm.ring_bytes(local_ranks)
    assert ring == expected_ring(local_ranks)
    assert ring & (ring - 1) == 0
    if ring > 4 * KiB:       # a rank's share of the host's rings: bounded
        assert ring * (local_ranks - 1) <= 4 * MiB


def test_the_figures_the_docs_quote(monkeypatch):
    monkeypatch.delenv("GLOOCY_SHM_RING_BYTES", raising=False)
    assert [shm.ring_bytes(n) for n in (2, 17, 18, 64, 128)] == \
        [256 * KiB, 256 * KiB, 128 * KiB, 64 * KiB, 32 * KiB]


@pytest.mark.parametrize("value, want", [("5000", 8192), ("1", 4096),
                                         ("1048576", 1 << 20)])
def test_the_variable_wins_at_any_number_of_ranks(monkeypatch, value, want):
    monkeypatch.setenv("GLOOCY_SHM_RING_BYTES", value)
    assert shm.ring_bytes(2) == shm.ring_bytes(128) == want


def test_a_bad_variable_is_named(monkeypatch):
    monkeypatch.setenv("GLOOCY_SHM_RING_BYTES", "lots")
    with pytest.raises(ValueError, match="GLOOCY_SHM_RING_BYTES='lots'"):
        shm.ring_bytes(64)
