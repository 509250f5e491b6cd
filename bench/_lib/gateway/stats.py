"""bench/gateway_load.py's measurements and statistics.

``LagProbe`` times how late this process's event loop runs a timer;
``peak_in_flight``, ``pct`` and ``dist`` reduce the clients' records; and
``summarise`` turns one variant's raw result into the figures written to
bench/results/gateway_load.json, ``compare`` the gateway's against the
in-process scheduler's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

from _lib.gateway.plan import Record
from tierlm.sim.stats import percentile

# The lag probe's timer: often enough to catch a stall of a few token intervals,
# rare enough (100 wake-ups a second) to cost nothing measurable.
LAG_INTERVAL = 0.01


def peak_in_flight(records: Sequence[Record]) -> int:
    """Most requests between their start and their end at one moment."""
    edges = [(r.start, 1) for r in records if r.start is not None]
    edges += [(r.end, -1) for r in records if r.start is not None and r.end is not None]
    now = peak = 0
    for _, step in sorted(edges):  # at a tie, an end (-1) sorts before a start
        now += step
        peak = max(peak, now)
    return peak


class LagProbe:
    """How late this process's event loop runs a timer: its own stalls, which every
    time measured in it (a client's TTFT, the in-process scheduler's tokens) includes."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(LAG_INTERVAL)
            self.lags.append(loop.time() - started - LAG_INTERVAL)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> dict[str, float | int | None]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return dist(self.lags)


def pct(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0-1), as every figure of tierlm is (``tierlm.sim.stats.percentile``)."""
    return percentile(values, 100 * q)


def dist(values: Sequence[float]) -> dict[str, float | int | None]:
    return {
        "count": len(values),
        "p50": pct(values, 0.50),
        "p99": pct(values, 0.99),
        "mean": sum(values) / len(values) if values else None,
        "max": max(values) if values else None,
    }


def summarise(result: dict[str, Any], interval: float) -> dict[str, Any]:
    records: list[Record] = result["records"]
    release: float = result["release"]
    ok = [r for r in records if r.error is None]

    def ttfts(pred: Any) -> list[float]:
        return [t for r in ok if pred(r) and (t := r.ttft) is not None]

    delivered = sum(r.tokens for r in records)
    ends = [r.end for r in records if r.end is not None]
    wall = (max(ends) - release) if ends else None
    tokens_per_s = delivered / wall if wall else None
    by_class = {
        c: dist(ttfts(lambda r, c=c: r.spec.class_name == c))
        for c in sorted({r.spec.class_name for r in records})
    }
    running_to_first = [
        r.first - r.running_at for r in ok if r.first is not None and r.running_at is not None
    ]
    headers = [
        r.headers_at - r.start for r in ok if r.headers_at is not None and r.start is not None
    ]
    summary: dict[str, Any] = {
        "requests": len(records),
        "ok": len(ok),
        "errors": dict(Counter(r.error for r in records if r.error is not None)),
        "timed_out": result["timed_out"],
        "peak_in_flight": peak_in_flight(records),
        "loop_lag": result["loop_lag"],
        "ttft_all": dist(ttfts(lambda r: True)),
        "ttft_chat": dist(ttfts(lambda r: r.spec.class_name == "chat")),
        "ttft_background": dist(ttfts(lambda r: r.spec.class_name != "chat")),
        "ttft_by_class": by_class,
        "tokens_delivered": delivered,
        "wall_seconds": wall,
        "tokens_per_second": tokens_per_s,
        "device_utilisation": tokens_per_s * interval if tokens_per_s else None,
        "bench_cpu_seconds": result["bench_cpu_seconds"],
    }
    if headers:
        summary["response_headers"] = dist(headers)
    if running_to_first:
        summary["running_comment_to_first_token"] = dist(running_to_first)
        # What the clients had to read: queue-position comments against tokens.
        summary["sse_comment_lines"] = sum(r.comments for r in records)
    summary["chat_requests"] = [
        {
            "offset": r.spec.offset,
            "ttft": r.ttft,
            "response_headers": None
            if r.headers_at is None or r.start is None
            else r.headers_at - r.start,
            "error": r.error,
        }
        for r in records
        if r.spec.class_name == "chat"
    ]
    for key in (
        "scheduler",
        "chat_process_loop_lag",
        "server_cpu_seconds",
        "server_rss_idle_bytes",
        "server_view",
    ):
        if key in result:
            summary[key] = result[key]
    if "server_view" in result and "ttft_mean_by_class" in result["server_view"]:
        # Client-observed mean minus the gateway's own (submit -> first token
        # produced): what HTTP, request parsing and SSE delivery add on average.
        server = result["server_view"]["ttft_mean_by_class"]
        summary["http_overhead_mean_by_class"] = {
            c: by_class[c]["mean"] - server[c]
            for c in by_class
            if c in server and by_class[c]["mean"] is not None
        }
    return summary


def compare(inp: dict[str, Any], gw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group in ("ttft_all", "ttft_chat", "ttft_background"):
        for q in ("p50", "p99", "mean"):
            a, b = inp[group][q], gw[group][q]
            if a is not None and b is not None:
                out[f"{group}_{q}_added_seconds"] = b - a
                out[f"{group}_{q}_ratio"] = b / a if a else None
    a, b = inp["tokens_per_second"], gw["tokens_per_second"]
    if a and b:
        out["tokens_per_second_ratio"] = b / a
    return out
