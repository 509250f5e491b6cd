"""Scheduler settings, with where each default comes from (every knob of the
policy, these and the rules' constants, in one table: ``core/knobs.py``)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tierlm.core.bets import LOSS_SHARE
from tierlm.core.fairness import DEFAULT_IDLE_RESET

__all__ = [
    "DEADLINE_MODES",
    "MAX_WEIGHT",
    "MIN_WEIGHT",
    "RETIRED",
    "SchedulerConfig",
    "scheduler_config",
]

MIN_WEIGHT = 0.001
MAX_WEIGHT = 1000.0
"""Fair-pool weights span six orders of magnitude: enough for any share, and
precise as integer loads (docs/design.md §4.4)."""


DEADLINE_MODES = ("after-people", "on-time")
"""docs/design.md §4.8 (deadlines on time): the accepted ``SchedulerConfig.deadlines``."""


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Tunables of the tiered policy and its shell (docs/design.md §4)."""

    max_affinity_wait: float = 120.0
    """docs/design.md §4.8: the longest the best job waits behind same-model work
    before its swap is forced (the starvation bound). 120 s = 12 swaps' worth of
    the seed's ~10 s swap, so affinity saves most swaps yet nothing waits long."""

    chat_grace: float = 30.0
    """docs/design.md §4.8: no swap away from a model within this many seconds
    of its last chat, "a person likely types again" (seed scenario 6)."""

    chat_idle: float = 60.0
    """docs/design.md §4.8: while the chat page is open, the no-swap hold
    lasts until the last chat is this old: one minute without a message means
    the person has stopped typing, not that they are about to. A person whose
    own recent gaps ran longer holds it up to twice this (§4.8 (holds),
    ``holds.IDLE_STRETCH``)."""

    grace_factor: float = 3.0
    """docs/design.md §4.8 (ski rental): with work queued for another
    model, the device idles at most this many measured swap times for a
    person who may type again. Renting (idling) until rent paid equals a few
    purchases (swaps) bounds the waste; 3 keeps the seed's 30 s hold for its
    ~10 s phone swap and shrinks it to 0.3 s for a 0.1 s swap."""

    slice: float = 3.0
    """docs/design.md §4.6: a pool job that has run this
    long yields to an eligible producer with an earlier virtual deadline.
    Two backlogged producers stay within about two slices of each other over
    any minute (EEVDF's lag of about a slice each way), so 3 s keeps their
    service within 10 % of any 60 s window (VTC's measure): the seed's 4 s
    allowed 13.3 %, and on the `azure-pool` trace case 13.6 % over 116 h
    against 9.5 % at 3 s. 3 s is 60 tokens at the seed's 20 tokens/s, and a
    preemption (a re-prefill at worst, nothing with a KV snapshot; §4.6 (a slice worth its resume))
    costs little against it."""

    pool_floor: float = 0.1
    """docs/design.md §4.5: overdue work never pushes a
    backlogged fair pool below this share of busy device time in a 300 s window
    (the seed's budget window): cron that falls behind cannot starve the pool."""

    idle_reset: float = DEFAULT_IDLE_RESET
    """Seed: a producer that "returns after being absent for > 5 min" starts
    afresh; here its fair-pool state is forgotten, which also bounds memory."""

    weights: Mapping[str, float] = field(default_factory=dict)
    """Fair-pool weight per producer path, e.g. ``{"swarm": 2, "swarm/1": 0.5}``:
    a weight applies to that path's node at its own level, whatever the class
    (docs/design.md §4.4). Default 1."""

    class_weights: Mapping[str, float] = field(default_factory=dict)
    """Fair-pool weight per fair task class, at the pool's top level. Default 1."""

    chat_slowdown: float = 1.25
    """docs/design.md §4.7 (chat latency guard): while a person's sequence (T0, T1)
    runs on a batched device, the batch around it is cut so that its time per
    output token stays within this factor of running alone, by the step-time
    curve the runner reports. 1.25: a chat at 80 % of its solo speed reads as
    unchanged (a reader of 5-8 words/s is far slower than either), and on the
    measured llama.cpp CPU curve it still admits a few background sequences."""

    lost_bets: float = LOSS_SHARE
    """docs/design.md §4.8 (bets): of a person's messages, the share that may
    wait for a swap made for background work while the chat page is open
    (a lost excursion bet). 0.02, one message in fifty: the promise is that
    a person never waits behind background, and this is what may slip. Work
    on another model then waits for gaps the person's own pace says hold;
    0.1 gives about the old median bet (cron sooner, a message in ten
    waiting a swap); 0 makes no bet at all."""

    deadlines: str = "after-people"
    """docs/design.md §4.8 (deadlines on time): ``"after-people"`` (the seed's
    order: overdue work on another model waits for a person's idle gap, so a
    message waits for background swaps only when a bet on that gap is lost);
    ``"on-time"``: work presses ``grace_factor`` swaps before it is due (so
    it is done by its deadline, not started at it); pressing work on another
    model gets its swap as soon as no person's job is queued (their running
    sequences end first), a person who then writes waits for it to finish,
    up to ``grace_factor`` swaps, before the swap back, and on the person's
    own model the chat latency guard does not cut it. An operator's choice of
    which promise bends: measured on both Azure traces in docs/design.md §8."""

    cancel_grace: float = 5.0
    """Seconds a cancelled job may take to stop before the shell reports it as
    stuck and stops waiting for it. Runners stop within a token, so
    5 s is many tokens even on a phone."""

    journal_bytes_per_job: int = 1 << 20
    """docs/design.md §4.9: memory one closure job's journal of
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
            "chat_idle",
            "grace_factor",
            "idle_reset",
            "cancel_grace",
        ):
            _check_number(name, getattr(self, name))
        _check_number("chat_slowdown", self.chat_slowdown)
        if self.chat_slowdown < 1:
            raise ValueError(
                f"SchedulerConfig.chat_slowdown: must be a factor >= 1, got {self.chat_slowdown!r}"
            )
        _check_number("slice", self.slice)
        if self.slice == 0 or math.isinf(self.slice):
            raise ValueError(f"SchedulerConfig.slice: must be seconds > 0, got {self.slice!r}")
        _check_number("lost_bets", self.lost_bets)
        if self.lost_bets >= 1:
            raise ValueError(
                f"SchedulerConfig.lost_bets: must be a fraction in [0, 1), got {self.lost_bets!r}"
            )
        _check_number("pool_floor", self.pool_floor)
        if self.pool_floor >= 1:
            raise ValueError(
                f"SchedulerConfig.pool_floor: must be a fraction in [0, 1), got {self.pool_floor!r}"
            )
        for name in ("journal_bytes_per_job", "journal_bytes_total"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"SchedulerConfig.{name}: must be an int >= 0, got {value!r}")
        if self.deadlines not in DEADLINE_MODES:
            accepted = ", ".join(repr(mode) for mode in DEADLINE_MODES)
            raise ValueError(
                f"SchedulerConfig.deadlines: must be one of {accepted}, got {self.deadlines!r}"
            )
        _check_weights("weights", self.weights, "producer")
        _check_weights("class_weights", self.class_weights, "class")


RETIRED = {
    "decay_period": "the EEVDF fair pool keeps no history to halve "
    "(lag is clamped and forgotten after idle_reset)",
}
"""Settings the policy no longer has, and why: a gateway file naming one still
loads (``scheduler_config``), with a warning."""


def scheduler_config(values: Mapping[str, Any]) -> SchedulerConfig:
    """``SchedulerConfig(**values)``; a retired setting (``RETIRED``) is
    dropped with a ``DeprecationWarning`` that says why."""
    for name in RETIRED.keys() & values.keys():
        why = f"scheduler.{name} has no effect: {RETIRED[name]}"
        warnings.warn(why, DeprecationWarning, stacklevel=3)
    return SchedulerConfig(**{k: v for k, v in values.items() if k not in RETIRED})


def _check_number(name: str, value: object) -> None:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or math.isnan(value)
        or value < 0
    ):
        raise ValueError(f"SchedulerConfig.{name}: must be a number >= 0, got {value!r}")


def _check_weights(name: str, weights: object, what: str) -> None:
    if not isinstance(weights, Mapping):
        raise TypeError(
            f"SchedulerConfig.{name}: must be a mapping of {what} name -> weight, "
            f"got {type(weights).__name__}"
        )
    for key, weight in weights.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"SchedulerConfig.{name}: keys must be non-empty strings, got {key!r}")
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not MIN_WEIGHT <= weight <= MAX_WEIGHT
        ):
            raise ValueError(
                f"SchedulerConfig.{name}: weight of {what} {key!r} must be a number "
                f"from {MIN_WEIGHT:g} to {MAX_WEIGHT:g}, got {weight!r}"
            )
