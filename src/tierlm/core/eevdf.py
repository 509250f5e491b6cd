"""One level of the fair pool: its entities and the EEVDF index over them.

docs/design.md §4.4. An ``Entity`` is anything that holds a share of the
device at one level of the pool: a task class, a producer path component
("swarm" of "swarm/3"), or the jobs a producer submits itself (the leaf).
Every entity has a virtual runtime ``v`` (device time received, divided by its
weight) and a virtual deadline ``vd`` (``v`` plus one slice, divided by its
weight, when its current request started). A parent keeps the weighted sum of
its active children's ``v`` so that their average ``V`` is known in O(1).

Virtual time is an integer (nanoseconds of device time for weight 1), so the
running sums are exact and eligibility, ``v <= V``, is decided without
division, as Linux's ``vruntime_eligible`` does: ``v * W <= sum(w_i * v_i)``.

``ChildIndex`` answers, for the children of one node that have queued work on
one model, the EEVDF question "the eligible child with the earliest virtual
deadline" (and "the eligible child with the earliest overdue job", for
deadline loans) in amortised O(log n). Linux keeps one augmented red-black
tree; here two binary heaps do the same job, with lazy deletion:

- ``waiting``: children last placed as not eligible, keyed by ``v``;
- ``ready``: children last placed as eligible, keyed by ``vd`` (and ``loans``,
  keyed by their earliest overdue deadline).

A query first moves every waiting child with ``v <= V`` to ready (the waiting
heap's top is the smallest ``v``, so it stops at the first that is not
eligible), then drops from ready's top any child that is no longer eligible
(``V`` can fall when a child with credit leaves). After that, every eligible
child is in ready, and ready's top is eligible: it is the answer. Entries carry
a ticket; re-placing a child issues a new ticket, and entries with an old one
are skipped when they reach a top. Heaps are rebuilt when stale entries
outnumber live ones, so memory stays proportional to the members.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

__all__ = [
    "SCALE",
    "ChildIndex",
    "Entity",
    "Loan",
    "OpCount",
    "Rank",
    "clamp",
    "no_credit_when_served",
    "to_ns",
]

SCALE = 1 << 20
"""Integer load of weight 1. Loads are ``round(weight * SCALE)``: 1/1000 is
still 1049, so weights from 0.001 to 1000 keep better than 0.1 % precision."""

Loan = tuple[float, int]
"""(due, job id) of an overdue job: EDF order, ties by submit order."""

Rank = tuple[int, int, int, int]
"""How an entity ranks among its siblings, the smaller the sooner:
(0, vd, ...) when eligible, (1, v, ...) when not (no sibling is eligible, so the
one furthest behind runs), then 0 for the running path (never preempt on a
tie), then creation order."""


class Entity:
    """A share-holder at one level of the pool (a class, a path, or a leaf)."""

    __slots__ = (
        "active",
        "children",
        "departed_at",
        "departures",
        "depth",
        "indexes",
        "jobs",
        "key",
        "lag",
        "load",
        "loans",
        "name",
        "overdue",
        "overdue_n",
        "parent",
        "path",
        "queued",
        "running",
        "seq",
        "slice_v",
        "sum_load",
        "sum_lv",
        "v",
        "vbase",
        "vd",
    )

    def __init__(
        self, parent: Entity | None, key: str | None, name: str, load: int, slice_ns: int, seq: int
    ) -> None:
        self.parent = parent
        self.key = key
        self.name = name
        """Producer path ("swarm/3"), class name, or "" for the root."""
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.path: list[Entity] = [] if parent is None else [self, *parent.path]
        """This entity and its ancestors below the root, itself first."""
        self.load = load
        self.slice_v = slice_ns * SCALE // load
        self.seq = seq
        self.v = 0
        self.vd = 0
        self.lag = 0
        """Saved at departure: how far behind the average it was (clamped)."""
        self.active = 0
        """Queued and running jobs in this subtree; 0 = departed (or new)."""
        self.departed_at: float | None = None
        self.departures = 0
        self.running = 0
        """Running jobs on paths through it (non-zero: it wins ties,
        docs/design.md §6.6; with k slots several may run, §4.7)."""
        self.queued: dict[str, int] = {}
        """Queued jobs in this subtree per model: a member of the parent's
        index for exactly these models."""
        self.overdue_n: dict[str, int] = {}
        """Queued overdue jobs in this subtree per model (no loan to look for at 0)."""
        self.loans: dict[str, Loan] = {}
        """Per model: the earliest overdue job below it whose whole path below
        it is eligible (what a deadline loan may borrow)."""
        # Groups (children) or the leaf (jobs); the other stays empty.
        self.children: dict[str | None, Entity] = {}
        self.indexes: dict[str, ChildIndex] = {}
        self.sum_lv = 0
        self.sum_load = 0
        self.vbase = 0
        """A group's zero-lag point when it has no active child."""
        self.jobs: dict[str, list[tuple[int, int]]] = {}  # model -> heap (job id, ticket)
        self.overdue: dict[str, list[tuple[float, int, int]]] = {}  # model -> (due, id, ticket)

    def average(self) -> int:
        """V: the weighted average ``v`` of the active children (floor)."""
        return self.sum_lv // self.sum_load if self.sum_load else self.vbase

    def eligible(self, child: Entity) -> bool:
        """docs/design.md §4: lag >= 0, i.e. ``v <= V``, decided exactly."""
        return child.v * self.sum_load <= self.sum_lv

    def rank(self, child: Entity) -> Rank:
        tie = 0 if child.running else 1
        if child.v * self.sum_load <= self.sum_lv:
            return (0, child.vd, tie, child.seq)
        return (1, child.v, tie, child.seq)

    def __repr__(self) -> str:
        return f"<Entity {self.name or 'root'}:{self.key!r} v={self.v} vd={self.vd}>"


