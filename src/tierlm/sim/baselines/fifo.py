"""``fifo``: one queue, first come first served, no preemption (Ollama-like).

Ollama serves requests to a loaded model in arrival order and never stops one
for another; a request for another model waits its turn, then swaps.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from tierlm.core.classes import TaskClass
from tierlm.core.jobs import Job
from tierlm.core.stop_reasons import CancelReason
from tierlm.sim.baselines.base import FifoQueue, SimpleBaseline

__all__ = ["FifoPolicy"]


class FifoPolicy(SimpleBaseline):
    name = "fifo"

    def __init__(self, classes: Mapping[str, TaskClass]) -> None:
        super().__init__(classes)
        self._queue = FifoQueue()

    def submit(self, job: Job, now: float) -> None:
        self._queue.push(job)

    def requeue(self, job: Job, now: float) -> None:
        self._queue.push(job)  # only pause() preempts; back to the front

    def remove(self, job: Job, now: float) -> None:
        self._queue.discard(job)

    def pick(self, now: float, loaded_model: str | None) -> Job | None:
        return self._queue.pop()

    def unpick(self, job: Job, now: float) -> None:
        self._queue.push(job)  # by its id: where it was

    def should_preempt(
        self, running: Job, now: float, loaded_model: str | None
    ) -> CancelReason | None:
        return None

    def queue_order(self, now: float, loaded_model: str | None) -> list[Job]:
        return self._queue.in_order()

    def queued(self) -> Iterator[Job]:
        return iter(self._queue)

    def __len__(self) -> int:
        return len(self._queue)
