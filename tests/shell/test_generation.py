"""``Scheduler.submit_generation``: the one entry point for a streamed
generation (``Scheduler.generate`` and the gateway build on it), in virtual time."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers import TOKEN, runner
from tests.payloads import MESSAGES
from tierlm import (
    Cancelled,
    CancelReason,
    GenerationHandle,
    GenerationRun,
    JobState,
    Scheduler,
)
from tierlm.runners import GenerationRequest


async def test_pieces_once_each_and_every_run_reported_across_a_preemption() -> None:
    async with Scheduler(runner()) as sched:
        loop = asyncio.get_running_loop()
        pieces: list[tuple[float, str]] = []
        runs: list[GenerationRun] = []
        request = GenerationRequest("m1", messages=MESSAGES, max_tokens=100)
        handle = sched.submit_generation(
            "nataraj",
            request,
            lambda piece: pieces.append((loop.time(), piece)),
            producer="nataraj:deck",
            on_run=runs.append,
        )
        # The handle at once: the gateway shows its position and can cancel it.
        assert isinstance(handle, GenerationHandle)
        assert handle.state is JobState.RUNNING and handle.first_token_at is None
        await asyncio.sleep(2.02)  # mid-token: 40 done, the 41st finishes
        async for _ in sched.generate("chat", "m1", MESSAGES, max_tokens=10):
            pass
        text = await handle

    # One continuous stream: every token once, in order, although it ran twice.
    assert [p for _t, p in pieces] == [f"w{i} " for i in range(100)]
    assert text == "".join(handle.pieces) == "".join(p for _t, p in pieces)
    assert handle.first_token_at == pieces[0][0] == pytest.approx(TOKEN)
    # Per run: what the metrics count (tokens, decode time between tokens).
    assert [(r.attempt, r.tokens) for r in runs] == [(1, 41), (2, 59)]
    assert runs[0].first_token_at == pytest.approx(TOKEN)
    assert runs[0].decode_seconds == pytest.approx(40 * TOKEN)
    assert runs[1].first_token_at == pieces[41][0]
    assert runs[1].last_token_at == pieces[-1][0]
    assert sched.stats.requeues == 1


async def test_a_cancelled_generation_reports_its_run_and_raises() -> None:
    async with Scheduler(runner()) as sched:
        runs: list[GenerationRun] = []
        request = GenerationRequest("m1", prompt="x", max_tokens=100)
        handle = sched.submit_generation("chat", request, lambda _p: None, on_run=runs.append)
        await asyncio.sleep(0.52)
        assert handle.cancel()
        with pytest.raises(Cancelled) as info:
            await handle
        assert info.value.reason is CancelReason.CALLER
        assert [(r.attempt, r.tokens) for r in runs] == [(1, 11)]
        assert len(handle.pieces) == 11
