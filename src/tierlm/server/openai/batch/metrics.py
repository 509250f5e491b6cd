"""The Batch API's series on ``/metrics``, in the gateway's registry.

- ``tierlm_batches_total{status}``: batches created, resumed after a restart,
  and ended, by final status (completed, expired, cancelled);
- ``tierlm_batch_requests_total{outcome}``: a batch's requests answered:
  completed (a 200), failed (another status, or a bad input line), expired,
  cancelled;
- ``tierlm_batches_running``, ``tierlm_batch_requests_in_flight``: read at
  scrape time (the requests now jobs of the scheduler).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tierlm.server.openai.batch.store import BatchRecord

__all__ = ["BatchMetrics"]


class BatchMetrics:
    def __init__(self, registry: CollectorRegistry, counts: Callable[[], tuple[int, int]]) -> None:
        self.batches = Counter(
            "tierlm_batches",
            "Batches created, resumed after a restart, or ended (by final status)",
            ["status"],
            registry=registry,
        )
        self.requests = Counter(
            "tierlm_batch_requests",
            "Requests of batches answered, by outcome",
            ["outcome"],
            registry=registry,
        )
        registry.register(_Running(counts))

    def batch_status(self, status: str) -> None:
        self.batches.labels(status).inc()

    def request_done(self, record: BatchRecord, outcome: str) -> None:
        self.requests.labels(outcome).inc()

    def invalid_lines(self, count: int) -> None:
        if count:
            self.requests.labels("failed").inc(count)


class _Running(Collector):
    def __init__(self, counts: Callable[[], tuple[int, int]]) -> None:
        self._counts = counts

    def describe(self) -> list[Metric]:
        return []  # read at scrape time only

    def collect(self) -> Iterator[Metric]:
        running, in_flight = self._counts()
        yield GaugeMetricFamily("tierlm_batches_running", "Batches running now", value=running)
        yield GaugeMetricFamily(
            "tierlm_batch_requests_in_flight",
            "Requests of batches now jobs of the scheduler",
            value=in_flight,
        )
