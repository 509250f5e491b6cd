"""The shell's side of a job (``Entry``), how a run ended (``Outcome``), and
the one table of a job's state transitions (h11's rule: every change of a
job's state goes through ``transition``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tierlm.core.classes import TaskClass
from tierlm.core.jobs import Job, Person
from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.shell.handles import JobContext, JobHandle, JobState
from tierlm.shell.journal import Journal

__all__ = [
    "TRANSITIONS",
    "Entry",
    "Outcome",
    "Raised",
    "Reclass",
    "Returned",
    "Stopped",
    "transition",
]

T = TypeVar("T")

# One table of a job's state transitions (h11's rule): from, to.
TRANSITIONS = {
    (JobState.QUEUED, JobState.RUNNING),
    (JobState.RUNNING, JobState.QUEUED),  # re-queued after a preemption
    (JobState.RUNNING, JobState.DONE),
    (JobState.RUNNING, JobState.FAILED),
    (JobState.RUNNING, JobState.CANCELLED),
    (JobState.QUEUED, JobState.CANCELLED),  # cancelled, or closed, while queued
}


def transition(entry: Entry[Any], state: JobState) -> None:
    handle = entry.handle
    if (handle.state, state) not in TRANSITIONS:
        raise AssertionError(f"job #{entry.job.id}: {handle.state.value} -> {state.value}")
    handle.state = state


@dataclass(frozen=True, slots=True)
class Reclass:
    """What a job is served as from now (``Scheduler.reclass``)."""

    task_class: TaskClass
    producer: str
    person: Person

    def apply(self, job: Job) -> None:
        """Only while the policy holds no record of the job (out of its queue,
        not running): its records are keyed by these fields."""
        job.task_class, job.producer, job.person = self.task_class, self.producer, self.person


@dataclass(eq=False, slots=True)
class Entry(Generic[T]):
    """The shell's side of a job: its work, future, handle, journal and current run."""

    job: Job
    work: Callable[[JobContext], Awaitable[T]]
    future: asyncio.Future[T]
    handle: JobHandle[T]
    journal: Journal
    token: CancelToken | None = None
    task: asyncio.Task[None] | None = None
    attempts: int = 0
    preemptions: int = 0
    crashes: int = 0
    """Crashes of the device (``DeviceCrashed``) it was present at: at the
    second it fails (``shell/survivors.py``)."""
    cancel_requested: CancelReason | None = None
    started_at: float | None = None
    context: JobContext | None = None
    """The current run's context, once its work began (after any swap)."""
    reclass: Reclass | None = None
    """Served as another from its next run on (``Scheduler.reclass``), applied
    when this run ends."""


# How a run ended: the shell's typed results.
@dataclass(frozen=True, slots=True)
class Returned:
    value: Any


@dataclass(frozen=True, slots=True)
class Raised:
    error: Exception


@dataclass(frozen=True, slots=True)
class Stopped:
    reason: CancelReason


Outcome = Returned | Raised | Stopped
