"""docs/design.md §4.4 (turns): a pool producer's turn is one slice of device
time, whether it spends it on one job or several. Through the real Scheduler
on one simulated slot, in virtual time; turns are read from the scheduler's
own events (who ran when)."""

from __future__ import annotations

import asyncio

from tierlm import JobStarted, RunEnded, Scheduler, SchedulerConfig, SchedulerEvent
from tierlm.runners import GenerationRequest, SimulatedRunner

TOKEN = 0.05
SLICE = 4.0
"""Pinned, so that the jobs below keep their relation to it (3 s jobs inside a
slice, 40 s ones several) whatever the default slice is."""


class Turns:
    """Each turn at the device: (producer, seconds), consecutive runs of one
    producer's jobs joined."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.turns: list[tuple[str, float]] = []
        self._started: tuple[str, float] | None = None

    def __call__(self, event: SchedulerEvent) -> None:
        now = self.sched.now()
        if isinstance(event, JobStarted):
            self._started = (event.job.producer, now)
        elif isinstance(event, RunEnded) and self._started is not None:
            producer, start = self._started
            self._started = None
            if self.turns and self.turns[-1][0] == producer:
                self.turns[-1] = (producer, self.turns[-1][1] + now - start)
            else:
                self.turns.append((producer, now - start))

    def of(self, producer: str) -> list[float]:
        # The last turn may have been cut by the end of the test.
        return [seconds for p, seconds in self.turns[:-1] if p == producer]


def submit(sched: Scheduler, producer: str, seconds: float) -> asyncio.Future[str]:
    request = GenerationRequest(model_id="m1", prompt=producer, max_tokens=round(seconds / TOKEN))
    return sched.submit_generation("gana", request, lambda _piece: None, producer=producer)


async def run(producers: dict[str, float], *, one_at_a_time: str | None = None) -> Turns:
    """``producers``' jobs of the given seconds, 40 of each queued at once
    (``one_at_a_time``: that one sends its next when its last ends), 300 s."""

    runner = SimulatedRunner(token_interval=TOKEN, initial_model="m1")
    async with Scheduler(runner, config=SchedulerConfig(slice=SLICE)) as sched:
        turns = Turns(sched)
        sched.add_listener(turns)
        handles: list[asyncio.Future[str]] = []

        async def agent(producer: str, seconds: float) -> None:
            while True:
                await submit(sched, producer, seconds)

        tasks = []
        for producer, seconds in producers.items():
            if producer == one_at_a_time:
                tasks.append(asyncio.ensure_future(agent(producer, seconds)))
            else:
                handles += [submit(sched, producer, seconds) for _ in range(40)]
        await asyncio.sleep(300.0)
        for future in [*tasks, *handles]:
            future.cancel()
        await asyncio.gather(*tasks, *handles, return_exceptions=True)
        return turns


async def test_a_producer_of_short_jobs_holds_the_device_one_slice_at_a_turn() -> None:
    """3 s jobs against 40 s ones: a job that ends 3 s into the slice leaves
    its successor the last second, not a fresh slice (a turn of 7 s)."""
    turns = (await run({"gana:short": 3.0, "gana:long": 40.0})).of("gana:short")
    assert len(turns) >= 10, turns
    assert max(turns) <= SLICE + 2 * TOKEN, turns


async def test_an_agent_sending_one_job_at_a_time_keeps_its_turn() -> None:
    """An agent's next 1 s job comes the moment its last ends; the scheduler
    decided in the instant between and gave the device to its peer, so every
    turn of the agent was one job long. It keeps its slot for a round trip
    (anticipation), and its turn is a slice."""
    turns = await run({"gana:agent": 1.0, "gana:peer": 40.0}, one_at_a_time="gana:agent")
    # Its first job teaches the scheduler its think time; the next turn makes
    # up what the first lost (EEVDF's lag).
    agent = turns.of("gana:agent")[2:]
    assert len(agent) >= 10, agent
    assert min(agent) >= SLICE - 2 * TOKEN, agent
