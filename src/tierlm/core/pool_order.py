"""The order in which the fair pool's queued jobs get their first turn.

docs/design.md §2.6, §4.4. A pool job runs at
most one slice while an eligible producer with an earlier virtual deadline
waits, so the pool serves its producers in turns, not one producer's whole
queue after another. Listing a producer's jobs together (the order successive
picks would take if nothing were charged) made a job's position jump back each
time its producer ran; this module instead replays the pool's picks with every
turn charged ONE slice of device time, as EEVDF would charge it: at each node
of the hierarchy the eligible child with the earliest virtual deadline takes
the next turn (else the child furthest behind), is charged one slice at its
weight, its deadline moves on when it has used its request, and a child whose
jobs are all placed leaves (unless its job is running, or it has work on
another model). A child's own jobs come from the same replay one level down.

Pool jobs that run ahead of the pool (the foreground's, overdue ones on a
loan) are charged to their producers first, one slice each, and take no turn.
The first turn at every node is exactly the pool's pick (the same ranks), so
position 1 is exact; the rest is exact when every job takes one slice and the
pool's work is on one model, and the fair interleaving otherwise (a longer job
takes several turns, a shorter one less than one). Replayed per model too,
because affinity picks the best job on the loaded model. O(n log n) per model,
off the dispatch path.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Collection, Iterable

from tierlm.core.eevdf import Entity
from tierlm.core.fairness import FairPool

__all__ = ["turn_order"]


def turn_order(
    pool: FairPool,
    model: str | None = None,
    ahead: Iterable[int] = (),
    after: Iterable[int] = (),
) -> list[int]:
    """Queued pool job ids in the order of their turns (module doc); only jobs
    on ``model`` when it is given. ``ahead``: queued pool jobs that run before
    the pool's turns (charged, not listed); ``after``: ones that run after
    them (not listed)."""
    charges: dict[Entity, int] = {}
    skip = set(after)
    for job_id in ahead:
        leaf = pool.queued_leaf(job_id)
        if leaf is not None:
            skip.add(job_id)
            for entity in leaf.path:
                charges[entity] = charges.get(entity, 0) + 1
    return _turns(pool, pool.root, model, charges, skip)


def _has_work(entity: Entity, model: str | None) -> bool:
    return bool(entity.queued) if model is None else model in entity.queued


def _turns(
    pool: FairPool,
    node: Entity,
    model: str | None,
    charges: dict[Entity, int],
    skip: Collection[int],
) -> list[int]:
    if node.parent is not None and node.key is None:  # a producer's own jobs, oldest first
        heaps = node.jobs.values() if model is None else [node.jobs.get(model, [])]
        return sorted(
            job_id
            for heap in heaps
            for job_id, ticket in heap
            if pool.is_live(job_id, ticket) and job_id not in skip
        )
    children = [
        child for child in node.children.values() if _has_work(child, model) or child in charges
    ]
    v = {i: child.v for i, child in enumerate(children)}
    vd = {i: child.vd for i, child in enumerate(children)}
    sum_lv, sum_load = node.sum_lv, node.sum_load
    # The jobs that run ahead of the pool: their slices first (FairPool.charge).
    for i, child in enumerate(children):
        for _ in range(charges.get(child, 0)):
            v[i] += child.slice_v
            sum_lv += child.load * child.slice_v
            if v[i] >= vd[i]:
                vd[i] = v[i] + child.slice_v
    jobs = {i: deque(_turns(pool, child, model, charges, skip)) for i, child in enumerate(children)}
    for i, child in enumerate(children):
        if not jobs[i] and child in charges and not _stays(child, model):
            sum_lv -= child.load * v[i]  # its only work ran ahead: it has left
            sum_load -= child.load
    jobs = {i: queue for i, queue in jobs.items() if queue}

    def tie(i: int) -> tuple[int, int]:
        child = children[i]
        return (0 if child.running else 1, child.seq)  # as Entity.rank breaks ties

    # EEVDF's two heaps (eevdf.ChildIndex): ready = placed eligible, by deadline;
    # waiting = placed not eligible, by v. Entries are (key, tie, index).
    ready: list[tuple[int, tuple[int, int], int]] = []
    waiting: list[tuple[int, tuple[int, int], int]] = []
    for i in jobs:
        if v[i] * sum_load <= sum_lv:
            ready.append((vd[i], tie(i), i))
        else:
            waiting.append((v[i], tie(i), i))
    heapq.heapify(ready)
    heapq.heapify(waiting)
    order: list[int] = []
    while ready or waiting:
        while waiting and waiting[0][0] * sum_load <= sum_lv:
            _v, key, i = heapq.heappop(waiting)
            heapq.heappush(ready, (vd[i], key, i))
        while ready and v[ready[0][2]] * sum_load > sum_lv:  # V fell when one left
            _vd, key, i = heapq.heappop(ready)
            heapq.heappush(waiting, (v[i], key, i))
        i = heapq.heappop(ready)[2] if ready else heapq.heappop(waiting)[2]
        child = children[i]
        order.append(jobs[i].popleft())
        # One slice of device time, charged at the child's weight (FairPool.charge).
        v[i] += child.slice_v
        sum_lv += child.load * child.slice_v
        if v[i] >= vd[i]:
            vd[i] = v[i] + child.slice_v
        if jobs[i]:
            if v[i] * sum_load <= sum_lv:
                heapq.heappush(ready, (vd[i], tie(i), i))
            else:
                heapq.heappush(waiting, (v[i], tie(i), i))
            continue
        del jobs[i]
        if not _stays(child, model):  # it leaves, and V with it (FairPool._depart)
            sum_lv -= child.load * v[i]
            sum_load -= child.load
    return order


def _stays(child: Entity, model: str | None) -> bool:
    """Present after its turns here: its job is running, or it has work on
    another model (the replay of one model leaves that work queued)."""
    return child.running > 0 or (model is not None and len(child.queued) > 1)
