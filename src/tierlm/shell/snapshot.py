"""A point-in-time view of the scheduler (docs/design.md §2.6).

The events it emits are in ``tierlm.shell.events``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tierlm.core.jobs import Foreground, Subject

__all__ = ["JobInfo", "SchedulerSnapshot", "SchedulerStats"]


@dataclass(frozen=True, slots=True)
class JobInfo:
    id: int
    class_name: str
    model_id: str
    producer: str
    subject: Subject | None
    deadline: float | None
    tier: int
    state: str
    submitted_at: float
    waited: float
    """Seconds since first submitted."""
    preemptions: int
    position: int | None = None
    """A queued job's place in the order the policy would dispatch the queue
    if the device freed now (1 runs next; ``Policy.queue_order``)."""


@dataclass(slots=True)
class SchedulerStats:
    """Running counters (never reset)."""

    submitted: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    preemptions: int = 0
    requeues: int = 0
    swaps: int = 0
    swap_seconds: float = 0.0
    stuck: int = 0


@dataclass(frozen=True, slots=True)
class SchedulerSnapshot:
    """What ``Scheduler.snapshot()`` returns (docs/design.md §2)."""

    now: float
    running: JobInfo | None
    running_since: float | None
    swapping_to: str | None
    loaded_model: str | None
    queued: dict[int, list[JobInfo]]
    """Queued jobs per effective tier (0..4), each tier in dispatch order
    (``JobInfo.position``: the order across tiers, affinity included)."""
    foreground: Foreground | None
    paused: bool
    closed: bool
    vruntime: dict[str, float]
    budget_share: dict[str, float]
    budget_cap: dict[str, float]
    stats: SchedulerStats
    stuck: list[JobInfo]
    """Jobs that did not stop within ``cancel_grace`` after a cancel."""
    policy: str
    running_jobs: list[JobInfo] = field(default_factory=list)
    """Every job holding a slot, best-ranked first (``running`` is the first)."""
    slots: int = 1
    """Sequences the device decodes at once (``Runner.slots``)."""
    journal_bytes: int = 0
    """Memory the closure jobs' journals hold (docs/design.md §4.9; bounded by
    ``SchedulerConfig.journal_bytes_total``)."""

    @property
    def queue_depth(self) -> int:
        return sum(len(jobs) for jobs in self.queued.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (tiers become string keys)."""
        data = asdict(self)
        data["queued"] = {str(tier): jobs for tier, jobs in data["queued"].items()}
        data["queue_depth"] = self.queue_depth
        return data
