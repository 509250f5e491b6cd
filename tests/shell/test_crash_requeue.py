"""A crash of the device re-queues the jobs under it once (docs/design.md §4.9):
they continue from their partial output; a job present at two crashes fails
with the crash's message. Virtual time.

FAULT INJECTION: ``CrashingRunner`` raises the error a crashed llama.cpp worker
gives (``DeviceCrashed``) at a chosen token, because a native crash cannot be
timed in a simulated device. The real crash (SIGSEGV of the worker
mid-answer) is tests/server/test_default_model.py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.helpers import TOKEN
from tierlm import Scheduler
from tierlm.runners import CancelToken, DeviceCrashed, GenerationRequest, SimulatedRunner


class CrashingRunner(SimulatedRunner):
    """The simulated device, whose process "crashes" after ``after`` tokens of
    each of its first ``crashes`` runs (every sequence decoding then fails)."""

    def __init__(self, after: int, crashes: int, slots: int = 1) -> None:
        super().__init__(token_interval=TOKEN, initial_model="m1", slots=slots)
        self.after = after
        self.crashes_left = crashes
        self.requests: list[GenerationRequest] = []
        self._crash = asyncio.Event()

    async def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]:
        self.requests.append(request)
        produced = 0
        async for piece in super().generate(request, cancel):
            if self._crash.is_set():
                break
            yield piece
            produced += 1
            if produced == self.after and self.crashes_left > 0:
                self.crashes_left -= 1
                self._crash.set()  # the whole batch goes down with the process
                await asyncio.sleep(0)
                break
        if self._crash.is_set():
            await asyncio.sleep(TOKEN)  # the batch-mates see it at their next step
            self._crash.clear()
            raise DeviceCrashed("the llama.cpp worker crashed (signal 11) while generating")


async def generate(sched: Scheduler, name: str, tokens: int) -> list[str]:
    pieces: list[str] = []
    request = GenerationRequest(model_id="m1", prompt=name, max_tokens=tokens)
    await sched.submit_generation("gana", request, pieces.append, producer=name)
    return pieces


async def test_a_crash_mid_answer_re_queues_it_and_it_continues_from_its_output() -> None:
    runner = CrashingRunner(after=5, crashes=1)
    async with Scheduler(runner) as sched:
        pieces = await generate(sched, "a", 20)
        assert sched.stats.requeues == 1 and sched.stats.failed == 0
    assert len(pieces) == 20  # every token once, across the crash
    resumed = runner.requests[-1]
    assert resumed.max_tokens == 15 and resumed.resume_text == "".join(pieces[:5])


async def test_a_job_present_at_two_crashes_fails_with_the_crash_s_message() -> None:
    runner = CrashingRunner(after=3, crashes=2)
    async with Scheduler(runner) as sched:
        with pytest.raises(DeviceCrashed, match="crashed"):
            await generate(sched, "a", 20)
        assert sched.stats.requeues == 1 and sched.stats.failed == 1
        # The device works again for the next job.
        assert len(await generate(sched, "b", 4)) == 4


async def test_every_sequence_of_a_crashed_batch_continues() -> None:
    runner = CrashingRunner(after=4, crashes=1, slots=4)
    async with Scheduler(runner) as sched:
        answers = await asyncio.gather(*(generate(sched, f"p{k}", 12) for k in range(4)))
        assert sched.stats.failed == 0
        assert sched.stats.requeues == 4
    assert [len(a) for a in answers] == [12, 12, 12, 12]
