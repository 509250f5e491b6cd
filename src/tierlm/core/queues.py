"""Indexed queues that answer "best job of this class on this model" in O(log n).

The seed's picker scans every queued job on every pick (O(n)); a 100 000-chunk
backfill makes that quadratic (docs/design.md §6.9). Here every (model, class) pair has
its own heaps, with lazy deletion: removing a job only forgets its version, and
stale heap entries are dropped when they reach the top.

A job's entries carry the version under which it was queued; a job that is
re-queued gets a new version, so entries of its earlier stay never come back.
"""

from __future__ import annotations

import heapq
from typing import Any, TypeVar

from tierlm.core.classes import T0, T1, T2, T3, T4, TaskClass
from tierlm.core.jobs import Foreground, Job, Person, Subject, due_or_never
from tierlm.core.persons_in_turn import ChatTurns

__all__ = [
    "T3_AFTER_POOL",
    "Candidate",
    "ClassQueue",
    "Live",
    "ModelQueue",
    "Parts",
    "best_of",
    "running_candidate",
]

Live = dict[int, int]
"""job id -> version of every queued job; an entry is live iff its version matches."""

_FifoEntry = tuple[int, int, int]  # (job id = submit order, job id, version)
_DeadlineEntry = tuple[float, int, int]  # (due time, job id, version)

Candidate = tuple[int, tuple[Any, ...], int]
"""(rank, order key, job id): the smaller, the sooner. Keys are compared only
within one rank: (id,) for FIFO tiers, (due, id) for T3, the path's EEVDF
ranks then the id for the pool (T4)."""

T3_AFTER_POOL = 5
"""The rank of overdue work while the fair pool is owed its floor: after the
pool (docs/design.md §4.5)."""


_K = TypeVar("_K", int, float)


def _clean(heap: list[tuple[_K, int, int]], live: Live) -> None:
    while heap and live.get(heap[0][1]) != heap[0][2]:
        heapq.heappop(heap)


class ClassQueue:
    """The queued jobs of one task class on one model, in submit order.

    FIFO tiers (T0-T2, and T1 for the foreground of any class) take the
    oldest; a T3 class takes the earliest due time (EDF). A fair class's T4
    and T3 order live in the fair pool (``tierlm.core.fairness``); here it
    keeps only the submit order the foreground rule needs.
    """

    __slots__ = (
        "base",
        "cache_ok",
        "cached",
        "count",
        "deadlines",
        "fifo",
        "live",
        "name",
        "people",
        "subjects",
        "task_class",
        "turns",
    )

    def __init__(self, task_class: TaskClass, live: Live, turns: ChatTurns) -> None:
        self.task_class = task_class
        self.turns = turns
        # T0: each person's jobs in submit order (persons in turn, docs/design.md §4.2).
        self.people: dict[Person, list[_FifoEntry]] = {}
        self.name = task_class.name
        self.base = int(task_class.tier)
        self.live = live
        self.count = 0
        self.fifo: list[_FifoEntry] = []
        self.subjects: dict[Subject, list[_FifoEntry]] = {}
        # T3 classes: every job, by due time (``NEVER`` without a deadline).
        self.deadlines: list[_DeadlineEntry] = []
        # The policy's cache of this class's best job at its base tier: valid
        # until the queue changes.
        self.cached: Candidate | None = None
        self.cache_ok = False

    def add(self, job: Job, version: int) -> None:
        self.cache_ok = False
        entry = (job.id, job.id, version)
        heapq.heappush(self.fifo, entry)
        if job.subject is not None:
            heapq.heappush(self.subjects.setdefault(job.subject, []), entry)
        if self.base == T0:
            heapq.heappush(self.people.setdefault(job.chat_person, []), entry)
        self.count += 1
        if self.base == T3:
            heapq.heappush(self.deadlines, (due_or_never(job), job.id, version))

    def removed(self, job: Job) -> None:
        """``job`` left the queue (its version is already gone from ``live``)."""
        self.cache_ok = False
        self.count -= 1
        if self.count == 0:
            # Drop all stale entries at once; keeps memory bounded by queued jobs.
            self.fifo.clear()
            self.subjects.clear()
            self.deadlines.clear()
            self.people.clear()

    def oldest(self) -> int | None:
        heap, live = self.fifo, self.live
        while heap and live.get(heap[0][1]) != heap[0][2]:  # ``_clean``, inlined
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def oldest_with_subject(self, subject: Subject) -> int | None:
        heap = self.subjects.get(subject)
        if heap is None:
            return None
        _clean(heap, self.live)
        if not heap:
            del self.subjects[subject]
            return None
        return heap[0][0]

    def earliest_deadline(self) -> tuple[float, int] | None:
        heap = self.deadlines
        _clean(heap, self.live)
        return (heap[0][0], heap[0][1]) if heap else None

    def next_person(self) -> Candidate | None:
        """T0: the oldest job of the person served least recently (docs/design.md
        §4.2); key (its key's last turn, its own, the job's id)."""
        best: Candidate | None = None
        for person, heap in list(self.people.items()):
            _clean(heap, self.live)
            if not heap:
                del self.people[person]
                continue
            head = heap[0][0]
            candidate = (T0, (*self.turns.rank(person), head), head)
            if best is None or candidate < best:
                best = candidate
        return best

    def base_candidate(self) -> Candidate | None:
        """The best job at the class's own tier (persons in turn for T0, FIFO,
        or EDF for T3), cached: one event changes one class queue (not for T0:
        a chat starting anywhere changes the turns)."""
        if self.base == T0:
            return self.next_person()
        if self.cache_ok:
            return self.cached
        candidate: Candidate | None = None
        if self.base <= T2:
            oldest = self.oldest()
            candidate = (self.base, (oldest,), oldest) if oldest is not None else None
        else:
            earliest = self.earliest_deadline()
            if earliest is not None:
                candidate = (T3, earliest, earliest[1])
        self.cached, self.cache_ok = candidate, True
        return candidate


