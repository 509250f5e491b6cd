"""``strict-priority``: priority by class, preemption, nothing else.

As an inference engine does it (vLLM's priority scheduling policy, seed
§"Prior art"): each request has a priority, the highest runs, an arrival of a
higher priority preempts a lower one, and preempted work is recomputed. Here
the priority is the class's base tier (chat 0 < extract 2 < nataraj, gana 4);
ties go to the earlier submit. No foreground, no deadlines, no fairness, no
budget, no model affinity.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping

from tierlm.core.classes import TaskClass
from tierlm.core.jobs import Job
from tierlm.core.stop_reasons import CancelReason
from tierlm.sim.baselines.base import SimpleBaseline

__all__ = ["StrictPriorityPolicy"]


class StrictPriorityPolicy(SimpleBaseline):
    name = "strict-priority"

    def __init__(self, classes: Mapping[str, TaskClass]) -> None:
        super().__init__(classes)
        self._heap: list[tuple[int, int, Job]] = []
        self._live: dict[int, Job] = {}

    @staticmethod
    def priority(job: Job) -> int:
        return int(job.task_class.tier)

    def submit(self, job: Job, now: float) -> None:
        self._live[job.id] = job
        heapq.heappush(self._heap, (self.priority(job), job.id, job))

    def requeue(self, job: Job, now: float) -> None:
        self.submit(job, now)  # keeps its id: front of its priority

    def remove(self, job: Job, now: float) -> None:
        self._live.pop(job.id, None)

    def _clean(self) -> None:
        heap, live = self._heap, self._live
        while heap and heap[0][1] not in live:
            heapq.heappop(heap)

    def pick(self, now: float, loaded_model: str | None) -> Job | None:
        self._clean()
        if not self._heap:
            return None
        _p, _id, job = heapq.heappop(self._heap)
        del self._live[job.id]
        return job

    def unpick(self, job: Job, now: float) -> None:
        self.submit(job, now)  # by (priority, id): where it was

    def should_preempt(
        self, running: Job, now: float, loaded_model: str | None
    ) -> CancelReason | None:
        self._clean()
        # vLLM's priority preemption stops the running request at once, in its
        # prompt's prefill too: no yield (docs/design.md §4.6).
        if self._heap and self._heap[0][0] < self.priority(running):
            return CancelReason.PREEMPTED
        return None

    def queue_order(self, now: float, loaded_model: str | None) -> list[Job]:
        return sorted(self._live.values(), key=lambda job: (self.priority(job), job.id))

    def queued(self) -> Iterator[Job]:
        return iter(list(self._live.values()))

    def __len__(self) -> int:
        return len(self._live)
