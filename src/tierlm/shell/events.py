"""What the scheduler tells its listeners: one frozen dataclass per kind of event.

Modelled on h11's ``_events.py``: an event is a small immutable value whose type
says what happened and whose fields carry exactly what a listener needs, so a
listener dispatches on the type (``isinstance`` or ``match``) and reads typed
fields, never a string-keyed dict (docs/design.md §2.5).

Every event has ``time``, on the scheduler's clock (``Scheduler.now()``). The
events about one job carry it in ``job``. Two base classes group the ends of a
run, which most listeners treat alike::

    JobEvent
      JobSubmitted, JobStarted, SwapStarted, SwapFinished, Preempting, JobStuck
      RunEnded           the job left the device
        Requeued         ... and went back to the queue (preempted)
        JobEnded         ... for good
          JobCompleted, JobFailed, JobCancelled

``RunEnded.outcome`` names how a run ended ("completed", "failed",
"cancelled", "requeued"): the word records and metrics use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tierlm.core.jobs import Foreground, Job
from tierlm.runners.cancellation import CancelReason

__all__ = [
    "Event",
    "ForegroundChanged",
    "JobCancelled",
    "JobCompleted",
    "JobEnded",
    "JobEvent",
    "JobFailed",
    "JobStarted",
    "JobStuck",
    "JobSubmitted",
    "ModelReturned",
    "Paused",
    "Preempting",
    "Requeued",
    "Resumed",
    "RunEnded",
    "SchedulerEvent",
    "SwapFinished",
    "SwapStarted",
]


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened, at ``time`` on the scheduler's clock."""

    time: float


@dataclass(frozen=True, slots=True)
class JobEvent(Event):
    """Something that happened to ``job``."""

    job: Job


@dataclass(frozen=True, slots=True)
class JobSubmitted(JobEvent):
    """The job entered the queue (``Scheduler.submit``)."""


@dataclass(frozen=True, slots=True)
class JobStarted(JobEvent):
    """The job was dispatched; a swap to its model, if needed, comes next."""

    attempt: int
    """1 on the first run, 2 after one preemption, and so on."""


@dataclass(frozen=True, slots=True)
class SwapStarted(JobEvent):
    """The device started loading ``job.model_id`` for ``job`` (not interruptible)."""

    previous: str | None
    """The model it held before (None: nothing loaded)."""


@dataclass(frozen=True, slots=True)
class SwapFinished(JobEvent):
    """The device holds ``job.model_id`` now."""

    previous: str | None
    seconds: float
    """How long the swap took."""


@dataclass(frozen=True, slots=True)
class Preempting(JobEvent):
    """The running job was told to stop at its next token boundary (docs/design.md §4).

    ``reason`` is the kind: ``YIELD`` (fairness: a prompt evaluation under way
    finishes first) or ``PREEMPTED`` (a person is waiting). A yield that a
    person's preemption then cuts short is one preemption, reported once."""

    reason: CancelReason = CancelReason.PREEMPTED


@dataclass(frozen=True, slots=True)
class JobStuck(JobEvent):
    """A cancelled job did not stop within ``cancel_grace``; its task is cancelled."""


@dataclass(frozen=True, slots=True)
class RunEnded(JobEvent):
    """The job left the device (or the queue, for a queued job cancelled)."""

    outcome: ClassVar[str]


@dataclass(frozen=True, slots=True)
class Requeued(RunEnded):
    """The preempted job went back to the front of its tier (docs/design.md §4.9)."""

    outcome: ClassVar[str] = "requeued"


@dataclass(frozen=True, slots=True)
class JobEnded(RunEnded):
    """The job ended for good: its handle is resolved."""


@dataclass(frozen=True, slots=True)
class JobCompleted(JobEnded):
    outcome: ClassVar[str] = "completed"


@dataclass(frozen=True, slots=True)
class JobFailed(JobEnded):
    """Its ``work`` raised (or its model failed to load): it fails only this job."""

    outcome: ClassVar[str] = "failed"
    error: Exception


@dataclass(frozen=True, slots=True)
class JobCancelled(JobEnded):
    """Its caller cancelled it, the scheduler shut down, or it was preempted and
    its class is not re-queued (a chat)."""

    outcome: ClassVar[str] = "cancelled"
    reason: CancelReason


@dataclass(frozen=True, slots=True)
class ForegroundChanged(Event):
    """The surface the person looks at changed (None: no AI surface open)."""

    foreground: Foreground | None


@dataclass(frozen=True, slots=True)
class ModelReturned(Event):
    """The device went back, with no job, to the model a person may type on
    after an excursion to another (docs/design.md §4.8 (excursions))."""

    model_id: str
    previous: str | None
    seconds: float
    """How long the swap back took."""


@dataclass(frozen=True, slots=True)
class Paused(Event):
    """``Scheduler.pause()``: nothing new is dispatched (docs/design.md §4.10)."""


@dataclass(frozen=True, slots=True)
class Resumed(Event):
    """``Scheduler.resume()``: dispatching again."""


SchedulerEvent = (
    JobSubmitted
    | JobStarted
    | SwapStarted
    | SwapFinished
    | ModelReturned
    | Preempting
    | JobStuck
    | Requeued
    | JobCompleted
    | JobFailed
    | JobCancelled
    | ForegroundChanged
    | Paused
    | Resumed
)
"""Every event a listener receives (a closed union: ``match`` on it is checked)."""
