"""The policy's view of a job and of the foreground (pure data)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tierlm.core.classes import TaskClass

__all__ = ["NEVER", "Foreground", "Job", "Person", "Subject", "due_or_never"]

Subject = str | int
"""What a foreground or a job is about: a note id, a Gana id (docs/design.md §6.2)."""

Person = tuple[str, ...]
"""Whose turn a chat takes (docs/design.md §4.2): ``(who,)``,
or ``(who, name)`` for a person named under ``who`` (an API key), who shares
``who``'s turns."""


@dataclass(eq=False, slots=True)
class Job:
    """A unit of device work as the policy sees it.

    ``id`` is the submit order: FIFO tiers order by it, so a re-queued job, which
    keeps its id, goes back to the front of its tier (docs/design.md §4.9).
    ``submitted_at`` is the first submit, so waiting time survives re-queues
    (the ``max_affinity_wait`` starvation bound counts from it).
    """

    id: int
    task_class: TaskClass
    model_id: str
    producer: str
    subject: Subject | None
    deadline: float | None
    submitted_at: float
    person: Person = ()
    """Whose turns its chat takes (docs/design.md §4.2); empty: its producer's
    (``chat_person``). The gateway sets it from the API key, so that a client
    inventing producer ids takes no more turns than one person."""
    resumable: bool = True
    """A preemption loses nothing: a generation resumes, a closure job replays
    its journal. The shell clears it when the job's work drives the runner
    itself (``ctx.runner``): such a job starts over when preempted, so the
    pool's fairness never cuts it (docs/design.md §4.6)."""

    @property
    def class_name(self) -> str:
        return self.task_class.name

    @property
    def chat_person(self) -> Person:
        """The person whose turns its chat takes: ``person``, else its producer."""
        return self.person or (self.producer,)

    @property
    def due(self) -> float | None:
        """The deadline that orders overdue work: a deadline already past at
        submission counts as the submission time, so claiming "due long ago"
        buys no place ahead of work that really was due earlier
        (docs/design.md §4.5)."""
        if self.deadline is None:
            return None
        return max(self.deadline, self.submitted_at)

    def __repr__(self) -> str:
        return (
            f"<Job #{self.id} {self.class_name} model={self.model_id!r} producer={self.producer!r}>"
        )


NEVER = math.inf
"""The due time of work without a deadline, in every rule that orders or
presses by due time (EDF in T3, deadlines on time): after every real due
time, and never reached (docs/design.md §4.2, §4.8)."""


def due_or_never(job: Job | None) -> float:
    """A job's due time (``Job.due``); ``NEVER`` without a job or a deadline."""
    due = job.due if job is not None else None
    return NEVER if due is None else due


@dataclass(frozen=True, slots=True)
class Foreground:
    """The surface a person is looking at: a class, optionally one subject."""

    class_name: str
    subject: Subject | None = None

    def matches(self, job: Job) -> bool:
        """docs/design.md §4.1 (rule 2): same class, and no subject or the same subject."""
        return job.task_class.name == self.class_name and (
            self.subject is None or job.subject == self.subject
        )
