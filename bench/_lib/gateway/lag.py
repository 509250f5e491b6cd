"""bench/gateway_load.py's loop-lag phase: N streams released at once against
the gateway, and the same N against uvicorn serving a trivial Starlette app
(``bench/_lib/trivial_app.py``), one after the other in the same run.

Each server measures its own event loop with the gateway's probe (a 100 ms
timer, ``tierlm_event_loop_lag_seconds`` on ``/metrics``); the phase reads the
histogram before and after the load, so the figures are the load's alone:
p50 and p99 as the upper bounds of their buckets, and the largest lag seen.
The trivial app's streams last as long as the gateway's run (its chunks are
spaced by the gateway's device time over the tokens), so both hold the same
connections open for about the same time. The load generator is this
process's: its own lag is the same for both and is not the servers'.

Beside the lag, ``/health`` is timed at the client every ``HEALTH_EVERY``
seconds on a connection of its own, before the load (nothing queued) and
during it (the streams queued behind one device): p50 and p95. What a request
costs the gateway must not grow with idle queued streams (issue 57: 1.8 ms at
0, 19 ms at 1 000 queued); against the trivial app's under the same clients,
the difference is the gateway's own.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from rich.table import Table

from _lib.gateway.clients import HTTP_TIMEOUT, LEAD, gateway_client, sleep_until, wait_bounded
from _lib.gateway.plan import Record, Spec, plan
from _lib.gateway.server import Server, lag_buckets, scrape

TRIVIAL_APP = Path(__file__).resolve().parent.parent / "trivial_app.py"
LABELS = {
    "trivial": "uvicorn + trivial app",
    "gateway": "tierlm serve",
    "baseline": "tierlm serve, baseline src",
}
HEALTH_EVERY = 0.05
HEALTH_IDLE_PROBES = 40


async def _health_times(url: str, stop: asyncio.Event | None, probes: int = 0) -> list[float]:
    """``/health`` round trips (s), one every ``HEALTH_EVERY``: ``probes`` of
    them, or until ``stop`` is set."""
    times: list[float] = []
    transport = httpx.AsyncHTTPTransport(retries=2)
    async with httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT, transport=transport) as c:
        while (stop is None and len(times) < probes) or (stop is not None and not stop.is_set()):
            began = time.perf_counter()
            (await c.get("/health")).raise_for_status()
            times.append(time.perf_counter() - began)
            await asyncio.sleep(HEALTH_EVERY)
    return times


def _percentiles(times: list[float]) -> dict[str, float | int | None]:
    ordered = sorted(times)
    if not ordered:
        return {"probes": 0, "p50": None, "p95": None}
    return {
        "probes": len(ordered),
        "p50": ordered[len(ordered) // 2],
        "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
    }


def trivial_server(streams: int, token_interval: float) -> Server:
    # One chunk every `streams` token intervals: a stream lasts as long as the
    # gateway's one device takes for all of them.
    interval = streams * token_interval
    return Server(["--interval", str(interval)], command=[sys.executable, str(TRIVIAL_APP)])


async def _metrics(client: httpx.AsyncClient) -> dict[str, list[tuple[dict[str, str], float]]]:
    return scrape((await client.get("/metrics", timeout=30.0)).text)


async def lag_phase(server: Server, streams: int, tokens: int, budget: float) -> dict[str, Any]:
    """``streams`` streaming chat completions of ``tokens`` tokens, all at once,
    against the running ``server``; its loop lag during them and what was served."""
    records = [Record(spec) for spec in plan(streams, 0, tokens, 0.0, seed=1)]
    limits = httpx.Limits(max_connections=streams + 16, max_keepalive_connections=streams + 16)
    client = httpx.AsyncClient(base_url=server.url, limits=limits, timeout=HTTP_TIMEOUT)
    async with client:
        warm = Record(Spec(-1, "gana", "warm-up", 0.0))
        await gateway_client(client, warm.spec, 2, time.perf_counter(), warm)
        if warm.error is not None:
            raise RuntimeError(f"warm-up request failed: {warm.error}\n{server.tail()}")
        idle_health = await _health_times(server.url, None, HEALTH_IDLE_PROBES)
        before = lag_buckets(await _metrics(client))
        began = time.perf_counter()
        release = began + LEAD
        tasks = [
            asyncio.create_task(gateway_client(client, r.spec, tokens, release, r)) for r in records
        ]
        stop = asyncio.Event()
        await sleep_until(release + 1.0)  # the streams are in
        health = asyncio.create_task(_health_times(server.url, stop))
        timed_out = await wait_bounded(tasks, release + budget)
        seconds = time.perf_counter() - release
        stop.set()
        loaded_health = await health
        after_samples = await _metrics(client)
    after = lag_buckets(after_samples)
    during = [(le, count - was) for (le, count), (_, was) in zip(after, before, strict=True)]
    probes = during[-1][1] if during else 0.0

    def at_most(fraction: float) -> float | None:
        return next((le for le, count in during if count >= fraction * probes), None)

    largest = after_samples.get("tierlm_event_loop_lag_max_seconds", [({}, None)])[0][1]
    errors = Counter(r.error for r in records if r.error is not None)
    return {
        "streams": streams,
        "served": streams - sum(errors.values()),
        "errors": dict(errors),
        "timed_out": timed_out,
        "seconds": seconds,
        "loop_lag": {
            "probes": probes,
            "p50_at_most": at_most(0.5) if probes else None,
            "p99_at_most": at_most(0.99) if probes else None,
            "max": largest,
        },
        "health_idle": _percentiles(idle_health),
        "health_loaded": _percentiles(loaded_health),
    }


def lag_table(results: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="event-loop lag under N streams (each server's own probe, 100 ms timer)")
    columns = (
        "streams", "server", "served", "lag p50 <=", "lag p99 <=", "lag max",
        "/health p50 idle", "/health p50 / p95 loaded", "run s",
    )  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right")
    for streams, pair in results.items():
        for name in ("trivial", "gateway", "baseline"):
            row = pair.get(name)
            if row is None:
                continue
            lag = row["loop_lag"]
            table.add_row(
                streams,
                LABELS[name],
                f"{row['served']}/{row['streams']}",
                *(_ms(lag[key]) for key in ("p50_at_most", "p99_at_most", "max")),
                _ms(row["health_idle"]["p50"], 1),
                f"{_ms(row['health_loaded']['p50'], 1)} / {_ms(row['health_loaded']['p95'], 1)}",
                f"{row['seconds']:.1f}",
            )
    return table


def _ms(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value * 1000:.{digits}f} ms"
