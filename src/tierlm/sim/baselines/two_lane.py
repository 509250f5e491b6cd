"""``two-lane``: the seed's old ModelTaskQueue, the cause of issue #118.

Seed §"Why": "a coarse two-lane queue (runHigh / runLow + pauseLowPriority) in
lib/data/datasources/llm/local_inference_queue.dart. Nataraj was submitting
with highPriority: true to bypass the Shiv-tab pause — which put it on the same
lane as chat, so chat waited FIFO behind it."

- Two FIFO lanes; the high lane always goes first; nothing is preempted.
- ``highPriority`` is not a job attribute in tierlm: it is derived from the
  class here. The high lane holds ``chat`` (the Shiv chat) and ``nataraj``
  (the ``highPriority: true`` of the bug); everything else is low.
- ``pauseLowPriority``: the low lane is paused while the chat surface is open.
  The simulator's workloads say so through the scheduler's foreground: they
  call ``set_foreground("chat")`` when the person opens chat and clear or
  change it when they leave. While paused, a low job already running finishes
  (no preemption) and none starts, even if the device would idle.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping

from tierlm.core.classes import TaskClass
from tierlm.core.jobs import Job
from tierlm.core.stop_reasons import CancelReason
from tierlm.sim.baselines.base import FifoQueue, SimpleBaseline

__all__ = ["DEFAULT_HIGH_CLASSES", "TwoLanePolicy"]

# Seed §"Why": chat used runHigh; Nataraj passed highPriority: true.
DEFAULT_HIGH_CLASSES = frozenset({"chat", "nataraj"})
# The class whose foreground means "the chat surface is open" (the Shiv tab).
CHAT_SURFACE = "chat"


class TwoLanePolicy(SimpleBaseline):
    name = "two-lane"

    def __init__(
        self,
        classes: Mapping[str, TaskClass],
        high_classes: Collection[str] = DEFAULT_HIGH_CLASSES,
        chat_surface: str = CHAT_SURFACE,
    ) -> None:
        super().__init__(classes)
        self.high_classes = frozenset(high_classes)
        self.chat_surface = chat_surface
        self._high = FifoQueue()
        self._low = FifoQueue()

    def _lane(self, job: Job) -> FifoQueue:
        return self._high if job.class_name in self.high_classes else self._low

    @property
    def low_paused(self) -> bool:
        """pauseLowPriority(): the chat surface is open."""
        return self.foreground is not None and self.foreground.class_name == self.chat_surface

    def submit(self, job: Job, now: float) -> None:
        self._lane(job).push(job)

    def requeue(self, job: Job, now: float) -> None:
        self._lane(job).push(job)  # only pause() preempts; back to the front

    def remove(self, job: Job, now: float) -> None:
        self._lane(job).discard(job)

    def pick(self, now: float, loaded_model: str | None) -> Job | None:
        job = self._high.pop()
        if job is None and not self.low_paused:
            job = self._low.pop()
        return job

    def unpick(self, job: Job, now: float) -> None:
        self._lane(job).push(job)  # by its id: where it was

    def should_preempt(
        self, running: Job, now: float, loaded_model: str | None
    ) -> CancelReason | None:
        return None

    def tier(self, job: Job, now: float) -> int:
        # Lanes shown as tiers: high lane T0, low lane T4.
        return 0 if job.class_name in self.high_classes else 4

    def queue_order(self, now: float, loaded_model: str | None) -> list[Job]:
        # The low lane after the high one (while the chat surface is open it
        # waits for the surface to close, and then comes in this order).
        return [*self._high.in_order(), *self._low.in_order()]

    def queued(self) -> Iterator[Job]:
        return iter([*self._high, *self._low])

    def __len__(self) -> int:
        return len(self._high) + len(self._low)
