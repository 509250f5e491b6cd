"""The fair pool's floor against overdue work (docs/design.md §4.5).

Overdue work (T3) outranks the fair pool, so cron that falls behind, or a T3
class that never runs dry, could take the whole device. The floor: while the
pool has work waiting, overdue work never pushes the pool's share of busy
device time in the last ``window`` seconds below ``share``.

It is kept with a margin, so it holds at every instant and not only at
dispatch: ``time_left`` is a lower bound on how long non-pool work can still
run before the share reaches the floor (the pool's time leaves the window at
most one second per second, busy time grows at most as fast). When it falls
under ``MARGIN`` the floor is OWED: overdue work ranks after the pool, and a
running overdue job is preempted (re-queued) at its next token boundary, well
before the floor is crossed. Once owed, the pool keeps the device until it has
a slice in hand (``time_left >= exit_after``), so the two do not swap every
half second.
"""

from __future__ import annotations

from tierlm.core.budget import BudgetMeter
from tierlm.core.classes import DEFAULT_BUDGET_WINDOW

__all__ = ["MARGIN", "PoolFloor"]

MARGIN = 0.5
"""Seconds of warning: ten tokens of the seed's device, so a preempted overdue
job stops at its next token boundary before the floor is crossed."""


class PoolFloor:
    """Busy time of the fair pool against all busy time, and the floor's state."""

    __slots__ = ("active", "exit_after", "meter", "share")

    def __init__(self, share: float, exit_after: float, window: float = DEFAULT_BUDGET_WINDOW):
        self.share = share
        self.exit_after = max(exit_after, MARGIN)
        self.meter = BudgetMeter(window)
        self.active = False
        """The floor is owed: overdue work waits for the pool."""

    def start(self, now: float, pool: float) -> None:
        """The running set changed; ``pool``: the part of it that runs in the
        pool's own order, not as a loan (1 or 0 with one slot)."""
        self.meter.start(now, pool)

    def stop(self, now: float) -> None:
        self.meter.stop(now)

    def time_left(self, now: float) -> float:
        """How long non-pool work could surely run before the pool's share
        reaches the floor (<= 0: it is already there)."""
        pool, busy = self.meter.usage(now)
        return (pool - self.share * busy) / (1.0 + self.share)

    def owed(self, now: float, backlogged: bool) -> bool:
        """Whether a decision at ``now`` finds the floor owed (a query). With
        nothing run in the window yet, nothing has pushed the pool below it."""
        if not backlogged or self.share <= 0:
            return False
        pool, busy = self.meter.usage(now)
        left = (pool - self.share * busy) / (1.0 + self.share)
        return busy > 0 and left < (self.exit_after if self.active else MARGIN)

    def update(self, now: float, backlogged: bool) -> None:
        """Called at every decision: enter or leave the owed state (``owed``,
        inlined: every decision)."""
        if not backlogged or self.share <= 0:
            self.active = False
            return
        pool, busy = self.meter.usage(now)
        left = (pool - self.share * busy) / (1.0 + self.share)
        self.active = busy > 0 and left < (self.exit_after if self.active else MARGIN)

    def wakeup(self, now: float) -> float:
        """When to look again while non-pool work runs and the floor is not owed:
        at the latest moment the bound still leaves half the margin."""
        return now + max(self.time_left(now) - MARGIN / 2, MARGIN / 2)
