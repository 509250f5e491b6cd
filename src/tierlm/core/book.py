"""Every queued job, indexed three ways (docs/design.md §4, §6.9).

- by id, with the version of its current stay (lazy deletion everywhere);
- per model and class (``ModelQueue``): submit order for the FIFO tiers and
  the foreground, due time for T3 classes;
- in the fair pool (``FairPool``), for fair classes: EEVDF per path level,
  and overdue jobs as loans.

It also applies what time alone changes: a fair job whose deadline passes
becomes overdue (docs/design.md §4.1 (rule 4), §6.7), and producers away longer
than ``idle_reset`` are forgotten.
"""

from __future__ import annotations

import heapq

from tierlm.core.classes import T0
from tierlm.core.fairness import FairPool
from tierlm.core.jobs import Job, Person
from tierlm.core.persons_in_turn import ChatTurns
from tierlm.core.queues import Live, ModelQueue

__all__ = ["JobBook"]


class JobBook:
    """The queue's jobs and indexes (see the module doc)."""

    __slots__ = (
        "_pending",
        "_version",
        "_waiting",
        "chats",
        "fair",
        "fresh",
        "jobs",
        "live",
        "models",
        "overdue",
        "turns",
    )

    def __init__(self, fair: FairPool) -> None:
        self.fair = fair
        self.turns = ChatTurns()
        """Persons' last turns (docs/design.md §4.2)."""
        self.jobs: dict[int, Job] = {}
        self.live: Live = {}
        self._version = 0
        self.models: dict[str, ModelQueue] = {}
        self._pending: list[tuple[float, int, int]] = []  # fair jobs due later
        self.overdue: set[int] = set()
        """Queued fair jobs past their deadline (loans, if their producer may borrow)."""
        self.fresh = 0
        """Queued fair jobs not overdue: the pool proper, which the floor protects."""
        self.chats = 0
        """Queued persons' jobs (T0), counted: O(1) for the guard's relief (§4.7)."""
        self._waiting: dict[Person, int] = {}
        """Per person with a chat queued, how many (``people_waiting``)."""

    def __len__(self) -> int:
        return len(self.jobs)

    def people_waiting(self) -> set[Person]:
        """The persons with a chat queued (docs/design.md §4.7 (persons in turn
        on slots)): counted as they come and go, not found among every queued
        job (a device full of chats asked it at every decision)."""
        return set(self._waiting)

    def add(self, job: Job, now: float) -> None:
        self._version += 1
        version = self._version
        self.jobs[job.id] = job
        self.live[job.id] = version
        model = self.models.get(job.model_id)
        if model is None:
            model = self.models[job.model_id] = ModelQueue(self.live, self.turns)
        model.queue_for(job.task_class).add(job, version)
        model.count += 1
        model.changed()
        if job.task_class.tier == T0:
            self.chats += 1
            person = job.chat_person
            self._waiting[person] = self._waiting.get(person, 0) + 1
        if job.task_class.fair:
            overdue = job.deadline is not None and now >= job.deadline
            self.fair.enqueue(job, now, overdue)
            if overdue:
                self.overdue.add(job.id)
            else:
                self.fresh += 1
                if job.deadline is not None:
                    heapq.heappush(self._pending, (job.deadline, job.id, version))

    def remove(self, job: Job, now: float, *, to_run: bool) -> None:
        """``job`` leaves the queue: to run (its producer stays present) or for good."""
        del self.live[job.id]
        del self.jobs[job.id]
        model = self.models[job.model_id]
        model.by_class[job.task_class.name].removed(job)
        model.count -= 1
        model.asked = None  # ``ModelQueue.changed``, inlined
        if job.task_class.tier == T0:
            self.chats -= 1
            person = job.chat_person
            left = self._waiting[person] - 1
            if left:
                self._waiting[person] = left
            else:
                del self._waiting[person]
        if model.count == 0:
            del self.models[job.model_id]
        if job.task_class.fair:
            self.fair.dequeue(job, now, to_run=to_run)
            if job.id in self.overdue:
                self.overdue.discard(job.id)
            else:
                self.fresh -= 1

    def advance(self, now: float) -> None:
        """Apply what time alone changed by ``now``."""
        self.fair.forget_idle(now)
        pending = self._pending
        while pending and pending[0][0] <= now:
            _deadline, job_id, version = heapq.heappop(pending)
            if self.live.get(job_id) == version:
                self.fair.mark_overdue(self.jobs[job_id])
                self.overdue.add(job_id)
                self.fresh -= 1

    def deadline_jobs(self, until: float) -> tuple[list[Job], float | None]:
        """The queued fair jobs with a deadline by ``until``, and every overdue
        one (loan open or not), for deadlines on time (docs/design.md §4.8 (deadlines on time));
        and the earliest deadline left out (None: none).
        Walks only the heap's entries due by ``until``, a child never being
        due before its parent; the overdue ones are usually few."""
        pending, live, jobs = self._pending, self.live, self.jobs
        found = [jobs[job_id] for job_id in self.overdue]
        later: float | None = None
        stack = [0] if pending else []
        while stack:
            i = stack.pop()
            deadline, job_id, version = pending[i]
            if deadline > until:
                later = deadline if later is None else min(later, deadline)
                continue
            stack.extend(c for c in (2 * i + 1, 2 * i + 2) if c < len(pending))
            if live.get(job_id) == version:
                found.append(jobs[job_id])
        return found, later

    def next_deadline(self) -> float | None:
        """When the next queued fair job becomes overdue."""
        pending = self._pending
        while pending and self.live.get(pending[0][1]) != pending[0][2]:
            heapq.heappop(pending)
        return pending[0][0] if pending else None