class ModelQueue:
    """The queued jobs of one model, by class."""

    __slots__ = ("asked", "by_class", "count", "live", "parts", "turns")

    def __init__(self, live: Live, turns: ChatTurns) -> None:
        self.live = live
        self.turns = turns
        self.by_class: dict[str, ClassQueue] = {}
        self.count = 0
        # ``best``'s answer in parts (``find_parts``) and what they were
        # found for (the foreground, the floor, the persons' turns): a step
        # changes one or two models' queues, not all (``changed``), and the
        # skipped classes, which go back and forth as a budget fills and
        # empties, are applied to the parts at each answer. ``model_scan``
        # reads them inline.
        self.parts: Parts = (None, ())
        self.asked: tuple[Any, ...] | None = None

    def changed(self) -> None:
        """A job came or left (``JobBook``): ``best`` asks its queues again."""
        self.asked = None

    def queue_for(self, task_class: TaskClass) -> ClassQueue:
        queue = self.by_class.get(task_class.name)
        if queue is None:
            queue = self.by_class[task_class.name] = ClassQueue(task_class, self.live, self.turns)
        return queue

    def best(
        self, skip: frozenset[str], foreground: Foreground | None, floor_owed: bool
    ) -> Candidate | None:
        """The best queued job of this model outside the pool's own order:
        T0, the foreground (T1), T2 and T3 classes (docs/design.md §4.1 (rules 1-3)),
        none of a class in ``skip`` at its own tier. Hot path: plain ints."""
        asked = (foreground, floor_owed, self.turns.latest)
        if asked == self.asked:
            fixed, named = self.parts
        else:
            fixed, named = self.find_parts(foreground, floor_owed, asked)
        return best_of(fixed, named, skip)

    def find_parts(
        self, foreground: Foreground | None, floor_owed: bool, asked: tuple[Any, ...]
    ) -> Parts:
        """``best``'s parts found anew, and kept (``asked``: what for): the
        best candidate no skipped class can remove (a person's, T0, or the
        foreground's, T1), and each other class's best at its own tier, by
        name. ``best`` for any ``skip`` is the least of the first and of the
        others not skipped (``best_of``): candidates never tie (each names
        its own job), so the order they are compared in does not matter."""
        fixed: Candidate | None = None
        named: list[tuple[str, Candidate]] = []
        fg_class = foreground.class_name if foreground is not None else None
        for queue in self.by_class.values():
            if queue.count == 0:
                continue
            base = queue.base
            if queue.name == fg_class and base != T0:
                assert foreground is not None
                # Rule 2: the foreground's jobs are T1 whatever their budget
                # (a person is looking at them). If any match, the class's
                # other jobs (lower tiers) cannot beat them.
                subject = foreground.subject
                if subject is None:
                    oldest = queue.oldest()
                elif subject in queue.subjects:
                    oldest = queue.oldest_with_subject(subject)
                else:
                    oldest = None  # none of its jobs is about the subject
                if oldest is not None:
                    candidate: Candidate = (T1, (oldest,), oldest)
                    if fixed is None or candidate < fixed:
                        fixed = candidate
                    continue
            if base >= T4:
                continue  # the pool's own order (``PoolPick``)
            # ``base_candidate``'s cache asked inline (T0 never keeps one).
            found = queue.cached if queue.cache_ok else queue.base_candidate()
            if found is None:
                continue
            if base == T3 and floor_owed:
                found = (T3_AFTER_POOL, found[1], found[2])
            if base == T0:
                if fixed is None or found < fixed:
                    fixed = found
            else:
                named.append((queue.name, found))
        parts = self.parts = (fixed, tuple(named))
        self.asked = asked
        return parts


Parts = tuple[Candidate | None, tuple[tuple[str, Candidate], ...]]
"""``ModelQueue.find_parts``: the best candidate no skip removes, and each
skippable class's best, by name."""


def best_of(
    fixed: Candidate | None, named: tuple[tuple[str, Candidate], ...], skip: frozenset[str]
) -> Candidate | None:
    """The least of ``fixed`` and of ``named``'s candidates whose class is
    not in ``skip`` (``ModelQueue.best``)."""
    best = fixed
    for name, candidate in named:
        if name not in skip and (best is None or candidate < best):
            best = candidate
    return best


def running_candidate(rank: int, job: Job, skip: frozenset[str]) -> Candidate | None:
    """The order key of a running job at ``rank``, as the queues would key it,
    unless it is in the pool's own order (then the pool compares it,
    ``FairPool.best``) or its class is skipped (a budget)."""
    if rank >= T2 and job.class_name in skip:
        return None
    if rank in (T3, T3_AFTER_POOL):
        return (rank, (due_or_never(job), job.id), job.id)
    if rank == T4:
        return None
    return (rank, (job.id,), job.id)
