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


def expected_chunk(local_ranks, cpus):
    """256 KiB where every rank has a CPU; else the largest power of two p
    from 256 KiB to 1 MiB with 2 x p x local_ranks <= 16 MiB (256 KiB if
    none fits)."""
    if local_ranks <= cpus:
        return 256 * KiB
    p = 1 * MiB
    while p > 256 * KiB and 2 * p * local_ranks > 16 * MiB:
        p //= 2
    return p


@pytest.mark.parametrize("extra", [0, 1, 2, 6, 7, 14, 30, 126, 10**6])
def test_node_slots_grow_where_ranks_outnumber_cpus(monkeypatch, extra):
    from gloocy.waiting import usable_cpus
    monkeypatch.delenv("GLOOCY_SHM_CHUNK_BYTES", raising=False)
    cpus = usable_cpus()
    local_ranks = cpus + extra
    chunk = shm.chunk_bytes(local_ranks)
    assert chunk == expected_chunk(local_ranks, cpus)
    if chunk > 256 * KiB:     # the slots of a segment: bounded
        assert 2 * chunk * local_ranks <= 16 * MiB


def test_the_chunk_variable_wins_at_any_number_of_ranks(monkeypatch):
    monkeypatch.setenv("GLOOCY_SHM_CHUNK_BYTES", "8192")
    assert shm.chunk_bytes(2) == shm.chunk_bytes(64) == 8192
