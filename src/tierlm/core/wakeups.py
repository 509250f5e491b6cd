"""When the policy's last decision may change with no event: ``Decision.wake_at``
(docs/design.md §2.2).

A fair job's deadline (it becomes T3 and may preempt), the end of a hold (a
chat's, an anticipatory one, a best job reaching ``max_affinity_wait``, and,
with deadlines on time, work starting to press: the ``expiries`` the pick
met), the running pool job's next slice boundary, and the moment overdue
work would bring the pool to its floor. Not the budget window:
a budget never idles the device and never preempts, so its edge changes nothing
until the next dispatch.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from tierlm.core.classes import T3
from tierlm.core.floor import PoolFloor
from tierlm.core.jobs import Job
from tierlm.core.slices import SliceClocks

__all__ = ["next_wakeup"]


def next_wakeup(
    now: float,
    *,
    expiries: Iterable[float],
    next_deadline: float | None,
    queued: int,
    fresh: int,
    running: Iterable[Job],
    pool_running: Collection[int],
    slices: SliceClocks,
    floor: PoolFloor,
) -> float | None:
    """The earliest of those instants after ``now``; None if none. ``queued``:
    jobs waiting; ``fresh``: of them, pool jobs not overdue."""
    times: list[float] = []
    for expiry in expiries:
        if expiry > now:
            times.append(expiry)
    if next_deadline is not None:
        times.append(next_deadline)
    for job in running:
        if not (job.task_class.requeue and queued):
            continue
        if job.task_class.fair and slices.begun(job.id):
            times.append(slices.next_end(job.id, now))
        overdue_runs = job.task_class.tier == T3 or (
            job.task_class.fair and job.id not in pool_running
        )
        if overdue_runs and fresh and not floor.active:
            times.append(floor.wakeup(now))
    return min(times) if times else None
