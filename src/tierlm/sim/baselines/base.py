"""Plumbing shared by the simple baselines: the parts of the Policy protocol
that they answer the same way (no vruntime, no budget, no timer)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping

from tierlm.core.classes import TaskClass
from tierlm.core.jobs import Foreground, Job

__all__ = ["FifoQueue", "SimpleBaseline"]


class FifoQueue:
    """Jobs in submit order (the job id), lazily deleted.

    A re-queued job keeps its id, so it goes back to the front, as the shell's
    pause() expects of every policy (docs/design.md §4 re-queue).
    """

    __slots__ = ("_heap", "_live")

    def __init__(self) -> None:
        self._heap: list[tuple[int, Job]] = []
        self._live: dict[int, Job] = {}

    def push(self, job: Job) -> None:
        self._live[job.id] = job
        heapq.heappush(self._heap, (job.id, job))

    def discard(self, job: Job) -> bool:
        return self._live.pop(job.id, None) is not None

    def _clean(self) -> None:
        heap, live = self._heap, self._live
        while heap and heap[0][0] not in live:
            heapq.heappop(heap)

    def peek(self) -> Job | None:
        self._clean()
        return self._heap[0][1] if self._heap else None

    def pop(self) -> Job | None:
        self._clean()
        if not self._heap:
            return None
        _id, job = heapq.heappop(self._heap)
        del self._live[job.id]
        return job

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[Job]:
        return iter(list(self._live.values()))


class SimpleBaseline:
    """A policy that keeps no vruntime, no budget and never wakes by itself."""

    name = "baseline"

    def __init__(self, classes: Mapping[str, TaskClass]) -> None:
        self.classes = dict(classes)
        self.foreground: Foreground | None = None

    def set_foreground(self, foreground: Foreground | None, now: float) -> None:
        self.foreground = foreground

    def started(self, job: Job, now: float) -> None:
        return None

    def finished(self, job: Job, now: float) -> None:
        return None

    def swapped(self, model_id: str, seconds: float, now: float) -> None:
        return None  # no baseline weighs swap times

    def next_wakeup(self, now: float) -> float | None:
        return None

    def tier(self, job: Job, now: float) -> int:
        # These baselines have no effective tiers; the class's base tier is what
        # snapshots show.
        return int(job.task_class.tier)

    def vruntimes(self, now: float) -> dict[str, float]:
        return {}

    def budget_shares(self, now: float) -> dict[str, float]:
        return {}
