"""How late the gateway's event loop runs its callbacks: ``tierlm_event_loop_lag_seconds``.

Every token of every stream, every admission and every health check waits for
the one event loop; a callback that blocks it (a long parse, a synchronous
call) delays them all, and nothing else in ``/metrics`` shows it. A probe
sleeps ``PERIOD`` and records how much later than asked it woke up: that
overshoot is what any callback scheduled meanwhile waited. ``/metrics`` has
the histogram and the largest lag seen (bench/gateway_load.py reads both under
500 streams).
"""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import CollectorRegistry, Gauge, Histogram

__all__ = ["LAG_BUCKETS", "PERIOD", "LoopLagProbe"]

PERIOD = 0.1
"""Seconds between probes: ten a second costs nothing measurable and catches a
stall of a few token intervals (a token every 10-50 ms on a CPU)."""
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""From a millisecond (a healthy loop) to the 2-5 s stalls seen under 500
connections on a busy machine."""


class LoopLagProbe:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.lag = Histogram(
            "tierlm_event_loop_lag_seconds",
            "How much later than scheduled the event loop woke a 100 ms timer",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self.max_lag = Gauge(
            "tierlm_event_loop_lag_max_seconds",
            "The largest event-loop lag seen since the gateway started",
            registry=registry,
        )
        self._largest = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="tierlm-loop-lag")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + PERIOD
            await asyncio.sleep(PERIOD)
            late = max(0.0, loop.time() - asked)
            self.lag.observe(late)
            if late > self._largest:
                self._largest = late
                self.max_lag.set(late)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