# (key, seq, ticket, entity): key is v, vd or a Loan, one kind per heap.
_Entry = tuple[Any, int, int, Entity]


class OpCount:
    """Heap pushes, pops and rebuilt entries: the unit the cost tests count
    (a count, unlike a duration, is the same on a busy machine)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class ChildIndex:
    """Children of one node with queued work on one model (see the module doc)."""

    __slots__ = ("_loans", "_next", "_ready", "_state", "_waiting", "ops")

    def __init__(self, ops: OpCount) -> None:
        # member -> (ticket, v, vd, loan); ticket > 0: placed ready, < 0: waiting.
        self._state: dict[Entity, tuple[int, int, int, Loan | None]] = {}
        self._waiting: list[_Entry] = []
        self._ready: list[_Entry] = []
        self._loans: list[_Entry] = []
        self._next = 1
        self.ops = ops

    def __len__(self) -> int:
        return len(self._state)

    def entries(self) -> int:
        """Heap entries held, stale ones included (bounded by ~3x members)."""
        return len(self._waiting) + len(self._ready) + len(self._loans)

    def update(self, node: Entity, child: Entity, loan: Loan | None) -> None:
        """Insert ``child``, or re-place it if its v, vd or loan changed."""
        old = self._state.get(child)
        if old is not None and old[1] == child.v and old[2] == child.vd and old[3] == loan:
            return  # compared field by field: no tuple built (a hot path, §8)
        self._place(child, child.v * node.sum_load <= node.sum_lv, loan)  # node.eligible
        if len(self._waiting) + len(self._ready) + len(self._loans) > 3 * len(self._state) + 48:
            self._compact()

    def discard(self, child: Entity) -> None:
        """``child`` has no queued work on this model any more (its entries go stale)."""
        if self._state.pop(child, None) is not None and (
            self.entries() > 3 * len(self._state) + 48
        ):
            self._compact()

    def _place(self, child: Entity, ready: bool, loan: Loan | None) -> None:
        ticket = self._next
        self._next += 1
        self.ops.n += 1
        if ready:
            self._state[child] = (ticket, child.v, child.vd, loan)
            heapq.heappush(self._ready, (child.vd, child.seq, ticket, child))
            if loan is not None:
                self.ops.n += 1
                heapq.heappush(self._loans, (loan, child.seq, ticket, child))
        else:
            self._state[child] = (-ticket, child.v, child.vd, loan)
            heapq.heappush(self._waiting, (child.v, child.seq, -ticket, child))

    def _live(self, entry: _Entry) -> bool:
        state = self._state.get(entry[3])
        return state is not None and state[0] == entry[2]

    def _first_live(self, heap: list[_Entry]) -> Entity | None:
        """Drop stale entries off ``heap``'s top; the child of the first live one."""
        states = self._state
        while heap:
            entry = heap[0]
            state = states.get(entry[3])
            if state is not None and state[0] == entry[2]:
                return entry[3]
            heapq.heappop(heap)
            self.ops.n += 1
        return None

    def _move(self, heap: list[_Entry], child: Entity, ready: bool) -> None:
        """Take ``child``'s live entry off ``heap``'s top and place it anew."""
        heapq.heappop(heap)
        self.ops.n += 1
        self._place(child, ready, self._state[child][3])

    def _promote(self, node: Entity) -> None:
        """Move every waiting child that has become eligible to ready (the
        waiting heap's top has the smallest v: stop at the first not eligible)."""
        while (child := self._first_live(self._waiting)) is not None and node.eligible(child):
            self._move(self._waiting, child, True)

    def _top(self, node: Entity, heap: list[_Entry]) -> Entity | None:
        """The top of a ready heap once stale and no-longer-eligible entries are gone."""
        while (child := self._first_live(heap)) is not None and not node.eligible(child):
            self._move(heap, child, False)  # V fell below it: waiting again
        return child

    def pick(self, node: Entity) -> Entity | None:
        """EEVDF: the eligible child with the earliest virtual deadline; if no
        child is eligible, the one with the smallest ``v`` (furthest behind)."""
        if len(self._state) == 1:  # the common case: a producer and its own jobs
            return next(iter(self._state))
        # ``_promote`` then ``_top(node, self._ready)``, inlined with
        # ``node.eligible`` (every pool pick asks at each level; moving
        # entries between the heaps leaves the node's sums as they are).
        sum_load, sum_lv = node.sum_load, node.sum_lv
        waiting = self._waiting
        while (child := self._first_live(waiting)) is not None and child.v * sum_load <= sum_lv:
            self._move(waiting, child, True)
        ready = self._ready
        while (best := self._first_live(ready)) is not None and best.v * sum_load > sum_lv:
            self._move(ready, best, False)  # V fell below it: waiting again
        if best is not None:
            return best
        return self._first_live(self._waiting)

    def best_loan(self, node: Entity) -> Loan | None:
        """The earliest overdue job that may borrow among the eligible
        children's subtrees (docs/design.md §4.5)."""
        if len(self._state) == 1:
            ((sole, state),) = self._state.items()
            loan_of_sole = state[3]
            if loan_of_sole is None or not node.eligible(sole):
                return None
            return loan_of_sole
        self._promote(node)
        child = self._top(node, self._loans)
        if child is None:
            return None
        return self._state[child][3]

    def _compact(self) -> None:
        self.ops.n += self.entries()
        self._waiting = [e for e in self._waiting if self._live(e)]
        self._ready = [e for e in self._ready if self._live(e)]
        self._loans = [e for e in self._loans if self._live(e)]
        for heap in (self._waiting, self._ready, self._loans):
            heapq.heapify(heap)


