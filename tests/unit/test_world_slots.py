"""A world of thousands of lazy slots, made cheaply: a Context over
UNCONNECTED slots still checks every slot it is given, and world
communicators of one size share one ranks tuple (the oracle: range)."""

import pytest

from gloocy import Communicator, _core
from gloocy.transport import UNCONNECTED


def lazy_slots(rank, size):
    pairs = [UNCONNECTED] * size
    pairs[rank] = None
    return pairs


def test_a_context_over_unconnected_slots_has_no_pair_yet():
    ctx = _core.Context(5, 4096, lazy_slots(5, 4096))
    assert ctx.links.connected == []
    assert len(ctx.links.pairs) == 4096
    assert ctx.links.pairs[5] is None
    assert all(p is UNCONNECTED for i, p in enumerate(ctx.links.pairs) if i != 5)


@pytest.mark.parametrize("where", [0, 7, 4095])
def test_a_slot_that_is_no_pair_is_named(where):
    pairs = lazy_slots(3, 4096)
    pairs[where] = "not a pair"
    with pytest.raises(ValueError, match=rf"pairs\[{where}\] is not a Pair to rank {where}"):
        _core.Context(3, 4096, pairs)


def test_unconnected_at_our_own_rank_is_refused():
    pairs = [UNCONNECTED] * 64          # (our slot must be None)
    with pytest.raises(ValueError, match=r"pairs\[rank\] must be None"):
        _core.Context(9, 64, pairs)


def test_world_communicators_of_one_size_share_their_ranks():
    a = Communicator(_core.Context(1, 3000, lazy_slots(1, 3000)))
    b = Communicator(_core.Context(2, 3000, lazy_slots(2, 3000)))
    other = Communicator(_core.Context(0, 17, lazy_slots(0, 17)))
    assert a._procs == tuple(range(3000))
    assert a._procs is b._procs
    assert other._procs == tuple(range(17))
    assert a.Get_group().Get_size() == 3000
    assert b.Get_group().Translate_ranks([0, 2, 2999], a.Get_group()) == [0, 2, 2999]
