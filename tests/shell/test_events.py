"""Typed scheduler events (docs/design.md §2.5): one frozen dataclass per
kind, with exactly the fields its listeners read, in virtual time."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools

import pytest

from tests.helpers import SWAP, work_for
from tests.payloads import MESSAGES
from tierlm import (
    CancelReason,
    Foreground,
    ForegroundChanged,
    JobCancelled,
    JobCompleted,
    JobContext,
    JobEnded,
    JobEvent,
    JobFailed,
    JobStarted,
    JobSubmitted,
    Paused,
    Preempting,
    Requeued,
    Resumed,
    RunEnded,
    Scheduler,
    SchedulerEvent,
    SwapFinished,
    SwapStarted,
)
from tierlm.runners import SimulatedRunner


async def _fails(ctx: JobContext) -> None:
    await asyncio.sleep(1)
    raise LookupError("no such note")


async def test_every_event_kind_carries_its_typed_fields() -> None:
    events: list[SchedulerEvent] = []

    device = SimulatedRunner(token_interval=0.05, swap_seconds=SWAP, initial_model="m1")
    async with Scheduler(device) as sched:
        sched.add_listener(events.append)
        gana = sched.submit("gana", "m1", work_for(20), producer="gana:a")
        await asyncio.sleep(1)
        sched.set_foreground("chat")
        async for _ in sched.generate("chat", "m2", MESSAGES, max_tokens=4):
            pass
        sched.set_foreground(None)
        failing = sched.submit("extract", "m2", _fails)
        queued = sched.submit("gana", "m1", work_for(1), producer="gana:b")
        queued.cancel()
        with pytest.raises(LookupError):
            await failing
        await sched.pause()
        sched.resume()
        await gana
    job_events = [e for e in events if isinstance(e, JobEvent)]
    gana, chat, failing, queued = (e.job for e in job_events if isinstance(e, JobSubmitted))

    def of(job_id: int) -> list[type[JobEvent]]:
        return [type(e) for e in job_events if e.job.id == job_id]

    assert of(gana.id) == [
        JobSubmitted,
        JobStarted,
        Preempting,
        Requeued,
        JobStarted,
        SwapStarted,
        SwapFinished,
        JobCompleted,
    ]
    assert of(chat.id) == [JobSubmitted, JobStarted, SwapStarted, SwapFinished, JobCompleted]
    assert of(failing.id) == [JobSubmitted, JobStarted, JobFailed]
    assert of(queued.id) == [JobSubmitted, JobCancelled]

    starts = [e for e in job_events if isinstance(e, JobStarted) and e.job is gana]
    assert [e.attempt for e in starts] == [1, 2]
    swaps = [e for e in events if isinstance(e, SwapFinished)]
    assert [(e.previous, e.job.model_id, e.seconds) for e in swaps] == [
        ("m1", "m2", SWAP),
        ("m2", "m1", SWAP),
    ]
    assert [e.previous for e in events if isinstance(e, SwapStarted)] == ["m1", "m2"]
    failed = next(e for e in events if isinstance(e, JobFailed))
    assert isinstance(failed.error, LookupError) and failed.outcome == "failed"
    cancelled = next(e for e in events if isinstance(e, JobCancelled))
    assert cancelled.reason is CancelReason.CALLER and cancelled.job is queued
    foregrounds = [e.foreground for e in events if isinstance(e, ForegroundChanged)]
    assert foregrounds == [Foreground("chat"), None]
    assert [type(e) for e in events if isinstance(e, Paused | Resumed)] == [Paused, Resumed]

    # The groups listeners use: how a run ended, and whether the job ended.
    ends = [e for e in job_events if isinstance(e, RunEnded)]
    assert [e.outcome for e in ends] == [
        "requeued",
        "completed",
        "cancelled",
        "failed",
        "completed",
    ]
    assert [isinstance(e, JobEnded) for e in ends] == [False, True, True, True, True]
    assert all(later.time >= earlier.time for earlier, later in itertools.pairwise(events))


def test_events_are_immutable_values() -> None:
    event = Paused(3.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.time = 4.0  # type: ignore[misc]
    assert event == Paused(3.0)
    match event:
        case Paused(time=when):
            assert when == 3.0
        case _:
            pytest.fail("a Paused event must match its class pattern")
