"""Deadlines on time (docs/design.md §4.8), the operator's opt-in
(``SchedulerConfig.deadlines = "on-time"``). Work with a deadline becomes
*pressing* ``grace_factor`` swaps before it is due (its lead: the swap, the
run and the swap back fit, so "on time" means done by the deadline, not
started at it). Pressing work

- on another model gets its swap as soon as no person's job is queued
  (``affinity.choose``, from ``model_scan``'s candidates);
- once away from the person's model, finishes before the device goes back
  for a person, within a bound (``OnTime.finish_until``);
- is not cut from the batch by the chat latency guard (``OnTime.shielded``,
  ``slots.plan``).

And a swap made for background work holds until the job it was made for has
run, or a person's work needs the device (``OnTime.holds_model``): pressing
work on one model and work at the starvation bound on another took the
device from each other at every slice's end, a swap each time.

The default, ``"after-people"``, is ``AfterPeople``: the same questions,
answered "nothing presses", so the policy asks either mode the same way
(``deadline_mode``). Pure functions of the jobs and the time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from tierlm.core.book import JobBook
from tierlm.core.classes import T3
from tierlm.core.config import SchedulerConfig
from tierlm.core.jobs import NEVER, Job, due_or_never

__all__ = ["AfterPeople", "DeadlineMode", "OnTime", "Pressing", "deadline_mode", "due_first"]


def due_first(current: tuple[int, Job] | None, candidate: tuple[int, Job]) -> tuple[int, Job]:
    """Of two pressing (id, job) candidates, the one due first (then submitted
    first): EDF among the models waiting for a swap. No deadline is
    ``NEVER``, as everywhere: read as 0, work never due jumped overdue work."""
    if current is None:
        return candidate
    return min(current, candidate, key=lambda pair: (due_or_never(pair[1]), pair[1].id))


@dataclass(slots=True)
class Pressing:
    """What presses at one decision (``OnTime.scan``)."""

    first: dict[str, Job] = field(default_factory=dict)
    """Per model, its pressing job due first."""
    next_at: float | None = None
    """When a job not yet pressing may start to (a wake-up; None: none)."""


class DeadlineMode(Protocol):
    """What the policy asks of its deadline mode (``SchedulerConfig.deadlines``)."""

    @property
    def punctual(self) -> bool:
        """False: nothing ever presses (``AfterPeople``), every answer below
        is "no", and a decision need not ask them (docs/design.md §4.8)."""

    def overdue(self, rank: int, job: Job) -> bool:
        """Whether a model's best job, ranked ``rank``, is overdue work the
        mode swaps for (``model_scan``)."""

    def presses(self, rank: int, job: Job, now: float) -> bool:
        """Whether ``job`` is overdue or pressing (``affinity``)."""

    def scan(
        self, book: JobBook, now: float, skip: frozenset[str], running: Job | None
    ) -> Pressing:
        """Each model's pressing work due first, and when the next presses."""

    def shielded(self, job: Job, now: float) -> bool:
        """Background the chat latency guard neither cuts nor keeps out."""

    def finish_until(self, running: Job, person: Job, now: float) -> float | None:
        """Until when ``running`` keeps the device from ``person``'s job."""

    def swapped_for(self, job: Job) -> None:
        """Background ``job`` starts, and needed a swap (``TieredPolicy``)."""

    def holds_model(
        self, loaded_model: str | None, running: Mapping[int, Job], queued: Mapping[int, Job]
    ) -> bool:
        """Whether the device stays on ``loaded_model`` for background work:
        the job a swap was made for has not run yet (``Affinity.choose``)."""


