"""The wait and the time to first token per class over the last minutes, for
the dashboard: exact percentiles of the samples in its window.

``/metrics``' histograms (``percentiles``) count everything since the start,
which a scraper wants (Prometheus takes rates over its own windows); an
operator looking at the page wants now: with all-time figures an incident an
hour ago still showed as today's p99. So the dashboard reads these, over its
``dashboard_window``; the samples are kept an hour at most and bounded in
number per class (a flood of jobs cannot grow them).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["KEEP_SAMPLES", "KEEP_SECONDS", "LatencyWindow"]

KEEP_SECONDS = 3600.0
KEEP_SAMPLES = 4096
"""Per class and figure: past it the oldest go (the window is then shorter)."""
QUANTILES = (0.5, 0.95, 0.99)


class LatencyWindow:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._samples: dict[tuple[str, str], deque[tuple[float, float]]] = {}

    def observe(self, name: str, class_name: str, seconds: float) -> None:
        """One sample of ``name`` (``wait``, ``ttft``) for ``class_name``."""
        now = self._clock()
        samples = self._samples.setdefault((name, class_name), deque(maxlen=KEEP_SAMPLES))
        samples.append((now, max(0.0, seconds)))
        while samples and samples[0][0] < now - KEEP_SECONDS:
            samples.popleft()

    def percentiles(self, span: float) -> dict[str, dict[str, Any]]:
        """``{class: {name: {"count", "p50", "p95", "p99"}}}`` over the last
        ``span`` seconds (the shape of ``percentiles.class_percentiles``)."""
        since = self._clock() - span
        out: dict[str, dict[str, Any]] = {}
        for (name, class_name), samples in sorted(self._samples.items()):
            values = sorted(v for t, v in samples if t >= since)
            if not values:
                continue
            figures: dict[str, Any] = {"count": len(values)}
            for q in QUANTILES:
                # The nearest-rank percentile: a value that was observed.
                rank = max(1, math.ceil(q * len(values)))
                figures[f"p{round(q * 100)}"] = values[rank - 1]
            out.setdefault(class_name, {})[name] = figures
        return out
