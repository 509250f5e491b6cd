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

    journal_bytes_per_job: int = 1 << 20
    """docs/design.md §4 zero-loss preemption: memory one closure job's journal of
    its ``ctx.generate`` output may hold (1 MiB). A recorded token costs ~60 B
    (a small str and its list slot), so this is ~17 000 tokens: every call of an
    agent round of several 4 000-token calls, 14 minutes of decoding at the
    seed's 20 tokens/s. A job past it still runs correctly; it regenerates."""

    journal_bytes_total: int = 32 << 20
    """The same for all journals together (32 MiB): 32 jobs at their bound,
    thousands of typical rounds (a few hundred tokens each); small next to the
    model the device holds. Only preempted and running jobs hold a journal."""

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
        for name in ("journal_bytes_per_job", "journal_bytes_total"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"SchedulerConfig.{name}: must be an int >= 0, got {value!r}")
        if self.decay_period == 0:
            raise ValueError("SchedulerConfig.decay_period: must be > 0")
