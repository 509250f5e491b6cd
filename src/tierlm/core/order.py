"""The dispatch order of a whole queue, for snapshots and queue positions.

``TieredPolicy.queue_order``: the jobs in the order ``pick`` would return them,
call after call, if the device freed now: each tier's order is fixed, and
affinity (which model is loaded) changes as jobs are taken. The pool's order
is its turn order (``pool_order``: EEVDF picks, each turn charged one slice),
per model for the work on the loaded one and overall to choose the next model.
Holds (a chat grace) and deadlines still ahead are ignored: they change when,
not in which order. O(n log n), off the dispatch path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tierlm.core.classes import Tier
from tierlm.core.fairness import FairPool
from tierlm.core.jobs import Job, due_or_never
from tierlm.core.pool_order import turn_order

__all__ = ["dispatch_order", "policy_order"]

_T0, _T1, _T3, _T4 = int(Tier.T0), int(Tier.T1), int(Tier.T3), int(Tier.T4)


def dispatch_order(
    jobs: Sequence[Job],
    now: float,
    loaded_model: str | None,
    *,
    rank: Callable[[Job], int],
    skipped: Callable[[Job, int], bool],
    pool_order: Sequence[int],
    pool_model_order: Callable[[str], Sequence[int]],
    max_affinity_wait: float,
    chat_order: Mapping[int, int] | None = None,
) -> list[Job]:
    """``jobs`` in dispatch order (see the module doc).

    ``rank``: the job's rank now (its effective tier; overdue work waiting for
    the pool floor ranks 5). ``skipped``: over budget, so it runs only when
    nothing else can. ``pool_order``: queued pool job ids in turn order;
    ``pool_model_order(model)``: the same among the jobs on one model.
    ``chat_order``: queued T0 job id -> its place, persons in turn.
    """
    pool_position = {job_id: i for i, job_id in enumerate(pool_order)}
    by_model: dict[str, list[tuple[Any, ...]]] = {}
    for job in jobs:
        job_rank = rank(job)
        if job_rank == _T4:
            key: tuple[Any, ...] = (pool_position.get(job.id, len(pool_position)), job.id)
        elif job_rank in (_T3, _T3 + 2):
            key = (due_or_never(job), job.id)
        elif job_rank == _T0 and chat_order is not None and job.id in chat_order:
            key = (chat_order[job.id],)  # persons in turn (docs/design.md §4.2)
        else:
            key = (job.id,)
        phase = 1 if skipped(job, job_rank) else 0
        by_model.setdefault(job.model_id, []).append((phase, job_rank, key, job))
    heads: dict[str, int] = {}
    for model, entries in by_model.items():
        # Inside one model its pool jobs follow that model's own turns (affinity
        # picks among the loaded model's jobs); their keys are the overall turn
        # positions of the same jobs, sorted, so heads still compare across models.
        turn = {job_id: i for i, job_id in enumerate(pool_model_order(model))}
        pool = sorted((e for e in entries if e[1] == _T4), key=lambda e: turn.get(e[3].id, 0))
        keys = iter(sorted(e[2] for e in pool))
        rekeyed = {e[3].id: (e[0], e[1], next(keys), e[3]) for e in pool}
        entries[:] = [rekeyed.get(e[3].id, e) for e in entries]
        entries.sort(key=lambda entry: entry[:3])
        heads[model] = 0
    order: list[Job] = []
    current = loaded_model
    while heads:
        best_model = min(heads, key=lambda m: by_model[m][heads[m]][:3])
        best = by_model[best_model][heads[best_model]]
        take = best_model
        phase, job_rank, _key, job = best
        if current is not None and best_model != current and job_rank > _T1:
            loaded = by_model[current][heads[current]] if current in heads else None
            starving = now >= job.submitted_at + max_affinity_wait
            if loaded is not None and loaded[0] == phase and not starving:
                take = current
        order.append(by_model[take][heads[take]][3])
        current = take
        heads[take] += 1
        if heads[take] == len(by_model[take]):
            del heads[take]
    return order


def policy_order(
    jobs: Sequence[Job],
    now: float,
    loaded_model: str | None,
    *,
    rank: Callable[[Job], int],
    skipped: Callable[[Job, int], bool],
    fair: FairPool,
    max_affinity_wait: float,
    chat_order: Mapping[int, int],
) -> list[Job]:
    """The tiered policy's ``queue_order``: ``dispatch_order`` with the pool's
    turns (``pool_order.turn_order``, each charged one slice).

    Pool jobs ranked apart from the pool's turns: the foreground's and loans'
    run first, and are charged first; those waiting for the floor run after
    (docs/design.md §4.5), and only take no turn. On one model's turns, only
    those that run before its pool work are charged: its own, and a person's
    (T1 swaps at once); affinity keeps the others waiting."""
    ahead: list[Job] = []
    after: list[int] = []
    for job in jobs:
        if job.task_class.fair:
            job_rank = rank(job)
            if job_rank < _T4:
                ahead.append(job)
            elif job_rank > _T4:
                after.append(job.id)

    def model_turns(model: str) -> list[int]:
        first = [j.id for j in ahead if j.model_id == model or rank(j) <= _T1]
        return turn_order(fair, model, first, after)

    return dispatch_order(
        jobs,
        now,
        loaded_model,
        rank=rank,
        skipped=skipped,
        pool_order=turn_order(fair, ahead=[j.id for j in ahead], after=after),
        pool_model_order=model_turns,
        max_affinity_wait=max_affinity_wait,
        chat_order=chat_order,
    )
