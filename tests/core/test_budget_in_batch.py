"""docs/design.md §4.7 (budgets in a batch): on k slots, extraction keeps to
its cap of slot-time while other work runs beside it, and still fills every
slot when nothing else wants one. Through the real Scheduler, in virtual time;
shares are counted from the scheduler's own events (who ran when)."""

from __future__ import annotations

import asyncio

from tierlm import JobStarted, RunEnded, Scheduler, SchedulerEvent
from tierlm.runners import GenerationRequest, SimulatedRunner
from tierlm.runners.simulated import LLAMA_CPP_CPU_BATCH_COST

TOKEN = 0.05
SLOTS = 8
CAP = 0.60  # the extract class's budget (docs/design.md §3)


class SlotTime:
    """Each class's slot-time from the scheduler's events: over a span with n
    sequences running, each one's class is charged 1/n of it (§4.7)."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.running: dict[int, str] = {}
        self.spent: dict[str, float] = {}
        self.most_at_once: dict[str, int] = {}
        self.idle_while_queued = 0.0
        self._since = sched.now()

    def __call__(self, event: SchedulerEvent) -> None:
        self._account(self.sched.now())
        if isinstance(event, JobStarted):
            self.running[event.job.id] = event.job.class_name
            name = event.job.class_name
            at_once = sum(c == name for c in self.running.values())
            self.most_at_once[name] = max(self.most_at_once.get(name, 0), at_once)
        elif isinstance(event, RunEnded):
            self.running.pop(event.job.id, None)

    def _account(self, now: float) -> None:
        span, self._since = now - self._since, now
        if not self.running:
            self.idle_while_queued += span if len(self.sched.policy) else 0.0
            return
        for name in self.running.values():
            self.spent[name] = self.spent.get(name, 0.0) + span / len(self.running)

    def share(self, name: str) -> float:
        self._account(self.sched.now())
        return self.spent.get(name, 0.0) / sum(self.spent.values())


def device() -> SimulatedRunner:
    return SimulatedRunner(
        token_interval=TOKEN,
        swap_seconds=1.0,
        initial_model="m1",
        slots=SLOTS,
        batch_cost=LLAMA_CPP_CPU_BATCH_COST,
    )


def submit(sched: Scheduler, class_name: str, producer: str) -> asyncio.Future[str]:
    request = GenerationRequest(model_id="m1", prompt=producer, max_tokens=200)
    return sched.submit_generation(class_name, request, lambda _piece: None, producer=producer)


def extraction(sched: Scheduler, notes: int) -> list[asyncio.Future[str]]:
    return [submit(sched, "extract", "backfill") for _ in range(notes)]


async def one_stream_at_a_time(sched: Scheduler, producer: str) -> None:
    """A producer that sends its next request when the last one ends."""
    while True:
        await submit(sched, "nataraj", producer)


async def test_beside_two_streams_extraction_keeps_to_its_cap_of_slot_time() -> None:
    """Two pool producers can use two slots; an extraction backlog would take
    the other six (75 % of the slot-time, the cap is 60 %). It joins the batch
    only while its part of it stays within the cap: three of five."""

    async with Scheduler(device()) as sched:
        meter = SlotTime(sched)
        sched.add_listener(meter)
        agents = [asyncio.ensure_future(one_stream_at_a_time(sched, f"a{i}")) for i in (1, 2)]
        await asyncio.sleep(0)  # the agents' first requests are in
        backlog = extraction(sched, 400)
        await asyncio.sleep(600.0)  # two budget windows
        share = meter.share("extract")
        for task in agents:
            task.cancel()
        for handle in backlog:
            handle.cancel()
        await asyncio.gather(*agents, *backlog, return_exceptions=True)
        share, at_once = share, meter.most_at_once["extract"]
    assert share <= CAP + 0.01, share
    assert at_once == 3, at_once  # 3 of 5: one more would be 4 of 6 (67 %)


async def test_alone_extraction_fills_every_slot() -> None:
    """Work-conserving (docs/design.md §6.4): with nothing else queued or
    running, the budget leaves no slot empty and the device never idles."""

    async with Scheduler(device()) as sched:
        meter = SlotTime(sched)
        sched.add_listener(meter)
        backlog = extraction(sched, 64)
        await asyncio.gather(*backlog)
        meter.share("extract")
        at_once, idle = meter.most_at_once["extract"], meter.idle_while_queued
    assert at_once == SLOTS, at_once
    assert idle == 0.0, idle
