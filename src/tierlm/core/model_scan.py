"""The best candidate of each model, for affinity and swaps (docs/design.md
§4.8): the best overall (B), the loaded model's, and among the models not
loaded the longest-waiting one's (the starvation bound) and, with deadlines
on time, the pressing one due first (``core/on_time``). One pass over the
models a decision sees; hot path, plain ints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tierlm.core.book import JobBook
from tierlm.core.classes import T3
from tierlm.core.jobs import NEVER, Foreground, Job, due_or_never
from tierlm.core.on_time import OnTime, due_first
from tierlm.core.pool_pick import PoolPick
from tierlm.core.queues import Candidate

__all__ = ["ModelScan", "scan_models"]


@dataclass(slots=True)
class ModelScan:
    best: Candidate | None = None
    """The best job overall (B)."""
    best_loaded: Candidate | None = None
    """The best job on the loaded model."""
    oldest: tuple[int, Job] | None = None
    """Of the best jobs of the models not loaded, the one submitted first."""
    overdue: tuple[int, Job] | None = None
    """With ``on_time``: of the other models' jobs that are overdue (T3 with
    a due time: never due is never overdue) or pressing, any place in their
    queue, the one due first."""
    presses_at: float | None = None
    """With ``on_time``: when a job not yet pressing may start to (a wake-up)."""
    loaded_pressing: Job | None = None
    """With ``on_time``: the loaded model's pressing job due first, queued or
    the running one asked about (``OnTime.scan``)."""


def scan_models(
    book: JobBook,
    pool_pick: PoolPick,
    job_of: Callable[[int], Job],
    *,
    loaded_model: str | None,
    skip: frozenset[str],
    foreground: Foreground | None,
    floor_active: bool,
    running: Job | None,
    mine: Candidate | None,
    in_pool: Job | None,
    t4: bool,
    on_time: OnTime | None,
    now: float,
) -> ModelScan:
    """``running``: the running job taking part in the pick (its candidate
    ``mine``, or ``in_pool`` when the pool compares it along its path);
    ``t4``: the pool's own order counts (docs/design.md §4.4); ``on_time``:
    deadlines on time (docs/design.md §4.8), else None."""
    scan = ModelScan()
    queues = book.models
    models = list(queues)
    if running is not None and running.model_id not in queues:
        models.append(running.model_id)
    for model_id in models:
        model_queue = queues.get(model_id)
        candidate = (
            model_queue.best(skip, foreground, floor_active) if model_queue is not None else None
        )
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
        if scan.best is None or candidate < scan.best:
            scan.best = candidate
        if model_id == loaded_model:
            scan.best_loaded = candidate
            continue
        job = job_of(candidate[2])
        if scan.oldest is None or job.submitted_at < scan.oldest[1].submitted_at:
            scan.oldest = (candidate[2], job)
        if on_time is not None and candidate[0] == T3 and due_or_never(job) != NEVER:
            scan.overdue = due_first(scan.overdue, (candidate[2], job))
    if on_time is not None:
        pressing = on_time.scan(book, now, skip, running)
        scan.presses_at = pressing.next_at
        for model_id, job in pressing.first.items():
            if model_id == loaded_model:
                scan.loaded_pressing = job
            else:
                scan.overdue = due_first(scan.overdue, (job.id, job))
    return scan