@dataclass(frozen=True, slots=True)
class AfterPeople:
    """The default (``"after-people"``, the seed's order): nothing presses;
    overdue work waits for a person's idle gap like any other (docs/design.md
    §4.8)."""

    punctual: ClassVar[bool] = False

    def overdue(self, rank: int, job: Job) -> bool:
        return False

    def presses(self, rank: int, job: Job, now: float) -> bool:
        return False

    def scan(
        self, book: JobBook, now: float, skip: frozenset[str], running: Job | None
    ) -> Pressing:
        return _NOTHING_PRESSES

    def shielded(self, job: Job, now: float) -> bool:
        return False

    def finish_until(self, running: Job, person: Job, now: float) -> float | None:
        return None

    def swapped_for(self, job: Job) -> None:
        return None

    def holds_model(
        self, loaded_model: str | None, running: Mapping[int, Job], queued: Mapping[int, Job]
    ) -> bool:
        return False


_NOTHING_PRESSES = Pressing()
"""``AfterPeople.scan``'s answer, shared (read only)."""


def deadline_mode(config: SchedulerConfig, swap_estimate: Callable[[str], float]) -> DeadlineMode:
    """The rules for ``config.deadlines``."""
    if config.deadlines == "on-time":
        return OnTime(config.grace_factor, swap_estimate)
    return AfterPeople()


