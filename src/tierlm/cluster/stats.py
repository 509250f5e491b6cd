"""A replica's routing stats as the ranking reads them (docs/distributed.md).

A replica (one tierlm on one device) exports a small versioned dict,
``GET /v1/scheduler/routing`` or ``tierlm.server.ops.routing.RoutingStats``:
counters read at once, no dispatch-order replay. ``View`` reads such a dict
defensively (a field missing or of the wrong type takes its neutral value, an
unknown version is stale) and adds the placements a router made since the
dict was taken (``placed``): until the next poll, those jobs are where the
router sent them, so two requests between polls do not both see one idle
replica as idle.

Pure: no clock, no I/O; imports nothing of tierlm.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_CHAT_CLASSES",
    "DEFAULT_RUN_S",
    "DEFAULT_SWAP_S",
    "STATS_VERSION",
    "Placement",
    "View",
]

STATS_VERSION = 1
"""``v`` of the dict this module reads; another version is treated as stale."""
# Until a replica has measured a swap, the seed's ~10 s (as the policy assumes,
# docs/design.md §4.8 (ski rental)).
DEFAULT_SWAP_S = 10.0
# A run's cost before one of its class was measured (Admission's 1 s floor).
DEFAULT_RUN_S = 1.0
DEFAULT_CHAT_CLASSES = ("chat",)


@dataclass(frozen=True, slots=True)
class Placement:
    """A request a router sent to ``replica`` at ``at`` (the stats' clock)."""

    replica: str
    model: str
    class_name: str
    at: float


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else default


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def _counts(value: Any) -> dict[str, int]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): _count(v) for k, v in value.items() if _count(v) > 0}


def _names(value: Any) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        return frozenset()
    return frozenset(item for item in value if isinstance(item, str))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(slots=True)
class View:
    """One replica's state: its stats, plus the placements made since."""

    name: str
    at: float | None
    """When the stats were taken; None: unreadable (stale)."""
    loaded_model: str | None = None
    swapping_to: str | None = None
    busy: bool = False
    slots: int = 1
    running: dict[str, int] = field(default_factory=dict)
    chat_queued: int = 0
    queued_by_model: dict[str, int] = field(default_factory=dict)
    queued_by_class: dict[str, int] = field(default_factory=dict)
    backlog_s: float = 0.0
    swap_s: float = DEFAULT_SWAP_S
    chat_run_s: float = DEFAULT_RUN_S
    run_s: dict[str, float] = field(default_factory=dict)
    chat_classes: frozenset[str] = frozenset(DEFAULT_CHAT_CLASSES)
    full: frozenset[str] = frozenset()
    draining: bool = False
    paused: bool = False

    @classmethod
    def of(
        cls, name: str, stats: Mapping[str, Any] | None, placed: Sequence[Placement] = ()
    ) -> View:
        if not isinstance(stats, Mapping) or stats.get("v") != STATS_VERSION:
            view = cls(name, None)
        else:
            at = stats.get("at")
            swap = stats.get("swap_s")
            run_s = stats.get("run_s")
            chat_classes = _names(stats.get("chat_classes"))
            view = cls(
                name,
                _number(at, -1.0) if at is not None else None,
                loaded_model=_text(stats.get("loaded_model")),
                swapping_to=_text(stats.get("swapping_to")),
                busy=stats.get("busy") is True,
                slots=max(1, _count(stats.get("slots"))),
                running=_counts(stats.get("running")),
                chat_queued=_count(stats.get("chat_queued")),
                queued_by_model=_counts(stats.get("queued_by_model")),
                queued_by_class=_counts(stats.get("queued_by_class")),
                backlog_s=_number(stats.get("backlog_s"), 0.0),
                swap_s=_number(swap, DEFAULT_SWAP_S) if swap is not None else DEFAULT_SWAP_S,
                chat_run_s=_number(stats.get("chat_run_s"), DEFAULT_RUN_S),
                run_s=(
                    {str(k): _number(v, DEFAULT_RUN_S) for k, v in run_s.items()}
                    if isinstance(run_s, Mapping)
                    else {}
                ),
                chat_classes=chat_classes or frozenset(DEFAULT_CHAT_CLASSES),
                full=_names(stats.get("full")),
                draining=stats.get("draining") is True,
                paused=stats.get("paused") is True,
            )
            if view.at is not None and view.at < 0:
                view.at = None
        for placement in placed:
            view.add(placement.model, placement.class_name)
        return view

    # -- what the ranking asks --------------------------------------------------

    @property
    def model(self) -> str | None:
        """The model the device holds, or is loading: what its next job runs on."""
        return self.swapping_to if self.swapping_to is not None else self.loaded_model

    @property
    def queued(self) -> int:
        return sum(self.queued_by_class.values())

    @property
    def idle(self) -> bool:
        return not self.busy and self.queued == 0

    def is_chat(self, class_name: str) -> bool:
        return class_name in self.chat_classes

    def fresh(self, now: float, stale_after: float) -> bool:
        return self.at is not None and not self.paused and now - self.at <= stale_after

    def run_of(self, class_name: str) -> float:
        if self.is_chat(class_name):
            return self.chat_run_s
        run = self.run_s.get(class_name)
        if run is not None:
            return run
        return sum(self.run_s.values()) / len(self.run_s) if self.run_s else DEFAULT_RUN_S

    def swap_cost(self, model: str) -> float:
        """Seconds of swapping before a job of ``model`` can run here: none if
        the device holds it, the swap under way (counted whole: its progress is
        not reported) if it is loading it, else a swap, after any under way."""
        if self.model == model:
            return self.swap_s if self.swapping_to == model else 0.0
        return self.swap_s * (2 if self.swapping_to is not None else 1)

    def chats_ahead(self) -> int:
        """Chats that hold or wait for this device before a new one: chat
        preempts everything else, never another chat (docs/design.md §4)."""
        running = sum(n for c, n in self.running.items() if self.is_chat(c))
        return max(0, self.chat_queued + running - (self.slots - 1))

    def add(self, model: str, class_name: str) -> None:
        """Count a job placed here since the stats were taken."""
        if not self.busy and self.model != model:
            self.swapping_to = model  # an idle device starts on it at once
            self.backlog_s += self.swap_s
        self.busy = True
        self.queued_by_model[model] = self.queued_by_model.get(model, 0) + 1
        self.queued_by_class[class_name] = self.queued_by_class.get(class_name, 0) + 1
        if self.is_chat(class_name):
            self.chat_queued += 1
        self.backlog_s += self.run_of(class_name)
