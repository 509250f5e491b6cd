"""Who may queue another job: the queue limits per class and per API key, fair
across keys, and ``Retry-After`` from the real queue.

The counts are kept from the scheduler's events (``QueueBook``: a counter per
class and key, updated per event), so admitting a request costs the same with
10 or 10 000 jobs queued: walking the queue per request (``Policy.queued``)
made every request, ``/health`` included, slower with each idle queued stream
(19 ms at 1 000; docs/design.md §1.11). With keys, a job's key
is the head of its producer path (``<key name>/...``, ``metadata``).

Fair admission (docs/gateway.md "Queue limits"): a class's ``queue_limit`` is
shared between the keys that queue in it. Below the limit, anyone queues. At
the limit, a key still queues while it holds less than its fair share of the
limit (the limit divided by the keys queued in the class, itself included);
the key over its share gets 429 until it is back under it. So one key that
fills a class does not shut out the others, and the class holds at most twice
its limit (the full key's jobs, plus less than a share for each other key).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from tierlm.core.jobs import Job
from tierlm.server.edge.errors import APIError
from tierlm.server.gateway.metadata import JobMeta
from tierlm.shell.events import (
    JobEnded,
    JobStarted,
    JobSubmitted,
    Requeued,
    RunEnded,
    SchedulerEvent,
)
from tierlm.shell.scheduler import Scheduler
from tierlm.shell.snapshot import JobInfo

__all__ = [
    "RETRY_AFTER_MAX",
    "RETRY_AFTER_MIN",
    "Admission",
    "QueueBook",
    "RunTimes",
    "key_of",
]

# Retry-After bounds (seconds): at least 1 (HTTP's unit), at most a minute, after
# which a client should look again rather than trust an old estimate.
RETRY_AFTER_MIN, RETRY_AFTER_MAX = 1, 60
_T = TypeVar("_T")
# Weight of the newest run in a class's average run time.
EWMA_ALPHA = 0.2


def key_of(job: Job | JobInfo) -> str:
    """The API key a job came through: the head of its producer path."""
    return job.producer.partition("/")[0]


class QueueBook:
    """The queued and running jobs, kept from the scheduler's events: counts
    per class and API key in O(1) a request (module docstring).

    Queued: from ``JobSubmitted`` or ``Requeued`` (a preempted job, or one
    held after a crash, docs/design.md §4.9: queued as the snapshot counts
    it) to ``JobStarted`` or its end (cancelled while queued). Running: from
    ``JobStarted`` to the end of the run."""

    def __init__(self) -> None:
        self.queued: dict[int, tuple[str, str]] = {}
        """Queued job id: (class, key)."""
        self.running: dict[int, tuple[Job, float]] = {}
        """Running job id: (job, started at)."""
        self.in_class: Counter[str] = Counter()
        self.key_total: Counter[str] = Counter()
        self.key_in_class: Counter[tuple[str, str]] = Counter()
        self.keys_in_class: Counter[str] = Counter()
        """Keys with a job of the class queued."""

    def on_event(self, event: SchedulerEvent) -> None:
        job = getattr(event, "job", None)
        if job is None:
            return
        if isinstance(event, JobSubmitted | Requeued):
            self.running.pop(job.id, None)
            self._queue(job)
        elif isinstance(event, JobStarted):
            self._unqueue(job.id)
            self.running[job.id] = (job, event.time)
        elif isinstance(event, JobEnded):
            self._unqueue(job.id)
            self.running.pop(job.id, None)

    def _queue(self, job: Job) -> None:
        if job.id in self.queued:
            return
        name, key = job.class_name, key_of(job)
        self.queued[job.id] = (name, key)
        self.in_class[name] += 1
        self.key_total[key] += 1
        self.key_in_class[name, key] += 1
        if self.key_in_class[name, key] == 1:
            self.keys_in_class[name] += 1

    def _unqueue(self, job_id: int) -> None:
        found = self.queued.pop(job_id, None)
        if found is None:
            return
        name, key = found
        _decrement(self.in_class, name)
        _decrement(self.key_total, key)
        _decrement(self.key_in_class, (name, key))
        if (name, key) not in self.key_in_class:
            _decrement(self.keys_in_class, name)


def _decrement(counter: Counter[_T], at: _T) -> None:
    """One fewer at ``at``; gone at 0 (the counters stay as small as the queue)."""
    counter[at] -= 1
    if not counter[at]:
        del counter[at]


class RunTimes:
    """Measured device time per run, per class (an exponentially weighted
    average): what a job ahead in the queue is expected to cost. It also
    keeps the ``QueueBook`` from the same events (the gateway's listener)."""

    def __init__(self) -> None:
        self._running: tuple[int, float] | None = None
        self._average: dict[str, float] = {}
        self.book = QueueBook()

    def on_event(self, event: SchedulerEvent) -> None:
        self.book.on_event(event)
        if isinstance(event, JobStarted):
            self._running = (event.job.id, event.time)
        elif isinstance(event, RunEnded) and self._running is not None:
            job_id, started = self._running
            if job_id == event.job.id:
                self._running = None
                seconds = event.time - started
                old = self._average.get(event.job.class_name)
                self._average[event.job.class_name] = (
                    seconds if old is None else old + EWMA_ALPHA * (seconds - old)
                )

    def averages(self) -> dict[str, float]:
        """Each measured class's average run, in seconds."""
        return dict(self._average)

    def own(self, class_name: str) -> float | None:
        """The class's own average run, None before one of it ended."""
        return self._average.get(class_name)

    def measured(self, class_name: str) -> float | None:
        """The class's average run, else the average of all classes, else None."""
        average = self._average.get(class_name)
        if average is not None:
            return average
        if self._average:
            return sum(self._average.values()) / len(self._average)
        return None

    def of(self, class_name: str) -> float:
        """``measured``, else 1 s."""
        measured = self.measured(class_name)
        return measured if measured is not None else float(RETRY_AFTER_MIN)


@dataclass(frozen=True, slots=True)
class _Counts:
    in_class: int
    """Jobs of the class queued."""
    key_in_class: int
    """The key's jobs of the class queued."""
    keys_in_class: int
    """Keys with jobs of the class queued, the asking key included."""
    key_total: int
    """The key's jobs queued, all classes."""


class Admission:
    """Decides, per request, whether its job may queue (module docstring)."""

    def __init__(
        self,
        scheduler: Callable[[], Scheduler],
        queue_limit: Callable[[str], int],
        run_times: RunTimes,
    ) -> None:
        self._scheduler = scheduler
        self._queue_limit = queue_limit
        self.run_times = run_times
        self.book = run_times.book
        # wait_ahead's classes ahead of the first match, per (class, key), for
        # one answer of ``Scheduler.queue_positions`` (the same object until
        # the next event): a client refused again and again costs one pass.
        self._ahead_of: Mapping[int, tuple[int, int]] | None = None
        self._ahead: dict[tuple[str | None, str | None], list[str] | None] = {}

    def admit(self, meta: JobMeta) -> None:
        """Return if a job of ``meta`` may queue; 429 with Retry-After otherwise."""
        counts = self._count(meta.class_name, meta.key)
        limit = self._queue_limit(meta.class_name)
        key_limit = meta.key_queue_limit
        if meta.key is not None and key_limit is not None and counts.key_total >= key_limit:
            self._refuse(
                meta,
                f"API key {meta.key!r}: {counts.key_total} jobs are queued, its limit "
                f"(queue_limit of the key) is {key_limit}",
                None,
            )
        if counts.in_class < limit:
            return
        if meta.key is None:
            self._refuse(
                meta,
                f"class {meta.class_name!r}: {counts.in_class} jobs are queued, the limit "
                f"(queue_limit) is {limit}",
                meta.class_name,
            )
        share = limit / counts.keys_in_class
        if counts.key_in_class < share:
            return  # under its fair share of a full class (module docstring)
        self._refuse(
            meta,
            f"class {meta.class_name!r}: {counts.in_class} jobs are queued, the limit "
            f"(queue_limit) is {limit}; API key {meta.key!r} holds {counts.key_in_class} of "
            f"them, its fair share is {math.ceil(share)}",
            meta.class_name,
        )

    def _refuse(self, meta: JobMeta, message: str, class_name: str | None) -> None:
        """429; Retry-After: until the first job like the one refused (of
        ``class_name``, if given, and of the key) leaves the queue."""
        retry = self.retry_after(class_name, meta.key)
        raise APIError(
            429,
            f"{message}; retry in about {retry} s",
            code="queue_full",
            reason="queue_full",
            headers={"Retry-After": str(retry)},
        )

    def _count(self, class_name: str, key: str | None) -> _Counts:
        # O(1): the book's counters (module docstring).
        book = self.book
        in_class = book.in_class[class_name]
        if key is None:
            return _Counts(in_class, 0, 1, 0)
        key_in_class = book.key_in_class[class_name, key]
        keys = book.keys_in_class[class_name] + (0 if key_in_class else 1)
        return _Counts(in_class, key_in_class, max(1, keys), book.key_total[key])

    def retry_after(self, class_name: str | None, key: str | None = None) -> int:
        """Seconds until a queued job of ``class_name`` (any, if None) and of
        ``key`` (any, if None) likely leaves the queue, 1 to 60 s (``wait_ahead``)."""
        seconds = self.wait_ahead(class_name, key)
        return int(min(RETRY_AFTER_MAX, max(RETRY_AFTER_MIN, math.ceil(seconds))))

    def wait_ahead(self, class_name: str | None, key: str | None = None) -> float:
        """The measured run times of the work ahead of the first matching job in
        the real dispatch order (``Policy.queue_order``, through the snapshot),
        plus what the running job has left.

        Before any run was measured, the run under way is the one sample there
        is: a run is taken to last at least as long as it already has (and 1 s
        at least). The running job, when its class was never measured or it
        already ran past its class's average, is taken to need as long again
        as it ran (the median remaining life of a run seen only this far).
        Otherwise a queue of 30 jobs of 4 s answered ``Retry-After: 1`` until
        the first ended, or while a 6 s run outlived a chat's 1 s average."""
        scheduler = self._scheduler()
        now = scheduler.now()
        ahead = self._classes_ahead(scheduler, class_name, key)
        if ahead is None:
            # None queued: one average run of the class frees the device for it.
            ahead = [class_name] if class_name is not None else []
        # The best-ranked running job, as the snapshot's ``running``.
        runs = self.book.running.values()
        best = min(runs, key=lambda run: scheduler.policy.tier(run[0], now), default=None)
        running = best[0] if best is not None else None
        elapsed = now - best[1] if best is not None else 0.0
        guess = max(float(RETRY_AFTER_MIN), elapsed)

        def run_of(name: str) -> float:
            measured = self.run_times.measured(name)
            return measured if measured is not None else guess

        seconds = sum(run_of(name) for name in ahead)
        if running is not None:
            own = self.run_times.own(running.class_name)
            seconds += own - elapsed if own is not None and own > elapsed else elapsed
        return seconds

    def _classes_ahead(
        self, scheduler: Scheduler, class_name: str | None, key: str | None
    ) -> list[str] | None:
        """The classes of the queued jobs before the first one of ``class_name``
        and ``key`` in dispatch order; None if none is queued. Held jobs
        (docs/design.md §4.9) have no position and count as first, as in the
        snapshot. One pass over the queue per ``queue_positions`` answer
        (a refusal after a refusal with nothing changed costs nothing)."""
        positions = scheduler.queue_positions()
        if positions is not self._ahead_of:
            self._ahead_of, self._ahead = positions, {}
        wanted = (class_name, key)
        if wanted in self._ahead:
            return self._ahead[wanted]
        placed = [
            (positions.get(job_id, (0, 0))[1], name, job_key)
            for job_id, (name, job_key) in self.book.queued.items()
        ]
        first = min(
            (
                place
                for place, name, job_key in placed
                if (class_name is None or name == class_name) and (key is None or job_key == key)
            ),
            default=None,
        )
        found = None if first is None else [name for place, name, _ in placed if place < first]
        self._ahead[wanted] = found
        return found
