"""Task classes as data (docs/design.md §3): the seed's tiers, configurable.

A task class says how a kind of work is treated: its base tier, whether it is in
the fair pool, whether a preempted job goes back to the queue, and an optional
budget (a cap on its share of busy device time over a rolling window).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "DEFAULT_BUDGET_WINDOW",
    "T0",
    "T1",
    "T2",
    "T3",
    "T4",
    "Budget",
    "TaskClass",
    "Tier",
    "default_classes",
    "resolve_classes",
]

# docs/design.md §3 / seed "T2 budget": "capped at ~60 % of cumulative LLM time over each
# rolling 5-minute window".
DEFAULT_BUDGET_WINDOW = 300.0
DEFAULT_EXTRACT_SHARE = 0.6


class Tier(enum.IntEnum):
    """Effective tiers (docs/design.md §4); a lower number always runs first."""

    T0 = 0
    """A person typed: chat."""
    T1 = 1
    """The surface the person is looking at (the foreground)."""
    T2 = 2
    """Infrastructure: extraction."""
    T3 = 3
    """Overdue: a fair-pool job past its deadline (EDF inside)."""
    T4 = 4
    """The fair pool: per-producer virtual runtime (CFS inside)."""


# Tiers as plain ints for the hot path (IntEnum comparisons cost ~5x more).
T0, T1, T2, T3, T4 = (int(t) for t in Tier)


@dataclass(frozen=True, slots=True)
class Budget:
    """At most ``share`` of busy device time over a rolling ``window`` seconds."""

    share: float
    window: float = DEFAULT_BUDGET_WINDOW

    def __post_init__(self) -> None:
        if not isinstance(self.share, int | float) or not 0.0 < self.share <= 1.0:
            raise ValueError(f"budget.share: must be a fraction in (0, 1], got {self.share!r}")
        if (
            not isinstance(self.window, int | float)
            or not math.isfinite(self.window)
            or self.window <= 0
        ):
            raise ValueError(f"budget.window: must be seconds > 0, got {self.window!r}")


@dataclass(frozen=True, slots=True)
class TaskClass:
    """How one kind of work is scheduled (docs/design.md §3).

    - ``tier``: the base tier, 0 to 4 (see :class:`Tier`).
    - ``fair``: in the fair pool, ordered by per-producer virtual runtime. The
      fair pool is T4 and only T4: a fair class must have tier 4, and a tier-4
      class must be fair (FIFO and CFS cannot share one tier meaningfully).
    - ``requeue``: a preempted job goes back to the front of its tier; otherwise
      its caller gets a ``Cancelled`` error (chat).
    - ``budget``: an optional cap on the class's share of busy time.
    """

    name: str
    tier: int
    fair: bool = False
    requeue: bool = True
    budget: Budget | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"task class name: must be a non-empty string, got {self.name!r}")
        if not isinstance(self.tier, int) or isinstance(self.tier, bool) or not 0 <= self.tier <= 4:
            raise ValueError(
                f"task class {self.name!r}: tier must be one of 0, 1, 2, 3, 4, got {self.tier!r}"
            )
        if self.fair != (self.tier == Tier.T4):
            raise ValueError(
                f"task class {self.name!r}: the fair pool is tier 4 only "
                f"(got tier={self.tier}, fair={self.fair}); use tier=4, fair=True "
                f"or a tier of 0-3 with fair=False"
            )
        if self.tier == Tier.T0 and self.requeue:
            raise ValueError(
                f"task class {self.name!r}: tier 0 is a person waiting and is never "
                f"re-queued (docs/design.md §4.10); use requeue=False"
            )
        if self.budget is not None and self.tier == Tier.T0:
            raise ValueError(f"task class {self.name!r}: tier 0 cannot have a budget")


def default_classes() -> dict[str, TaskClass]:
    """The seed's four producers (docs/design.md §3)."""
    return {
        c.name: c
        for c in (
            TaskClass("chat", Tier.T0, fair=False, requeue=False),
            TaskClass(
                "extract",
                Tier.T2,
                fair=False,
                requeue=True,
                budget=Budget(DEFAULT_EXTRACT_SHARE, DEFAULT_BUDGET_WINDOW),
            ),
            TaskClass("nataraj", Tier.T4, fair=True, requeue=True),
            TaskClass("gana", Tier.T4, fair=True, requeue=True),
        )
    }


def resolve_classes(
    classes: Iterable[TaskClass] | Mapping[str, TaskClass] | None,
) -> dict[str, TaskClass]:
    """Validate user classes (None = the defaults) into a name -> class map."""
    if classes is None:
        return default_classes()
    items = list(classes.values()) if isinstance(classes, Mapping) else list(classes)
    if not items:
        raise ValueError("classes: give at least one TaskClass (or None for the defaults)")
    result: dict[str, TaskClass] = {}
    for item in items:
        if not isinstance(item, TaskClass):
            raise TypeError(f"classes: expected TaskClass items, got {type(item).__name__}")
        if item.name in result:
            raise ValueError(f"classes: duplicate class name {item.name!r}")
        result[item.name] = item
    return result
