"""Baseline policies: the schedulers tierlm is compared with.

Each implements :class:`tierlm.core.Policy` (sans-I/O) and runs through the
same :class:`tierlm.Scheduler` shell as tierlm's own policy, via ``policy=``.
"""

from tierlm.sim.baselines.fifo import FifoPolicy
from tierlm.sim.baselines.seed_literal import SeedLiteralPolicy
from tierlm.sim.baselines.strict_priority import StrictPriorityPolicy
from tierlm.sim.baselines.two_lane import TwoLanePolicy

__all__ = ["FifoPolicy", "SeedLiteralPolicy", "StrictPriorityPolicy", "TwoLanePolicy"]
