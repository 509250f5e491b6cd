"""``azure-pool``: the Azure trace's chats over four background producers that
come and go (docs/design.md §8.5, §4.4).

Trace: Azure LLM inference trace 2023, conversation service (Azure Public
Dataset, CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024), shipped with tierlm.

The chats are the trace's, replayed as in ``azure-chat`` (its hour stretched
onto the run, an even sample at ``chat_load`` of the device). Below them, four
fair-pool producers of one class (equal shares are the fair answer, so
VTC's measure applies) with different shapes, none of them always there, so the
device is busy most of the time but not all of it (about 91 % at the defaults)
and producers keep arriving into a pool that others already hold:

- ``gana:steady``: two 10 s jobs in flight, the first 25 min of every hour;
- ``gana:big``: one 40 s job at a time, minutes 20 to 40;
- ``gana:agent``: one 5 s job at a time, minutes 35 to 50;
- ``gana:burst``: eight 8 s jobs at once every 15 min (a batch that must wait
  for its turn behind the others' work).

What it is about: the service gap between two backlogged pool producers over
any 60 s window (VTC's measure, arXiv:2501.14312), as a share of the window,
and the longest a background job waits for its first dispatch, against FIFO's.
A producer's jobs in flight when its phase ends are left to finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, ClassVar

from tierlm.sim.context import SimContext
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.story import Story
from tierlm.sim.trace import ATTRIBUTION, load_trace
from tierlm.sim.workload import Workload
from tierlm.sim.workloads.azure_chat import trace_chats, trace_plan
from tierlm.sim.workloads.producers import output_for

__all__ = ["GAP_BOUND", "POOL_PRODUCERS", "AzurePool", "gap_share", "pool_wait"]

DEFAULT_CHAT_LOAD = 0.45
PROMPT = 60  # tokens: 0.4 s of prefill on the default device
HOUR = 3600.0
POOL_PRODUCERS = ("gana:steady", "gana:big", "gana:agent", "gana:burst")
GAP_WINDOW = 60.0  # fairness_metrics.FAIR_WINDOW: VTC's window
GAP_BOUND = 0.12
"""docs/design.md §4.4 (bound): two backlogged pool producers' service differs
by at most 12 % of any 60 s window (VTC, for 8 clients: 5.8 % of the rate)."""


def gap_share(m: Mapping[str, Any]) -> float | None:
    """The largest service difference between two pool producers backlogged
    throughout one 60 s window, as a share of the window."""
    diff = m["fairness"]["max_diff_60s"]
    return None if diff is None else float(diff) / GAP_WINDOW


def pool_wait(m: Mapping[str, Any]) -> float | None:
    """The longest a background producer waited for its first dispatch after
    it arrived (``metrics`` arrival waits)."""
    waits = [float(w["max"]) for p, w in m["arrival_waits"].items() if p in POOL_PRODUCERS]
    return max(waits) if waits else None


class AzurePool(Workload):
    name = "azure-pool"
    description = (
        "the Azure LLM 2023 conversation trace as chats over four background pool "
        "producers that come and go (the device ~91 % busy)"
    )
    default_duration = 4 * HOUR
    requires_trace = True
    parameters: ClassVar[Mapping[str, str]] = {
        "chat_load": "the chats' offered load, a fraction of the device (default 0.45)"
    }
    credit = f"Trace: {ATTRIBUTION}."

    def __init__(self, trace: Path | None = None, chat_load: float = DEFAULT_CHAT_LOAD) -> None:
        if not 0 < chat_load < 1:
            raise ValueError(f"chat_load: must be a fraction in (0, 1), got {chat_load!r}")
        self.requests = load_trace(trace)
        self.chat_load = chat_load

    def producers(self, sim: SimContext) -> list[Coroutine[Any, Any, None]]:
        plan = trace_plan(
            self.name, self.requests, sim.device, self.chat_load, sim.duration, sim.seed
        )
        minute = 60.0
        return [
            trace_chats(sim, plan),
            in_phases(sim, "gana:steady", seconds=10.0, in_flight=2, on=25 * minute),
            in_phases(sim, "gana:big", seconds=40.0, in_flight=1, on=20 * minute, at=20 * minute),
            in_phases(sim, "gana:agent", seconds=5.0, in_flight=1, on=15 * minute, at=35 * minute),
            bursts(sim, "gana:burst", seconds=8.0, jobs=8, every=15 * minute),
        ]

    def hints(self, duration: float) -> dict[str, Any]:
        return {"stated_load": {"chat": self.chat_load}}

    def params(self) -> dict[str, Any]:
        return {"chat_load": self.chat_load, "trace": ATTRIBUTION}

    def story(self) -> Story:
        return Story(
            "the service gap between two backlogged pool producers in a 60 s window",
            gap_share,
            GAP_BOUND,
            False,
            note="VTC's measure; docs/design.md §4.4",
        )


async def in_phases(
    sim: SimContext,
    producer: str,
    *,
    seconds: float,
    in_flight: int,
    on: float,
    at: float = 0.0,
    every: float = HOUR,
    class_name: str = "gana",
) -> None:
    """``in_flight`` jobs of about ``seconds`` queued or running, for ``on``
    seconds of every ``every`` from ``at``; then quiet (what is in flight
    finishes)."""
    rng = sim.rng(producer)
    low, high = output_for(sim.device, seconds, PROMPT)
    running: set[asyncio.Task[bool]] = set()
    start = at
    while True:
        await sim.sleep_until(start)
        stop = start + on
        while sim.now() < stop:
            while len(running) < in_flight:
                spec = JobSpec(class_name, "m1", PROMPT, rng.randint(low, high), producer=producer)
                running.add(asyncio.create_task(sim.run(spec)))
            _done, running = await asyncio.wait(
                running, timeout=stop - sim.now(), return_when=asyncio.FIRST_COMPLETED
            )
        start += every


async def bursts(
    sim: SimContext, producer: str, *, seconds: float, jobs: int, every: float
) -> None:
    """``jobs`` jobs of about ``seconds`` at once, every ``every`` seconds."""
    rng = sim.rng(producer)
    low, high = output_for(sim.device, seconds, PROMPT)
    at = every
    while True:
        await sim.sleep_until(at)
        for _ in range(jobs):
            sim.submit(JobSpec("gana", "m1", PROMPT, rng.randint(low, high), producer=producer))
        at += every
