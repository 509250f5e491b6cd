"""The operator's view of a batched device, below the browser: the dashboard's
timeline (a lane per slot, every job of a batch held), the per-class
percentiles (as Prometheus' histogram_quantile) and the token rate. The
timeline is fed by the real Scheduler on a simulated 4-slot device, in
virtual time (docs/design.md §4.7)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, Histogram

from tierlm import Scheduler
from tierlm.runners import GenerationRequest, SimulatedRunner
from tierlm.server.gateway.percentiles import class_percentiles, quantile
from tierlm.server.gateway.throughput import Throughput
from tierlm.server.gateway.timeline import Timeline

TOKEN = 0.05


async def test_every_job_of_a_batch_holds_a_lane_until_it_ends() -> None:
    runner = SimulatedRunner(token_interval=TOKEN, initial_model="m1", slots=4)
    timeline = Timeline(window=600)
    seen: list[list[int]] = []
    async with Scheduler(runner) as sched:
        sched.add_listener(timeline.on_event)
        sched.add_listener(lambda _: seen.append(sorted(timeline.open_runs)))
        handles = [
            sched.submit_generation(
                "nataraj",
                GenerationRequest(model_id="m1", prompt=f"s{i}", max_tokens=40 + 10 * i),
                lambda _: None,
                producer=f"agent{i}",
            )
            for i in range(4)
        ]
        await asyncio.gather(*handles)
    # While the four ran together, all four were open runs (one overwriting the
    # next showed a busy device as idle).
    assert [1, 2, 3, 4] in seen
    runs = [item for item in timeline.items if item["kind"] == "run"]
    assert sorted(run["job"] for run in runs) == [1, 2, 3, 4]
    assert sorted(run["lane"] for run in runs) == [0, 1, 2, 3]  # a lane each
    assert timeline.lanes == 4 and timeline.open_runs == {} and timeline.open_run is None
    # The longest ended last: the lanes freed one by one.
    assert max(runs, key=lambda r: r["end"])["job"] == 4


def test_percentiles_are_prometheus_histogram_quantiles() -> None:
    buckets = [(0.1, 0.0), (0.5, 50.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert quantile(0.5, buckets) == pytest.approx(0.5)
    assert quantile(0.75, buckets) == pytest.approx(0.75)  # linear within (0.5, 1]
    assert quantile(0.5, [(1.0, 0.0), (float("inf"), 0.0)]) is None
    registry = CollectorRegistry()
    wait = Histogram("w", "", ["class"], buckets=(0.1, 1, 10), registry=registry)
    for seconds in (0.05, 0.05, 0.5, 5):
        wait.labels("gana").observe(seconds)
    found = class_percentiles({"wait": wait})
    assert found["gana"]["wait"]["count"] == 4
    assert found["gana"]["wait"]["p50"] == pytest.approx(0.1)
    assert set(found) == {"gana"}  # a class without observations is not listed


def test_the_token_rate_is_over_its_window() -> None:
    rate = Throughput(window=10)
    for step in range(100):  # 2 tokens (a batch of 2) every 0.1 s for 10 s
        rate.add(step * 0.1, 2)
    assert rate.rate(9.9) == pytest.approx(20, rel=0.02)
    assert rate.rate(30) == 0
