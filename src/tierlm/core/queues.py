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
import math
from collections.abc import Callable
from typing import TypeVar

from tierlm.core.classes import TaskClass, Tier
from tierlm.core.jobs import Job, Subject

__all__ = ["ClassQueue", "Live", "ModelQueue"]

Live = dict[int, int]
"""job id -> version of every queued job; an entry is live iff its version matches."""

_FifoEntry = tuple[int, int, int]  # (job id = submit order, job id, version)
_DeadlineEntry = tuple[float, int, int]  # (deadline, job id, version)
_ProducerEntry = tuple[float, int, str]  # (vruntime, oldest job id, producer)


_K = TypeVar("_K", int, float)


def _clean(heap: list[tuple[_K, int, int]], live: Live) -> None:
    while heap and live.get(heap[0][1]) != heap[0][2]:
        heapq.heappop(heap)


class ClassQueue:
    """The queued jobs of one task class on one model."""

    __slots__ = (
        "_fair_epoch",
        "_producer_heap",
        "_producer_of",
        "base",
        "cache_epoch",
        "cache_ok",
        "cached",
        "count",
        "deadlines",
        "fifo",
        "live",
        "name",
        "producer_counts",
        "producers",
        "subjects",
        "task_class",
    )

    def __init__(self, task_class: TaskClass, live: Live) -> None:
        self.task_class = task_class
        self.name = task_class.name
        self.base = int(task_class.tier)
        self.live = live
        self.count = 0
        self.fifo: list[_FifoEntry] = []
        self.subjects: dict[Subject, list[_FifoEntry]] = {}
        # T3 classes: every job, by (deadline or +inf). T4 classes: overdue jobs.
        self.deadlines: list[_DeadlineEntry] = []
        self.producers: dict[str, list[_FifoEntry]] = {}
        self.producer_counts: dict[str, int] = {}
        self._producer_heap: list[_ProducerEntry] = []
        self._producer_of: dict[int, str] = {}
        self._fair_epoch = -1
        # The policy's cache of this class's best job at its base tier: valid
        # until the queue changes, the vruntime scale changes (cache_epoch), or
        # the policy clears it when a charge worsens the cached job's producer.
        self.cached: tuple[int, tuple[float, ...], int] | None = None
        self.cache_ok = False
        self.cache_epoch = -1

    def add(self, job: Job, version: int, vruntime: float) -> None:
        self.cache_ok = False
        entry = (job.id, job.id, version)
        heapq.heappush(self.fifo, entry)
        if job.subject is not None:
            heapq.heappush(self.subjects.setdefault(job.subject, []), entry)
        self.count += 1
        tier = self.task_class.tier
        if tier == Tier.T3:
            deadline = job.deadline if job.deadline is not None else math.inf
            heapq.heappush(self.deadlines, (deadline, job.id, version))
        elif tier == Tier.T4:
            producer = job.producer
            heapq.heappush(self.producers.setdefault(producer, []), entry)
            self.producer_counts[producer] = self.producer_counts.get(producer, 0) + 1
            self._producer_of[job.id] = producer
            # A new or re-queued job can be its producer's new oldest: keys only
            # ever get better through here, so push (docs/design.md §4: re-queue to front).
            heapq.heappush(self._producer_heap, (vruntime, job.id, producer))

    def mark_overdue(self, job: Job, version: int) -> None:
        """A T4 job's deadline passed: it is T3 now (docs/design.md §4 rule 4)."""
        assert job.deadline is not None
        self.cache_ok = False
        heapq.heappush(self.deadlines, (job.deadline, job.id, version))

    def removed(self, job: Job) -> None:
        """``job`` left the queue (its version is already gone from ``live``)."""
        self.cache_ok = False
        self.count -= 1
        producer = self._producer_of.pop(job.id, None)
        if producer is not None:
            left = self.producer_counts[producer] - 1
            if left:
                self.producer_counts[producer] = left
            else:
                del self.producer_counts[producer]
                del self.producers[producer]
        if self.count == 0:
            # Drop all stale entries at once; keeps memory bounded by queued jobs.
            self.fifo.clear()
            self.subjects.clear()
            self.deadlines.clear()
            self._producer_heap.clear()

    def oldest(self) -> int | None:
        _clean(self.fifo, self.live)
        return self.fifo[0][0] if self.fifo else None

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

    def fairest(self, vruntime: Callable[[str], float], epoch: int) -> tuple[float, int] | None:
        """(vruntime, job id) of the smallest-vruntime producer's oldest job."""
        heap = self._producer_heap
        if epoch != self._fair_epoch:
            # vruntimes were all halved: same order, new keys; rebuild (O(producers)).
            self._fair_epoch = epoch
            heap.clear()
            for producer in self.producer_counts:
                oldest = self._producer_oldest(producer)
                if oldest is not None:
                    heap.append((vruntime(producer), oldest, producer))
            heapq.heapify(heap)
        while heap:
            vr, job_id, producer = heap[0]
            if producer in self.producer_counts:
                oldest = self._producer_oldest(producer)
                current = vruntime(producer)
                if oldest == job_id and current == vr:
                    return vr, job_id
                # Stale: the producer ran (vruntime grew) or its oldest job left.
                # Either way its key only got worse, so re-pushing the true key
                # keeps the heap's minimum right (lazy deletion invariant).
                heapq.heapreplace(
                    heap, (current, oldest if oldest is not None else job_id, producer)
                )
            else:
                heapq.heappop(heap)
        return None

    def _producer_oldest(self, producer: str) -> int | None:
        heap = self.producers.get(producer)
        if not heap:
            return None
        _clean(heap, self.live)
        return heap[0][0] if heap else None


class ModelQueue:
    """The queued jobs of one model, by class."""

    __slots__ = ("by_class", "count", "live")

    def __init__(self, live: Live) -> None:
        self.live = live
        self.by_class: dict[str, ClassQueue] = {}
        self.count = 0

    def queue_for(self, task_class: TaskClass) -> ClassQueue:
        queue = self.by_class.get(task_class.name)
        if queue is None:
            queue = self.by_class[task_class.name] = ClassQueue(task_class, self.live)
        return queue
