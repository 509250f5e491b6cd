"""Scheduler settings, with where each default comes from."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from tierlm.core.fairness import DEFAULT_DECAY_PERIOD, DEFAULT_IDLE_RESET

__all__ = ["SchedulerConfig"]


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Tunables of the tiered policy and its shell (docs/design.md §4)."""

    max_affinity_wait: float = 120.0
    """docs/design.md §4 affinity: the longest the best job waits behind same-model work
    before its swap is forced (the starvation bound). 120 s = 12 swaps' worth of
    the seed's ~10 s swap, so affinity saves most swaps yet nothing waits long."""

    chat_grace: float = 30.0
    """docs/design.md §4 affinity: no swap away from a model within this many seconds
    of its last chat, "a person likely types again" (seed scenario 6)."""

    decay_period: float = DEFAULT_DECAY_PERIOD
    """Seed: "Every 5 minutes a sweeper halves all vruntime entries"."""

    idle_reset: float = DEFAULT_IDLE_RESET
    """Seed: a producer that "returns after being absent for > 5 min" is seeded."""

    weights: Mapping[str, float] = field(default_factory=dict)
    """Per-producer fair-pool weight: a charge is seconds / weight."""

    cancel_grace: float = 5.0
    """Seconds a cancelled job may take to stop before the shell reports it as
    stuck and stops waiting for it. Runners stop within a token, so
    5 s is many tokens even on a phone."""

    def __post_init__(self) -> None:
        for name in (
            "max_affinity_wait",
            "chat_grace",
            "decay_period",
            "idle_reset",
            "cancel_grace",
        ):
            value = getattr(self, name)
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or math.isnan(value)
                or value < 0
            ):
                raise ValueError(f"SchedulerConfig.{name}: must be a number >= 0, got {value!r}")
        if self.decay_period == 0:
            raise ValueError("SchedulerConfig.decay_period: must be > 0")
