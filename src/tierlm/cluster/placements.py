"""The placements a router made since each replica's last stats.

A replica's stats are polled (Ray Serve: every ``request_routing_stats_period_s``,
10 s by default); between two polls a router that ranked on the stats alone
would send every request to the replica that looked idle at the last poll.
``PlacementLog`` keeps what was sent where, and ``since(stats)`` returns, per
replica, the placements newer than its stats' ``at``, which ``rank`` counts
as queued there. Older ones are dropped: the stats count them now.

A placement is counted from the moment it is chosen, not from the moment the
replica accepted it: requests ranked at the same time (a burst of chats) would
otherwise all see the same idle replica, since a replica's answer takes a
round trip. ``reserve(request_id, ...)`` holds the choice as pending; the
router then ``confirm``s it (the replica took it: a placement like any other,
on the replica that really took it) or ``release``s it (refused, failed, the
caller gave up). A reservation neither confirmed nor released within
``hold_s`` is dropped: a bound whatever the router is told.

Pure: the time of each placement is an argument (the stats' clock).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlm.cluster.stats import Placement

__all__ = ["RESERVATION_HOLD_S", "PlacementLog"]

# How long a reservation counts at most: the stale bound of the stats
# (rank.STALE_AFTER), past which no placement is still "since the stats".
RESERVATION_HOLD_S = 30.0


class PlacementLog:
    """Placements by replica, oldest first, and the reservations pending."""

    def __init__(self, hold_s: float = RESERVATION_HOLD_S) -> None:
        self._placed: dict[str, list[Placement]] = {}
        self._pending: dict[str, Placement] = {}
        self.hold_s = hold_s

    def record(self, replica: str, model: str, class_name: str, at: float) -> None:
        self._placed.setdefault(replica, []).append(Placement(replica, model, class_name, at))

    def reserve(
        self, request_id: str, replica: str, model: str, class_name: str, at: float
    ) -> None:
        """Count ``request_id`` on ``replica`` from now, until confirmed or
        released (a request ranked again replaces its earlier reservation)."""
        self._pending[request_id] = Placement(replica, model, class_name, at)

    def confirm(self, request_id: str, replica: str, at: float) -> None:
        """The replica took the request: a placement (of the reservation's model
        and class when there was one)."""
        held = self._pending.pop(request_id, None)
        if held is not None:
            self.record(replica, held.model, held.class_name, at)

    def release(self, request_id: str, replica: str | None = None) -> None:
        """The request went nowhere (refused, failed, cancelled); with
        ``replica``, only a reservation there (a later attempt of the same
        request, reserved elsewhere meanwhile, stays)."""
        held = self._pending.get(request_id)
        if held is not None and replica in (None, held.replica):
            del self._pending[request_id]

    @property
    def pending(self) -> int:
        return len(self._pending)

    def since(
        self, stats: Mapping[str, Mapping[str, Any] | None], now: float | None = None
    ) -> dict[str, list[Placement]]:
        """Per replica of ``stats``, the placements newer than its stats (all of
        them for a replica without readable stats), and the reservations
        pending there (younger than ``hold_s`` at ``now``, when given); forgets
        the rest, and the replicas no longer in ``stats``."""
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
        if now is not None:
            for request_id, held in list(self._pending.items()):
                if now - held.at > self.hold_s:
                    del self._pending[request_id]
        for held in self._pending.values():
            if held.replica in stats:
                out.setdefault(held.replica, []).append(held)
        return out

    def __len__(self) -> int:
        return sum(len(p) for p in self._placed.values()) + len(self._pending)
