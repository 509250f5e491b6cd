"""Per-class percentiles of the wait and the time to first token, from the
histograms ``/metrics`` exports (``tierlm_wait_seconds``,
``tierlm_time_to_first_token_seconds``), estimated as Prometheus'
``histogram_quantile`` does: linear within the bucket the rank falls in. So
the dashboard and a Grafana panel on ``/metrics`` show the same figures."""

from __future__ import annotations

import math
from typing import Any

from prometheus_client import Histogram

__all__ = ["QUANTILES", "class_percentiles", "quantile"]

QUANTILES = (0.5, 0.95, 0.99)


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """``q`` of cumulative ``buckets`` [(upper bound, count)], sorted, the
    last one +Inf; None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower  # beyond the last finite bucket: its bound, as Prometheus
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def _by_class(histogram: Histogram) -> dict[str, list[tuple[float, float]]]:
    found: dict[str, list[tuple[float, float]]] = {}
    for metric in histogram.collect():
        for sample in metric.samples:
            if sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                found.setdefault(sample.labels["class"], []).append((bound, sample.value))
    return {name: sorted(buckets) for name, buckets in found.items()}


def class_percentiles(histograms: dict[str, Histogram]) -> dict[str, dict[str, Any]]:
    """``{class: {name: {"count", "p50", "p95", "p99"}}}`` for each histogram by name."""
    out: dict[str, dict[str, Any]] = {}
    for name, histogram in histograms.items():
        for class_name, buckets in _by_class(histogram).items():
            count = buckets[-1][1] if buckets else 0
            if not count:
                continue
            figures: dict[str, Any] = {"count": int(count)}
            for q in QUANTILES:
                figures[f"p{round(q * 100)}"] = quantile(q, buckets)
            out.setdefault(class_name, {})[name] = figures
    return out
