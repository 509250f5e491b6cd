"""Placing requests on many devices, one tierlm each (docs/distributed.md).

tierlm grows no cluster of its own: a router in front (Ray Serve's, llm-d's)
places each request on a replica, and the replica's tierlm schedules it. This
package is the placement rule, pure (no clock, no I/O, nothing of tierlm
imported): ``rank(stats, model, class_name, now)`` orders replicas by their
routing stats, and ``PlacementLog`` remembers what was placed since them.
"""

from tierlm.cluster.placements import PlacementLog
from tierlm.cluster.rank import SKI_SWAPS, STALE_AFTER, rank, views
from tierlm.cluster.stats import (
    DEFAULT_SWAP_S,
    STATS_VERSION,
    Placement,
    View,
)

__all__ = [
    "DEFAULT_SWAP_S",
    "SKI_SWAPS",
    "STALE_AFTER",
    "STATS_VERSION",
    "Placement",
    "PlacementLog",
    "View",
    "rank",
    "views",
]
