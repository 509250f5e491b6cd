"""The fair pool's virtual runtime, kept per producer (docs/design.md §4 fair pool, §6.1).

Linux CFS adapted to one inference device, as in VTC (arXiv:2501.14312):

- a producer's vruntime grows by the device seconds its jobs held, divided by
  its weight, charged when a job ends, cancelled or not ("you ran, you pay"),
  swap included;
- a producer that appears, or returns after more than ``idle_reset`` seconds
  with nothing queued or running, starts at the smallest vruntime of the
  producers present (CFS's min_vruntime seeding; the seed's §"newcomer"), so a
  newcomer neither monopolises the pool nor waits behind others' history; one
  that returns sooner keeps what it was owed when it left, and no more
  (``job_arrived``);
- every ``decay_period`` seconds all vruntimes are halved, so history fades.

Halving preserves every order, so it is applied lazily, on the next call that
passes a time in; that gives the same values as a timer would.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["DEFAULT_DECAY_PERIOD", "DEFAULT_IDLE_RESET", "FairPool"]

# Seed §"vruntime decay": "Every 5 minutes a sweeper halves all vruntime entries".
DEFAULT_DECAY_PERIOD = 300.0
# Seed §"newcomer seeding": a kind that "returns after being absent for > 5 min".
DEFAULT_IDLE_RESET = 300.0


class FairPool:
    """vruntime, activity and weights of the fair pool's producers."""

    def __init__(
        self,
        *,
        decay_period: float = DEFAULT_DECAY_PERIOD,
        idle_reset: float = DEFAULT_IDLE_RESET,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        self.decay_period = decay_period
        self.idle_reset = idle_reset
        self.weights: dict[str, float] = {}
        for producer, weight in (weights or {}).items():
            self.set_weight(producer, weight)
        self.vruntime: dict[str, float] = {}
        self._active: dict[str, int] = {}  # queued + running jobs per producer
        self._idle_since: dict[str, float] = {}
        self._lag: dict[str, float] = {}  # how far behind the others, when it left
        self._next_decay: float | None = None
        self.epoch = 0
        """Bumped whenever vruntimes change in a way that reorders nothing
        (decay), so indexes keyed by vruntime know to rebuild."""

    def set_weight(self, producer: str, weight: float) -> None:
        if not isinstance(weight, int | float) or not math.isfinite(weight) or weight <= 0:
            raise ValueError(
                f"weight of producer {producer!r}: must be a number > 0, got {weight!r}"
            )
        self.weights[producer] = float(weight)

    def advance(self, now: float) -> bool:
        """Apply the halvings due by ``now``; return True if any was applied."""
        if self._next_decay is None:
            self._next_decay = now + self.decay_period
            return False
        if now < self._next_decay:
            return False
        periods = int((now - self._next_decay) // self.decay_period) + 1
        self._next_decay += periods * self.decay_period
        factor = 0.5 ** min(periods, 1100)  # past ~1100 halvings every value is 0.0
        for producer in self.vruntime:
            self.vruntime[producer] *= factor
        for producer in self._lag:
            self._lag[producer] *= factor
        self.epoch += 1
        return True

    def is_active(self, producer: str) -> bool:
        return self._active.get(producer, 0) > 0

    def job_arrived(self, producer: str, now: float, *, requeued: bool = False) -> None:
        """A job of ``producer`` entered the queue.

        A producer with nothing queued or running that submits again is placed
        by one of three rules:

        - new, or back after more than ``idle_reset`` seconds: the smallest
          vruntime of the producers present (docs/design.md §4, CFS's min_vruntime);
        - back sooner: ``max(own, min_present - lag)``, where ``lag`` is how far
          behind the others it was when it left. What it was owed while it
          waited is kept; time spent away earns nothing. Without this, a
          producer idle for 4 minutes returned with minutes of "credit" and ran
          alone while backlogged peers waited (VTC's on/off case; fair-pool
          Jain 0.94 -> see docs/design.md §4 fair pool). This is EEVDF's lag, clamped
          so it never raises a producer that was ahead.

        A re-queue after preemption is not a return: its place stands.
        """
        if not requeued and not self.is_active(producer):
            idle_since = self._idle_since.get(producer)
            if producer not in self.vruntime or (
                idle_since is not None and now - idle_since > self.idle_reset
            ):
                self.vruntime[producer] = self._seed_value(producer)
            else:
                present = self._min_present(producer)
                if present is not None:
                    owed = self._lag.get(producer, 0.0)
                    self.vruntime[producer] = max(self.vruntime[producer], present - owed)
        self._active[producer] = self._active.get(producer, 0) + 1

    def job_left(self, producer: str, now: float) -> None:
        """A job of ``producer`` ended, or was removed from the queue."""
        count = self._active.get(producer, 0) - 1
        if count > 0:
            self._active[producer] = count
        else:
            self._active.pop(producer, None)
            self._idle_since[producer] = now
            present = self._min_present(producer)
            own = self.vruntime.get(producer, 0.0)
            self._lag[producer] = max(0.0, present - own) if present is not None else 0.0

    def _min_present(self, producer: str) -> float | None:
        """The smallest vruntime among the other producers with work queued or running."""
        values = [self.vruntime.get(p, 0.0) for p in self._active if p != producer]
        return min(values) if values else None

    def _seed_value(self, newcomer: str) -> float:
        present = self._min_present(newcomer)
        if present is not None:
            return present
        others = [v for p, v in self.vruntime.items() if p != newcomer]
        return min(others) if others else 0.0

    def charge(self, producer: str, seconds: float) -> None:
        """Charge device time, swap included, scaled by the producer's weight."""
        weight = self.weights.get(producer, 1.0)
        self.vruntime[producer] = self.vruntime.get(producer, 0.0) + max(0.0, seconds) / weight

    def get(self, producer: str) -> float:
        return self.vruntime.get(producer, 0.0)
