"""The best candidate of each model, for affinity and swaps (docs/design.md
§4.8): the best overall (B), the loaded model's, and among the models not
loaded the longest-waiting one's (the starvation bound) and, with deadlines
on time, the pressing one due first (``core/on_time``). One pass over the
models a decision sees; hot path, plain ints."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from tierlm.core.book import JobBook
from tierlm.core.classes import T3
from tierlm.core.jobs import Foreground, Job
from tierlm.core.on_time import DeadlineMode, due_first
from tierlm.core.pool_pick import PoolPick
from tierlm.core.queues import Candidate, ModelQueue

__all__ = ["ModelScan", "scan_models"]


class ModelScan(NamedTuple):
    best: Candidate | None = None
    """The best job overall (B)."""
    best_loaded: Candidate | None = None
    """The best job on the loaded model."""
    oldest: tuple[int, Job] | None = None
    """Of the best jobs of the models not loaded, the one submitted first."""
    overdue: tuple[int, Job] | None = None
    """With deadlines on time: of the other models' jobs that are overdue
    (T3 with a due time: never due is never overdue) or pressing, any place
    in their queue, the one due first."""
    presses_at: float | None = None
    """With deadlines on time: when a job not yet pressing may start to (a
    wake-up)."""
    loaded_pressing: Job | None = None
    """With deadlines on time: the loaded model's pressing job due first,
    queued or the running one asked about (``OnTime.scan``)."""


def scan_models(
    now: float,
    loaded_model: str | None,
    skip: frozenset[str],
    foreground: Foreground | None,
    floor_active: bool,
    t4: bool,
    book: JobBook,
    pool_pick: PoolPick,
    deadlines: DeadlineMode,
    running: Job | None = None,
    mine: Candidate | None = None,
    in_pool: Job | None = None,
) -> ModelScan:
    """One pass over the models a pick sees (the module doc): at ``now``, on
    a device holding ``loaded_model``, with ``skip`` the classes over their
    budget (docs/design.md §4.3), ``floor_active``: the pool owed its floor
    (overdue work ranks after it, §4.5), ``t4``: the pool's own order counts
    (§4.4). ``running``: the running job taking part in the pick (§4.6: best
    = pick(queue + running)); ``mine``: its candidate outside the pool's own
    order; ``in_pool``: it, when the pool compares it along its path."""
    best: Candidate | None = None
    best_loaded: Candidate | None = None
    oldest: tuple[int, Job] | None = None
    overdue: tuple[int, Job] | None = None
    queues, jobs = book.models, book.jobs
    models: Iterable[tuple[str, ModelQueue | None]] = queues.items()
    if running is not None and running.model_id not in queues:
        models = [*queues.items(), (running.model_id, None)]
    # Without deadlines on time nothing presses: not asked, per model or after.
    punctual = deadlines.punctual
    # What ``ModelQueue.best``'s parts are found for, the same for every
    # model: compared here, found anew only for a queue that changed; the
    # skipped classes applied to them inline (``best_of``).
    asked = (foreground, floor_active, book.turns.latest)
    for model_id, model_queue in models:
        if model_queue is None:
            candidate = None
        else:
            if model_queue.asked == asked:
                candidate, named = model_queue.parts
            else:
                candidate, named = model_queue.find_parts(foreground, floor_active, asked)
            for name, found in named:
                if name not in skip and (candidate is None or found < candidate):
                    candidate = found
        if candidate is None or candidate[0] >= T3:  # else the pool cannot win here
            competing = in_pool if in_pool is not None and in_pool.model_id == model_id else None
            pool = pool_pick.best(model_id, skip, competing, t4)
            if pool is not None and (candidate is None or pool < candidate):
                candidate = pool
        if (
            mine is not None
            and running is not None
            and running.model_id == model_id
            and (candidate is None or mine < candidate)
        ):
            candidate = mine
        if candidate is None:
            continue
        if best is None or candidate < best:
            best = candidate
        if model_id == loaded_model:
            best_loaded = candidate
            continue
        job_id = candidate[2]  # its job: queued, or the running one (inlined: a hot loop)
        job = running if running is not None and running.id == job_id else jobs[job_id]
        if oldest is None or job.submitted_at < oldest[1].submitted_at:
            oldest = (job_id, job)
        if punctual and deadlines.overdue(candidate[0], job):
            overdue = due_first(overdue, (job_id, job))
    if not punctual:
        return ModelScan(best, best_loaded, oldest, overdue)
    pressing = deadlines.scan(book, now, skip, running)
    loaded_pressing: Job | None = None
    for model_id, job in pressing.first.items():
        if model_id == loaded_model:
            loaded_pressing = job
        else:
            overdue = due_first(overdue, (job.id, job))
    return ModelScan(best, best_loaded, oldest, overdue, pressing.next_at, loaded_pressing)
