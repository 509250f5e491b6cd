"""Decisions and views over the fair pool (docs/design.md §4.4, §4.5).

Read-only queries over ``FairPool``'s entities: the EEVDF pick restricted to
one model, the earliest open loan, and each producer's virtual runtime. A pick
walks one path from the classes down to a producer's leaf, asking one
``ChildIndex`` per level: O(depth x log n).
"""

from __future__ import annotations

from tierlm.core.eevdf import Entity, Loan, Rank
from tierlm.core.fairness import FairPool
from tierlm.core.jobs import Job

__all__ = ["best", "best_loan", "best_queued", "vruntimes"]


def best(
    pool: FairPool, model: str, skip: frozenset[str], *, running_job: Job | None = None
) -> tuple[tuple[object, ...], int] | None:
    """EEVDF at every level, among jobs on ``model``: (the path's ranks, job id).

    With ``running_job`` that running job competes too, its path winning ties
    (a preemption that leads back to it never happens, docs/design.md §6.6).
    Answers for different models compare by their ranks as the unrestricted
    pick would order them, so the best of the per-model answers is the pool's
    best job (docs/design.md §4.8)."""
    job = running_job
    found = pool.running_path(job) if job is not None else None
    if found is None:
        return best_queued(pool, model, skip)
    running = found is not None
    path = found or []
    root = node = pool.root
    chosen: Entity | None = None
    chosen_rank: Rank | None = None
    for entity in root.children.values():
        if entity.name not in skip and (model in entity.queued or (running and entity is path[0])):
            rank = root.rank(entity)
            if chosen_rank is None or rank < chosen_rank:
                chosen, chosen_rank = entity, rank
    ranks: list[object] = []
    while chosen is not None:
        ranks.append(chosen_rank if node is root else node.rank(chosen))
        node = chosen
        if node.key is None:  # a producer's own jobs
            oldest = pool.oldest(node, model)
            if (
                running
                and node is path[-1]
                and job is not None
                and (oldest is None or job.id < oldest)
            ):
                oldest = job.id
            if oldest is None:
                return None
            ranks.append(oldest)
            return tuple(ranks), oldest
        index = node.indexes.get(model)
        chosen = index.pick(node) if index is not None else None
        if running and (node is root or node is path[node.depth - 1]):
            mine = path[node.depth]
            if chosen is None or node.rank(mine) <= node.rank(chosen):
                chosen = mine
    return None


def best_queued(
    pool: FairPool, model: str, skip: frozenset[str]
) -> tuple[tuple[object, ...], int] | None:
    """``best`` with no running job competing (every free slot's pick): the
    same descent, each level's rank (``Entity.rank``) computed inline."""
    root = pool.root
    sum_load, sum_lv = root.sum_load, root.sum_lv
    chosen: Entity | None = None
    chosen_rank: Rank | None = None
    for entity in root.children.values():
        if model in entity.queued and entity.name not in skip:
            tie = 0 if entity.running else 1
            if entity.v * sum_load <= sum_lv:
                rank = (0, entity.vd, tie, entity.seq)
            else:
                rank = (1, entity.v, tie, entity.seq)
            if chosen_rank is None or rank < chosen_rank:
                chosen, chosen_rank = entity, rank
    if chosen is None:
        return None
    ranks: list[object] = [chosen_rank]
    node = chosen
    while node.key is not None:  # down to a producer's own jobs
        index = node.indexes.get(model)
        child = index.pick(node) if index is not None else None
        if child is None:
            return None
        tie = 0 if child.running else 1
        if child.v * node.sum_load <= node.sum_lv:
            ranks.append((0, child.vd, tie, child.seq))
        else:
            ranks.append((1, child.v, tie, child.seq))
        node = child
    oldest = pool.oldest(node, model)
    if oldest is None:
        return None
    ranks.append(oldest)
    return tuple(ranks), oldest


def best_loan(pool: FairPool, model: str, skip: frozenset[str]) -> Loan | None:
    """(due, job id) of the queued overdue job on ``model`` with the earliest
    due time whose producer is eligible at every level: a deadline is a loan
    against the producer's share, open only while it is not ahead
    (docs/design.md §4). Each class keeps its best such job up to date
    (``Entity.loans``); its due is the job's ``Job.due``."""
    root = pool.root
    sum_load, sum_lv = root.sum_load, root.sum_lv
    best: Loan | None = None
    for entity in root.children.values():
        loan = entity.loans.get(model)
        if (
            loan is not None
            and (best is None or loan < best)
            and entity.name not in skip
            and entity.v * sum_load <= sum_lv  # root.eligible(entity)
        ):
            best = loan
    return best


def vruntimes(pool: FairPool) -> dict[str, float]:
    """Virtual runtime in seconds of every remembered producer, at its own
    level (for snapshots: values of different classes do not compare; a
    producer name used in two classes is shown as "name (class)")."""
    out: dict[str, float] = {}
    for class_entity in pool.root.children.values():
        stack = list(class_entity.children.values())
        while stack:
            node = stack.pop()
            for key, child in node.children.items():
                if key is None:
                    name = node.name
                    if name in out:
                        name = f"{name} ({class_entity.name})"
                    out[name] = node.v / 1e9
                else:
                    stack.append(child)
    return out
