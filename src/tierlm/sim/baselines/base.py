"""Plumbing shared by the baselines: ``decide`` for a policy written one
sequence at a time, the parts of the Policy protocol that the simple ones
answer the same way (no vruntime, no budget, no timer), and the replay of a
same-model-first picker for ``queue_order``."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence

from tierlm.core.classes import TaskClass
from tierlm.core.device import Decision, Device
from tierlm.core.jobs import Foreground, Job
from tierlm.core.slots import plan
from tierlm.core.stop_reasons import CancelReason

__all__ = ["FifoQueue", "OneAtATime", "SimpleBaseline", "same_model_first"]


class OneAtATime:
    """``decide`` for a baseline written one sequence at a time: ``pick``
    (removes its answer from the queue), ``unpick`` (puts it back exactly
    where it was), ``should_preempt``, ``started``, ``next_wakeup``. The
    k-slot plan is the shared one (``tierlm.core.slots.plan``), so a baseline
    fills a batched device as tierlm does, by its own order; it has no chat
    latency guard (that rule is tierlm's, docs/design.md §4.7)."""

    _peeked: Job | None = None

    def decide(self, now: float, device: Device) -> Decision:
        self._peeked = None
        try:
            return plan(self, now, device)
        finally:
            self._restore(now)

    def _restore(self, now: float) -> None:
        """A job peeked at but not taken goes back where it was."""
        peeked, self._peeked = self._peeked, None
        if peeked is not None:
            self.unpick(peeked, now)

    def peek(self, now: float, loaded_model: str | None) -> Job | None:
        if self._peeked is None:
            self._peeked = self.pick(now, loaded_model)
        return self._peeked

    def take(self, job: Job, now: float) -> None:
        assert job is self._peeked
        self._peeked = None
        self.started(job, now)

    def pick(self, now: float, loaded_model: str | None) -> Job | None:
        raise NotImplementedError

    def unpick(self, job: Job, now: float) -> None:
        raise NotImplementedError

    def should_preempt(
        self, running: Job, now: float, loaded_model: str | None
    ) -> CancelReason | None:
        raise NotImplementedError

    def started(self, job: Job, now: float) -> None:
        raise NotImplementedError

    def next_wakeup(self, now: float) -> float | None:
        raise NotImplementedError

    def tier(self, job: Job, now: float) -> int:
        raise NotImplementedError


class FifoQueue:
    """Jobs in submit order (the job id), lazily deleted.

    A re-queued job keeps its id, so it goes back to the front, as the shell's
    pause() expects of every policy (docs/design.md §4.9).
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

    def in_order(self) -> list[Job]:
        """The jobs in the order ``pop`` gives them."""
        return sorted(self._live.values(), key=lambda job: job.id)


class SimpleBaseline(OneAtATime):
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


def same_model_first(groups: Iterable[Sequence[Job]], loaded_model: str | None) -> list[Job]:
    """The order of a picker that empties ``groups`` one after the other and,
    inside a group (already in its own order), takes the first job on the
    loaded model, else the first job, which then becomes the loaded model.
    O(n) after the groups are sorted (one cursor per model)."""
    order: list[Job] = []
    model = loaded_model
    for group in groups:
        by_model: dict[str, list[int]] = {}
        for i, job in enumerate(group):
            by_model.setdefault(job.model_id, []).append(i)
        heads = dict.fromkeys(by_model, 0)
        taken = [False] * len(group)
        first = 0
        for _ in range(len(group)):
            choice = None
            if model is not None and model in by_model:
                same, head = by_model[model], heads[model]
                while head < len(same) and taken[same[head]]:
                    head += 1
                heads[model] = head
                if head < len(same):
                    choice = same[head]
            if choice is None:
                while taken[first]:
                    first += 1
                choice = first
            taken[choice] = True
            order.append(group[choice])
            model = group[choice].model_id
    return order