@dataclass(slots=True)
class OnTime:
    """When deadline work presses, what it may then take from a person, and
    the swap it holds to (its only state: the job the last swap was made
    for, and when a person's message first met each pressing job away)."""

    lead_swaps: float
    """How many swaps before its due time work presses: ``grace_factor`` (3),
    the same unit a person's wait for it is bounded in. With the seed's 10 s
    swaps, 30 s: the swap there, a cron job of ~10-20 s, the swap back.
    *Why a lead:* promoted only when due, every job that needed a swap was
    late by at least the swap and its run (on the code trace up to 126-140 s
    at 8 slots, FIFO's 53-67 s; on time now 32-53 s, docs/design.md §8)."""
    swap_estimate: Callable[[str], float]
    """The expected swap to a model (``SwapHolds.swap_estimate``)."""
    swap_for: Job | None = None
    """The background job the last swap was made for (``holds_model``)."""
    met: dict[int, float] = field(default_factory=dict)
    """Per pressing job running away from a person's model, when the first
    person's message that waits for it came (``finish_until``)."""
    punctual: ClassVar[bool] = True

    def lead(self, model_id: str) -> float:
        """How long before its due time work on ``model_id`` presses."""
        return self.lead_swaps * self.swap_estimate(model_id)

    def presses_at(self, job: Job) -> float:
        """When ``job`` starts to press; ``NEVER`` without a deadline."""
        due = due_or_never(job)
        return NEVER if due == NEVER else due - self.lead(job.model_id)

    def pressing(self, job: Job, now: float) -> bool:
        """Whether ``job`` presses now. Neither its producer's loan (its
        eligibility, docs/design.md §4.5) nor the pool's floor is asked: the
        operator chose punctual deadlines, and honouring the loan left cron
        94-169 s late on the code trace at 8 slots and 62-118 s on conv
        (FIFO's: 53-84 s), the gana class's eligibility flipping as its
        producers came and went."""
        return now >= self.presses_at(job)

    def overdue(self, rank: int, job: Job) -> bool:
        """Overdue work (T3) with a due time: never due is never overdue."""
        return rank == T3 and due_or_never(job) != NEVER

    def presses(self, rank: int, job: Job, now: float) -> bool:
        """Whether ``job``, ranked ``rank``, is work this mode swaps for:
        overdue (T3) with a due time, or pressing. Work never due (an
        operator's tier-3 class without a deadline) never presses: read as
        due at 0 it jumped overdue work and took its swap at once."""
        return self.overdue(rank, job) or self.pressing(job, now)

    def scan(
        self,
        book: JobBook,
        now: float,
        skip: frozenset[str],
        running: Job | None,
    ) -> Pressing:
        """Each model's pressing work due first, queued or ``running`` (the
        running job a decision asks about), and when the next presses. Any
        queued job, not only each model's best: a pool job presses whatever
        its place in the pool's order (a backlog ahead of it on its model
        would have hidden it, lead and all)."""
        leads = {model: self.lead(model) for model in book.models}
        jobs, later = book.deadline_jobs(now + max(leads.values(), default=0.0))
        if running is not None and due_or_never(running) != NEVER:
            jobs.append(running)
        pressing = Pressing()
        if later is not None:  # nothing due sooner was left out: a lower bound
            pressing.next_at = later - max(leads.values(), default=0.0)
        for job in jobs:
            at = self.presses_at(job)
            if at == NEVER or job.class_name in skip:
                continue
            if now < at:
                if pressing.next_at is None or at < pressing.next_at:
                    pressing.next_at = at
                continue
            first = pressing.first.get(job.model_id)
            if first is None or (due_or_never(job), job.id) < (due_or_never(first), first.id):
                pressing.first[job.model_id] = job
        return pressing

    def shielded(self, job: Job, now: float) -> bool:
        """Pressing work stays in the batch beside a person's sequence (the
        chat latency guard, docs/design.md §4.7, cuts only other background):
        cut through a person's burst of long prompts, cron on their own model
        ran late; without this the code trace's worst lateness at 8 slots was
        37-142 s on seeds 1-5 (32-53 s with it)."""
        return self.pressing(job, now)

    def finish_until(self, running: Job, person: Job, now: float) -> float | None:
        """Until when the pressing ``running`` job keeps the device from
        ``person``'s job, which needs another model; None: stop it now.

        *Why:* cut, it needs a second excursion: two more swaps, which a
        person's next message may meet too (on the code trace one job was cut
        six times, six messages waiting for the swap back). So the person
        waits for it, but at most ``grace_factor`` swaps after the first
        message that met it came, then the swap back: counted from the best
        person's message, a second person writing meanwhile (their turn comes
        first) made the first wait 65 s against the 40 s bound
        (docs/design.md §4.8 (on time)). Work with a deadline that a swap was
        made for before it pressed (the default's rules, in a gap) finishes
        so too: cut as its swap ended, it had done nothing and cost two more
        swaps (the conversation trace at 8 slots: 8 of 48 cron jobs, 112
        swaps where FIFO made 96)."""
        if person.model_id == running.model_id:
            return None
        swapped_for = self.swap_for is running and due_or_never(running) != NEVER
        if not (swapped_for or self.pressing(running, now)):
            return None
        lead, met = self.lead(running.model_id), self.met
        since = min(met.pop(running.id, person.submitted_at), person.submitted_at)
        for job_id in [i for i, at in met.items() if at + lead <= now]:
            del met[job_id]  # its bound has passed: the job was cut, or it ended
        until = since + lead
        if now >= until:
            return None
        met[running.id] = since
        return until

    def swapped_for(self, job: Job) -> None:
        """A swap was made for ``job`` (background): the device holds its
        model until it has run (``holds_model``)."""
        self.swap_for = job

    def holds_model(
        self, loaded_model: str | None, running: Mapping[int, Job], queued: Mapping[int, Job]
    ) -> bool:
        """Whether the job the last swap was made for, on ``loaded_model``,
        has yet to run: queued, or running (docs/design.md §4.8 (on time): a
        swap holds until the work it was for ran, or a person arrives; the
        person's work outranks it in ``Affinity.choose``). Without it a
        pressing cron job on m1 and a job at the starvation bound on m2 took
        the device from each other at every slice's end: 91 swaps in 30 min
        on one slot and cron 842 s late, FIFO+resume 58 swaps and 65 s
        (``tierlm.sim.workloads.on_time_cases``)."""
        job = self.swap_for
        if job is None:
            return False
        if job.id not in running and job.id not in queued:
            self.swap_for = None  # it ran (or its caller cancelled it)
            return False
        return job.model_id == loaded_model  # else a person's swap came first
