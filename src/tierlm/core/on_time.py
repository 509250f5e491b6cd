"""Deadlines on time (docs/design.md §4.8), the operator's opt-in
(``SchedulerConfig.deadlines = "on-time"``): overdue work on another model
gets its swap as soon as no person's job is queued (``affinity.choose``),
and once away it finishes before the device goes back for a person, within a
bound. Pure functions of the jobs and the time.
"""

from __future__ import annotations

from tierlm.core.jobs import Job

__all__ = ["due_first", "finish_until"]


def due_first(current: tuple[int, Job] | None, candidate: tuple[int, Job]) -> tuple[int, Job]:
    """Of two overdue (id, job) candidates, the one due first (then submitted
    first): EDF among the models waiting for a swap."""
    if current is None:
        return candidate
    return min(current, candidate, key=lambda pair: (pair[1].due or 0.0, pair[1].id))


def finish_until(running: Job, person: Job, now: float, bound: float) -> float | None:
    """Until when the overdue ``running`` job keeps the device from
    ``person``'s job, which needs another model; None: stop it now.

    *Why:* cut, it needs a second excursion: two more swaps, which a person's
    next message may meet too (on the code trace one job was cut six times,
    six messages waiting for the swap back). So the person waits for it, but
    at most ``bound`` seconds (``grace_factor`` swaps) after their job came,
    then the swap back. Overdue whatever its loan now: the loan was open when
    it got its swap, and its own run closes it, as any run does."""
    due = running.due
    if due is None or now < due or person.model_id == running.model_id:
        return None
    until = person.submitted_at + bound
    return until if now < until else None
