"""gloocy.testing: test distributed code in worlds of ranks.

    from gloocy.testing import World

    def mean(comm, x):                       # the code under test
        total = np.array([x.sum(), x.size], dtype=np.float64)
        comm.Allreduce(gloocy.IN_PLACE, total)
        return total[0] / total[1]

    with World(4) as world:                  # 4 rank threads; backend="processes" too
        results = world.run_each(mean, [(chunk,) for chunk in np.array_split(data, 4)])

- ``World`` (threads or processes), ``RankFailure``/``RankTimeout``/
  ``RankError``: gloocy.testing._base, .threads, .processes
- ``COMM_WORLD``/``current_comm()``: the running rank's communicator
- faults (Kill, Freeze, Mismatch, link delay and cut): gloocy.testing.faults
- NumPy references of every collective: gloocy.testing.oracle
- hypothesis strategies: gloocy.testing.strategies
- the pytest plugin (``world`` fixture, ``@pytest.mark.world``):
  gloocy.testing.plugin, loaded by pytest through the ``pytest11`` entry point
"""

from ._base import (BACKENDS, Worlds, World, abort_all, close_leaks,
                    close_spoiled, open_worlds_resources, reap_dead)
from ._current import COMM_WORLD, current_comm
from ._report import RankError, RankFailure, RankLeak, RankTimeout
from ._resources import Resources, grown, resources
from .faults import Freeze, Kill, Mismatch, RankFrozen, RankKilled

__all__ = ["World", "Worlds", "BACKENDS", "RankError", "RankFailure",
           "RankTimeout", "RankLeak", "COMM_WORLD", "current_comm",
           "Kill", "Freeze", "Mismatch", "RankKilled", "RankFrozen",
           "abort_all", "reap_dead", "close_spoiled", "open_worlds_resources",
           "close_leaks", "Resources", "resources", "grown"]
