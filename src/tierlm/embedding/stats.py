"""What the embedding lane counts: ``LaneStats`` snapshots, and the observer
that a metrics system plugs in for per-batch histograms (docs/design.md §5)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["BatchObserver", "LaneCounters", "LaneStats"]

# p50/p99 are taken over the most recent texts only, so ``stats()`` stays cheap
# and reflects the lane's current state rather than its whole history.
LATENCY_WINDOW = 1024


class BatchObserver(Protocol):
    """Told of every batch that ran; the gateway's Prometheus histograms are one
    (``tierlm.server.gateway.metrics``). Called on the lane's event loop; must not raise."""

    def batch_ran(self, size: int, latencies: Sequence[float]) -> None:
        """A batch of ``size`` texts ended; ``latencies`` are its embedded texts'
        seconds from their ``embed`` call to their vector (not the failed ones')."""


@dataclass(frozen=True, slots=True)
class LaneStats:
    """A snapshot of the lane, for ``/metrics`` and the dashboard.

    Counters are totals since the lane was made; latencies are loop-clock
    seconds from the ``embed``/``embed_many`` call (so including any pushback
    wait) to the text's vector.
    """

    queue_depth: int
    """Texts accepted and waiting for a batch."""
    max_queue: int
    waiting_callers: int
    """Callers held back by pushback, waiting for room in the queue."""
    in_flight_batches: int
    in_flight_texts: int
    concurrency: int
    max_batch: int
    accepted: int
    """Texts admitted to the queue."""
    embedded: int
    """Texts whose batch succeeded."""
    failed: int
    """Texts the embedder failed on (alone: a failed batch is retried in parts)."""
    dropped: int
    """Texts removed before their batch started: caller cancelled, or lane closed."""
    rejected: int
    """Texts refused with :class:`LaneFull` (``nowait``)."""
    pushbacks: int
    """Times a caller had to wait for room in the queue."""
    truncated: int
    """Texts cut to ``max_chars`` characters."""
    batches: int
    """Batches run to the end, failed ones included."""
    failed_batches: int
    """Batches with a text that failed."""
    batch_sizes: Mapping[int, int]
    """Batch size -> number of batches of that size."""
    peak_queue_depth: int
    peak_in_flight_batches: int
    latency_count: int
    latency_sum: float
    latency_p50: float | None
    """Over the last ``LATENCY_WINDOW`` texts; None before the first."""
    latency_p99: float | None
    closed: bool

    @property
    def mean_batch_size(self) -> float | None:
        if not self.batches:
            return None
        return sum(size * n for size, n in self.batch_sizes.items()) / self.batches


class LaneCounters:
    """The lane's running totals (mutated by the lane, on its loop)."""

    def __init__(self) -> None:
        self.accepted = 0
        self.embedded = 0
        self.failed = 0
        self.dropped = 0
        self.rejected = 0
        self.pushbacks = 0
        self.truncated = 0
        self.batches = 0
        self.failed_batches = 0
        self.batch_sizes: dict[int, int] = {}
        self.peak_queue = 0
        self.peak_in_flight = 0
        self.latency_count = 0
        self.latency_sum = 0.0
        self.recent_latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)

    def batch_ran(self, size: int, latencies: Sequence[float], *, failed: int) -> None:
        """A batch ended, with its embedded texts' latencies and the number of
        its texts that failed (none embedded if it was stopped by the loop's
        shutdown)."""
        self.batches += 1
        self.batch_sizes[size] = self.batch_sizes.get(size, 0) + 1
        self.embedded += len(latencies)
        if failed:
            self.failed_batches += 1
            self.failed += failed
        self.latency_count += len(latencies)
        self.latency_sum += sum(latencies)
        self.recent_latencies.extend(latencies)

    def percentiles(self) -> tuple[float | None, float | None]:
        """p50 and p99 of the recent latencies."""
        recent = sorted(self.recent_latencies)
        return _percentile(recent, 0.50), _percentile(recent, 0.99)


def _percentile(ordered: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an already sorted list."""
    if not ordered:
        return None
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]