def clamp(value: int, limit: int) -> int:
    return max(-limit, min(limit, value))


def to_ns(seconds: float) -> int:
    """Scheduler seconds -> integer nanoseconds (inf stays out: callers check)."""
    assert math.isfinite(seconds)
    return round(seconds * 1e9)


def no_credit_when_served(charged: dict[Entity, int], sums: dict[Entity, int]) -> None:
    """docs/design.md §4.7 (fairness in a batch): an entity with no job
    queued below it, all its jobs running, has all it asks for; while so it
    gains no lag on its siblings, though its share of the steps is less than
    theirs: its ``v`` rises as much as the average of the siblings that want
    more (the others' rise, so that ``V`` moves with them). Counted as
    credit, a producer whose two jobs ran beside another's six later took
    both slots the chat guard left until it was repaid (8 s of a minute in
    the Azure pool replay at 8 slots). With one slot the running job pays
    the whole step, never less than ``V`` rises, and nothing changes."""
    served: dict[Entity, list[Entity]] = {}
    for entity in charged:
        if not any(entity.queued.values()):
            assert entity.parent is not None
            served.setdefault(entity.parent, []).append(entity)
    for parent, group in served.items():
        rise_lv = parent.sum_lv - sums[parent]  # the charge's sum of load x step
        others = 0
        while group:
            load = parent.sum_load - sum(e.load for e in group)
            if load <= 0:
                group = []  # no sibling wants more: nobody to gain lag on
                break
            others = (rise_lv - sum(e.load * charged[e] for e in group)) // load
            keep = [e for e in group if charged[e] < others]
            if len(keep) == len(group):
                break
            group = keep
        for entity in group:
            gained = others - charged[entity]
            entity.v += gained
            parent.sum_lv += entity.load * gained
            if entity.v >= entity.vd:
                entity.vd = entity.v + entity.slice_v
