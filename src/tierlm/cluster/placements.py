"""The placements a router made since each replica's last stats.

A replica's stats are polled (Ray Serve: every ``request_routing_stats_period_s``,
10 s by default); between two polls a router that ranked on the stats alone
would send every request to the replica that looked idle at the last poll.
``PlacementLog`` keeps what was sent where, and ``since(stats)`` returns, per
replica, the placements newer than its stats' ``at``, which ``rank`` counts
as queued there. Older ones are dropped: the stats count them now.

Pure: the time of each placement is an argument (the stats' clock).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlm.cluster.stats import Placement

__all__ = ["PlacementLog"]


class PlacementLog:
    """Placements by replica, oldest first."""

    def __init__(self) -> None:
        self._placed: dict[str, list[Placement]] = {}

    def record(self, replica: str, model: str, class_name: str, at: float) -> None:
        self._placed.setdefault(replica, []).append(Placement(replica, model, class_name, at))

    def since(self, stats: Mapping[str, Mapping[str, Any] | None]) -> dict[str, list[Placement]]:
        """Per replica of ``stats``, the placements newer than its stats (all of
        them for a replica without readable stats); forgets the rest, and the
        replicas no longer in ``stats``."""
        for gone in set(self._placed) - set(stats):
            del self._placed[gone]
        out: dict[str, list[Placement]] = {}
        for name, placed in self._placed.items():
            entry = stats.get(name)
            at = entry.get("at") if isinstance(entry, Mapping) else None
            if isinstance(at, int | float) and not isinstance(at, bool):
                placed[:] = [p for p in placed if p.at > at]
            if placed:
                out[name] = list(placed)
        return out

    def __len__(self) -> int:
        return sum(len(p) for p in self._placed.values())
