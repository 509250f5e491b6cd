"""The fair pool: hierarchical EEVDF over classes, producers and producer paths.

docs/design.md §4.4, §6.10. Device time in the pool is shared level by
level, like cgroups: first among the pool's task classes, then among the
producers of a class, then down each producer path split at "/" ("swarm/1"
and "swarm/2" share the part of "swarm"). A producer's own jobs sit in a leaf
under its path node, so "swarm" submitting jobs of its own and through
"swarm/1" still holds one share at the class level.

At every level EEVDF (Linux >= 6.6) decides: an entity is ELIGIBLE while it has
not received more than its share (``v <= V``, the weighted average of its
active siblings); among the eligible the earliest virtual deadline runs. The
running job's path is charged as it runs ("you ran, you pay", swap included),
and its deadline moves one slice on each time it has used one
(``eevdf.Entity``).

Presence: an entity is active while a job below it is queued or running. One
that leaves keeps its lag (how far behind the average it was), clamped to two
slices as Linux does; one that comes back is placed at ``V - lag``, so time
away earns nothing and a debt is not shed by leaving. A return at the same
instant (a preempted job re-queued, a producer that submits its next job as
the last one ends) is no absence at all: its ``v`` and ``vd`` are restored.
After ``idle_reset`` seconds away an entity is forgotten: memory is bounded by
the producers seen in the last ``idle_reset`` seconds, however many ids appear.

Cost: every submit, dispatch and charge touches the entities on one path
(depth <= ``MAX_PATH_PARTS`` + 2) and, at each, one ``ChildIndex`` per model
with queued work below it: O(depth x models x log n), never a scan of the
producers.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Mapping

from tierlm.core.eevdf import (
    SCALE,
    ChildIndex,
    Entity,
    Loan,
    OpCount,
    clamp,
    no_credit_when_served,
    to_ns,
)
from tierlm.core.jobs import Job

__all__ = ["DEFAULT_IDLE_RESET", "MAX_PATH_PARTS", "FairPool", "weight_load"]

# Seed §"newcomer seeding": a kind that "returns after being absent for > 5 min".
DEFAULT_IDLE_RESET = 300.0
MAX_PATH_PARTS = 8
"""A producer path is split at "/" into at most this many levels (the rest stays
in the last part), so a path cannot make a decision deeper than that."""


def weight_load(weight: float) -> int:
    """A validated weight as an integer load (``eevdf.SCALE`` is weight 1)."""
    return max(1, round(weight * SCALE))


class FairPool:
    """The fair pool's entities: who is present, what each has received, and
    the indexes that keep the EEVDF questions cheap (asked in ``fair_choice``)."""

    def __init__(
        self,
        *,
        slice_seconds: float,
        idle_reset: float = DEFAULT_IDLE_RESET,
        class_weights: Mapping[str, float] | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        self.slice_ns = to_ns(slice_seconds)
        self.idle_reset = idle_reset
        self._class_loads = {k: weight_load(w) for k, w in (class_weights or {}).items()}
        self._path_loads = {k: weight_load(w) for k, w in (weights or {}).items()}
        self.ops = OpCount()
        self._seq = 0
        self.root = self._new(None, None, "", SCALE)
        self.entities = 0
        """Entities remembered (active, or away for less than idle_reset)."""
        self._queued: dict[int, tuple[Entity, int]] = {}  # job id -> (leaf, ticket)
        self._overdue: set[int] = set()  # queued job ids counted in overdue_n
        self._ticket = 0
        self._departed: deque[tuple[float, Entity, int]] = deque()
        # The running jobs' paths, class first: one per slot in use (docs/design.md §4.7).
        self._running: dict[int, tuple[Job, list[Entity]]] = {}
        self._charged_ns = 0
        # The leaf of the job last dequeued to run, for its ``start`` (the
        # next call for it, docs/design.md §4.4): that dequeue kept its path
        # active, so no ``forget_idle`` can have dropped it and ``leaf`` would
        # find this one; any other dequeue, or a start, clears it.
        self._to_run: tuple[int, Entity] | None = None
        self.version = 0
        """Bumped by every change: cached decisions compare it."""

    # -- entities -----------------------------------------------------------------

    def _new(self, parent: Entity | None, key: str | None, name: str, load: int) -> Entity:
        self._seq += 1
        entity = Entity(parent, key, name, load, self.slice_ns, self._seq)
        if parent is not None:
            parent.children[key] = entity
            self.entities += 1
        return entity

    def _child(self, parent: Entity, key: str | None, name: str, load: int) -> Entity:
        child = parent.children.get(key)
        return child if child is not None else self._new(parent, key, name, load)

    def leaf(self, class_name: str, producer: str) -> Entity:
        """The leaf holding ``producer``'s own jobs in ``class_name`` (created if new)."""
        node = self._child(
            self.root, class_name, class_name, self._class_loads.get(class_name, SCALE)
        )
        path = ""
        for part in producer.split("/", MAX_PATH_PARTS - 1):
            path = f"{path}/{part}" if path else part
            node = self._child(node, part, path, self._path_loads.get(path, SCALE))
        return self._child(node, None, path, SCALE)

    # -- presence -----------------------------------------------------------------

    def _arrive(self, entity: Entity, now: float) -> None:
        parent = entity.parent
        assert parent is not None
        if entity.departed_at != now:  # back at the same instant: no absence, keep v, vd
            lag = entity.lag if entity.departed_at is not None else 0
            total = parent.sum_load
            if total and lag:
                # Placing it moves V; scale so its lag after placement is `lag`
                # (Linux place_entity).
                lag = lag * (total + entity.load) // total
            entity.v = parent.average() - lag
            entity.vd = entity.v + entity.slice_v
        entity.departed_at = None
        parent.sum_lv += entity.load * entity.v
        parent.sum_load += entity.load

    def _depart(self, entity: Entity, now: float) -> None:
        parent = entity.parent
        assert parent is not None
        average = parent.average()
        entity.lag = clamp(average - entity.v, 2 * entity.slice_v)
        parent.sum_lv -= entity.load * entity.v
        parent.sum_load -= entity.load
        if not parent.sum_load:
            parent.vbase = average
        entity.departed_at = now
        entity.departures += 1
        self._departed.append((now, entity, entity.departures))

    def _activate(self, leaf: Entity, now: float) -> bool:
        """One more job below each entity of the path; True if any arrived (V moved)."""
        moved = False
        for entity in leaf.path:
            entity.active += 1
            if entity.active == 1:
                self._arrive(entity, now)
                moved = True
        return moved

    def _deactivate(self, leaf: Entity, now: float) -> bool:
        """One job fewer below each entity of the path; True if any departed."""
        moved = False
        for entity in leaf.path:
            entity.active -= 1
            if entity.active == 0:
                self._depart(entity, now)
                moved = True
        return moved

    def forget_idle(self, now: float) -> None:
        """Forget entities away for more than ``idle_reset`` (amortised O(1))."""
        departed = self._departed
        while departed and now - departed[0][0] > self.idle_reset:
            _at, entity, departures = departed.popleft()
            self.ops.n += 1
            parent = entity.parent
            if entity.active or entity.departures != departures or parent is None:
                continue
            if parent.children.get(entity.key) is entity:
                del parent.children[entity.key]
                self.entities -= 1
                self.version += 1

    # -- the queue ------------------------------------------------------------------

    def enqueue(self, job: Job, now: float, overdue: bool) -> None:
        leaf = self.leaf(job.class_name, job.producer)
        if not leaf.active:
            self.charge(now)  # it arrives: place it against the true average
        self._ticket += 1
        ticket = self._ticket
        self._queued[job.id] = (leaf, ticket)
        model = job.model_id
        heapq.heappush(leaf.jobs.setdefault(model, []), (job.id, ticket))
        self.ops.n += 1
        if overdue:
            self._push_overdue(leaf, job, ticket)
        moved = self._activate(leaf, now)
        for entity in leaf.path:
            entity.queued[model] = entity.queued.get(model, 0) + 1
        self._refresh(leaf, None if moved else model)

    def mark_overdue(self, job: Job) -> None:
        """docs/design.md §4.1 (rule 4): the job's deadline passed while it waited."""
        leaf, ticket = self._queued[job.id]
        self._push_overdue(leaf, job, ticket)
        self._refresh(leaf, job.model_id)  # only this model's loans can change

    def _push_overdue(self, leaf: Entity, job: Job, ticket: int) -> None:
        due = job.due
        assert due is not None
        model = job.model_id
        heapq.heappush(leaf.overdue.setdefault(model, []), (due, job.id, ticket))
        self.ops.n += 1
        self._overdue.add(job.id)
        for entity in leaf.path:
            entity.overdue_n[model] = entity.overdue_n.get(model, 0) + 1

    def dequeue(self, job: Job, now: float, *, to_run: bool) -> None:
        """``job`` leaves the queue: to run (its path stays present) or for good."""
        leaf, _ticket = self._queued.pop(job.id)
        model = job.model_id
        overdue = job.id in self._overdue
        if overdue:
            self._overdue.discard(job.id)
        for entity in leaf.path:
            if overdue:
                entity.overdue_n[model] -= 1
                if not entity.overdue_n[model]:
                    del entity.overdue_n[model]
            left = entity.queued[model] - 1
            if left:
                entity.queued[model] = left
                continue
            del entity.queued[model]
            entity.loans.pop(model, None)
            parent = entity.parent
            assert parent is not None
            index = parent.indexes.get(model)
            if index is not None:
                index.discard(entity)
                if not index:
                    del parent.indexes[model]
        if model not in leaf.queued:
            leaf.jobs.pop(model, None)
            leaf.overdue.pop(model, None)
        moved = not to_run and self._deactivate(leaf, now)
        self._to_run = (job.id, leaf) if to_run else None
        self._refresh(leaf, None if moved else model)

    # -- running ----------------------------------------------------------------------

    def start(self, job: Job, now: float) -> None:
        """``job`` (already dequeued to run) holds a slot of the device from ``now``."""
        self.charge(now)  # the others' time so far, at the share they had
        if not self._running:
            self._charged_ns = to_ns(now)
        to_run, self._to_run = self._to_run, None
        leaf = (
            to_run[1]
            if to_run is not None and to_run[0] == job.id
            else self.leaf(job.class_name, job.producer)
        )
        path = leaf.path[::-1]
        self._running[job.id] = (job, path)
        for entity in path:
            entity.running += 1
        self.version += 1

    def charge(self, now: float) -> None:
        """Charge the running paths for the device time since the last charge.

        A batch step's time is shared equally by the sequences in it
        (docs/design.md §4.7 (fairness in a batch)): with n running, each path
        is charged 1/n of the elapsed time. With one slot, all of it."""
        if not self._running:
            return
        now_ns = to_ns(now)
        delta = now_ns - self._charged_ns
        if delta <= 0:
            return
        self._charged_ns = now_ns
        share = len(self._running)
        charged: dict[Entity, int] = {}  # what each entity on a running path paid
        sums: dict[Entity, int] = {}  # each of their parents' sum_lv before
        for _job, path in self._running.values():
            for entity in path:
                step = delta * SCALE // (entity.load * share)
                parent = entity.parent
                assert parent is not None
                sums.setdefault(parent, parent.sum_lv)
                charged[entity] = charged.get(entity, 0) + step
                entity.v += step
                parent.sum_lv += entity.load * step
                if entity.v >= entity.vd:  # its request is served: a new one, one slice on
                    entity.vd = entity.v + entity.slice_v
            self._refresh(path[-1])
        if share > 1:
            no_credit_when_served(charged, sums)

    def stop(self, job: Job, now: float) -> None:
        """A running job ended (any way): charge it, then it is no longer present."""
        if job.id not in self._running:
            return
        self.charge(now)
        _job, path = self._running.pop(job.id)
        leaf = path[-1]
        for entity in path:
            entity.running -= 1
        self._deactivate(leaf, now)
        self._refresh(leaf)

    def running_path(self, job: Job) -> list[Entity] | None:
        """A running job's path, its class first (depth d at index d - 1)."""
        found = self._running.get(job.id)
        return found[1] if found is not None else None

    def queued_leaf(self, job_id: int) -> Entity | None:
        """The leaf of a queued pool job (None if it is not queued)."""
        entry = self._queued.get(job_id)
        return entry[0] if entry is not None else None

    def is_live(self, job_id: int, ticket: int) -> bool:
        """Whether a leaf heap entry (job id, ticket) is the job's current stay."""
        entry = self._queued.get(job_id)
        return entry is not None and entry[1] == ticket

    # -- keeping the indexes and loans up to date ---------------------------------------

    def _refresh(self, leaf: Entity, only: str | None = None) -> None:
        """Re-place every entity of one path in its parent's indexes, bottom-up:
        a change anywhere on a path can move V, hence eligibility and the loans,
        of every level above it, and of nothing else. ``only``: nothing moved
        but one model's queue below the leaf (no arrival, departure or charge),
        so the other models' entries stand."""
        self.version += 1
        # Hot path (every submit, dispatch and charge; docs/design.md §8): the
        # lookups hoisted out of the loops, no tuple built per model.
        root, ops, loan_below = self.root, self.ops, self._loan_below
        for entity in leaf.path:
            parent = entity.parent
            assert parent is not None
            queued = entity.queued
            if only is None:
                models: Iterable[str] = queued
            elif only in queued:
                models = (only,)
            else:
                continue
            overdue_n, loans = entity.overdue_n, entity.loans
            indexes = None if parent is root else parent.indexes
            for model in models:
                loan = loan_below(entity, model) if model in overdue_n else None
                if loan is None:
                    if loans:
                        loans.pop(model, None)
                else:
                    loans[model] = loan
                if indexes is not None:
                    index = indexes.get(model)
                    if index is None:
                        index = indexes[model] = ChildIndex(ops)
                    index.update(parent, entity, loan)

    def _loan_below(self, entity: Entity, model: str) -> Loan | None:
        if entity.key is None:
            return self.overdue_top(entity, model)
        index = entity.indexes.get(model)
        return index.best_loan(entity) if index is not None else None

    def overdue_top(self, leaf: Entity, model: str) -> Loan | None:
        """(due, job id) of the leaf's earliest overdue job on ``model``."""
        heap = leaf.overdue.get(model)
        queued = self._queued
        while heap:
            due, job_id, ticket = heap[0]
            entry = queued.get(job_id)
            if entry is not None and entry[1] == ticket:
                return due, job_id
            heapq.heappop(heap)
            self.ops.n += 1
        return None

    def oldest(self, leaf: Entity, model: str) -> int | None:
        """The leaf's oldest queued job on ``model`` (FIFO inside a producer)."""
        heap = leaf.jobs.get(model)
        queued = self._queued
        while heap:
            job_id, ticket = heap[0]
            entry = queued.get(job_id)
            if entry is not None and entry[1] == ticket:
                return job_id
            heapq.heappop(heap)
            self.ops.n += 1
        return None

    def path_eligible(self, job: Job) -> bool:
        """Whether ``job``'s producer is present and eligible at every level
        (the loan check)."""
        queued = self._queued.get(job.id)
        if queued is not None:
            leaf: Entity | None = queued[0]
        elif job.id in self._running:
            leaf = self._running[job.id][1][-1]
        else:
            leaf = self._find_leaf(job)
        if leaf is None or leaf.active <= 0:
            return False
        for entity in leaf.path:  # eligible at every level (``Entity.eligible``, inlined)
            parent = entity.parent
            if parent is None or entity.v * parent.sum_load > parent.sum_lv:
                return False
        return True

    def _find_leaf(self, job: Job) -> Entity | None:
        node = self.root.children.get(job.class_name)
        for part in job.producer.split("/", MAX_PATH_PARTS - 1):
            if node is None:
                return None
            node = node.children.get(part)
        return node.children.get(None) if node is not None else None
