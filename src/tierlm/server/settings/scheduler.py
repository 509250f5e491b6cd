"""``[scheduler]``: the policy's tunables, as the gateway's file, environment
and flags set them (docs/gateway.md); unset, ``SchedulerConfig``'s defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import Field

from tierlm.core.config import MAX_WEIGHT, MIN_WEIGHT, SchedulerConfig, scheduler_config
from tierlm.server.settings.schema import Flag, Schema

__all__ = ["SchedulerSettings"]

# The scheduler's own defaults (docs/design.md §4), which [scheduler] overrides.
_SCHEDULER = SchedulerConfig()
DeadlineMode = Literal["after-people", "on-time"]  # core.config.DEADLINE_MODES


class SchedulerSettings(Schema):
    """``[scheduler]``: the policy's tunables; unset, ``SchedulerConfig``'s defaults."""

    max_affinity_wait: Annotated[float, Flag("--max-affinity-wait", "S"), Field(ge=0)] = (
        _SCHEDULER.max_affinity_wait
    )
    """docs/design.md §4.8: the longest the best job waits behind
    same-model work before its swap is forced (the starvation bound)."""
    chat_grace: Annotated[float, Flag("--chat-grace", "S"), Field(ge=0)] = _SCHEDULER.chat_grace
    """docs/design.md §4.8: no swap away within this many seconds of a chat."""
    chat_idle: Annotated[float, Flag("--chat-idle", "S"), Field(ge=0)] = _SCHEDULER.chat_idle
    """docs/design.md §4.8: while the chat page is open, no swap away until
    the last chat is this old."""
    grace_factor: Annotated[float, Flag("--grace-factor", "X"), Field(ge=0)] = (
        _SCHEDULER.grace_factor
    )
    """docs/design.md §4.8: the chat holds never idle the device, with work
    queued for another model, longer than this many measured swap times."""
    lost_bets: Annotated[float, Flag("--lost-bets", "SHARE"), Field(ge=0, lt=1)] = (
        _SCHEDULER.lost_bets
    )
    """docs/design.md §4.8 (bets): of a person's messages, the share that may
    wait for a swap made for background work while the chat page is open
    (0 makes no bet; larger serves other models' work sooner)."""
    deadlines: Annotated[DeadlineMode, Flag("--deadlines", "MODE")] = "after-people"
    """docs/design.md §4.8 (deadlines on time): ``after-people`` (overdue work on
    another model waits for a person's idle gap) or ``on-time`` (work due
    within ``grace_factor`` swaps presses: it swaps in as soon as no person's
    job waits and the latency guard does not cut it, so it is done by its
    deadline; a person may wait for it, up to ``grace_factor`` swaps, and the
    swap back)."""
    slice: Annotated[float, Flag("--slice", "S"), Field(gt=0)] = _SCHEDULER.slice
    """docs/design.md §4.6: seconds a pool job runs before it yields to an
    eligible producer with an earlier virtual deadline."""
    pool_floor: Annotated[float, Flag("--pool-floor", "SHARE"), Field(ge=0, lt=1)] = (
        _SCHEDULER.pool_floor
    )
    """docs/design.md §4.5: overdue work never pushes a backlogged
    fair pool below this share of device time in a 300 s window."""
    idle_reset: Annotated[float, Flag("--idle-reset", "S"), Field(ge=0)] = _SCHEDULER.idle_reset
    """A producer absent this long is forgotten and rejoins the fair pool afresh."""
    cancel_grace: Annotated[float, Flag("--cancel-grace", "S"), Field(ge=0)] = (
        _SCHEDULER.cancel_grace
    )
    """Seconds a cancelled job may take to stop before it is reported stuck."""
    chat_slowdown: Annotated[float, Flag("--chat-slowdown", "X"), Field(ge=1)] = (
        _SCHEDULER.chat_slowdown
    )
    """docs/design.md §4.7 (chat latency guard): on a batched device, the batch
    around a person's sequence is cut so that its time per token stays within
    this factor of running alone (>= 1)."""
    weights: Mapping[str, Annotated[float, Field(ge=MIN_WEIGHT, le=MAX_WEIGHT)]] = Field(
        default_factory=dict
    )
    """Fair-pool weight per producer path (``{ "indexer" = 2.0 }``; unset: 1)."""
    class_weights: Mapping[str, Annotated[float, Field(ge=MIN_WEIGHT, le=MAX_WEIGHT)]] = Field(
        default_factory=dict
    )
    """Fair-pool weight per task class (``{ "nataraj" = 2.0 }``; unset: 1)."""
    journal_bytes_per_job: Annotated[int, Flag("--journal-bytes-per-job", "N"), Field(ge=0)] = (
        _SCHEDULER.journal_bytes_per_job
    )
    """docs/design.md §4.9: bytes of replay journal one job may keep."""
    journal_bytes_total: Annotated[int, Flag("--journal-bytes-total", "N"), Field(ge=0)] = (
        _SCHEDULER.journal_bytes_total
    )
    """docs/design.md §4.9: bytes of replay journal all jobs may keep."""
    decay_period: Annotated[float, Field(gt=0)] | None = None
    """Deprecated, no effect (the seed's vruntime halving; the EEVDF pool keeps no
    history to halve). Accepted so that older files still load; setting it warns."""
    default_classes: bool = True
    """Start from the default classes (chat, extract, nataraj, gana); false: only
    the ``[classes.NAME]`` tables."""

    def config(self) -> SchedulerConfig:
        return scheduler_config(self.model_dump(exclude={"default_classes"}, exclude_none=True))
