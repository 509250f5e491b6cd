"""A request that crashes the device every time it runs, in a full batch:
after the crash the batch's jobs come back one at a time, so the one that
crashes it again is named the cause; it alone fails (``CrashedTwice``), and
every other stream continues from its partial output to its full text
(docs/design.md §4.9 (re-queue after a crash)). Virtual time.

FAULT INJECTION, a mock for a fault that cannot be produced for real here:
``CulpritRunner`` raises the error a crashed llama.cpp worker gives
(``DeviceCrashed``) in every sequence of the batch whenever the "culprit"
prompt reaches its third token, as a request that makes llama.cpp abort
would. The real worker crash is tests/server/test_crash_isolation.py's.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator
from typing import cast

import pytest

from tests.helpers import TOKEN
from tierlm import Scheduler
from tierlm.runners import (
    CancelToken,
    CrashedTwice,
    DeviceCrashed,
    GenerationRequest,
    SimulatedRunner,
)

SLOTS = 8
TOKENS = 20
CULPRIT = "culprit"


class CulpritRunner(SimulatedRunner):
    """The simulated device with 8 slots, whose process "crashes" whenever the
    culprit's sequence decodes its third token: every sequence running then
    fails with ``DeviceCrashed`` at its next step."""

    def __init__(self) -> None:
        super().__init__(token_interval=TOKEN, initial_model="m1", slots=SLOTS)
        self.crashes = 0
        self.crashed = asyncio.Event()
        self.runs: Counter[str] = Counter()
        self.running: set[str] = set()
        self.beside: list[tuple[str, frozenset[str]]] = []
        """Each run's prompt, and the prompts running when it started."""

    async def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]:
        assert request.prompt is not None
        self.runs[request.prompt] += 1
        self.beside.append((request.prompt, frozenset(self.running)))
        self.running.add(request.prompt)
        seen = self.crashes  # the process this sequence runs in
        produced = 0
        stream = cast(AsyncGenerator[str, None], super().generate(request, cancel))
        try:
            async for piece in stream:
                if request.prompt == CULPRIT and produced == 2:
                    self.crashes += 1  # the whole batch goes down with the process
                    self.crashed.set()
                if self.crashes != seen:
                    break
                yield piece
                produced += 1
        finally:
            self.running.discard(request.prompt)
            await stream.aclose()  # its slot is free at once, as a dead process's
        if self.crashes != seen:
            raise DeviceCrashed("the llama.cpp worker crashed (signal 6) while generating")


async def generate(sched: Scheduler, prompt: str, class_name: str = "gana") -> list[str]:
    pieces: list[str] = []
    request = GenerationRequest(model_id="m1", prompt=prompt, max_tokens=TOKENS)
    await sched.submit_generation(class_name, request, pieces.append, producer=prompt)
    return pieces


async def test_the_request_at_two_crashes_alone_fails_and_its_batch_mates_complete() -> None:
    runner = CulpritRunner()
    full = [f"w{n} " for n in range(TOKENS)]
    async with Scheduler(runner) as sched:
        others = [asyncio.create_task(generate(sched, f"p{k}")) for k in range(SLOTS - 1)]
        await asyncio.sleep(3 * TOKEN)  # the 7 are streaming when the culprit joins
        with pytest.raises(CrashedTwice, match=r"crashed twice while running this request"):
            await generate(sched, CULPRIT)
        answers = await asyncio.gather(*others)
        assert sched.stats.failed == 1 and sched.stats.completed == SLOTS - 1
    # Each of the 7 was in the first crash and in no other: it ran twice and
    # its caller got every token once, in order, across the crash.
    assert answers == [full] * (SLOTS - 1)
    assert runner.crashes == 2
    assert runner.runs[CULPRIT] == 2
    assert all(runner.runs[f"p{k}"] == 2 for k in range(SLOTS - 1))


async def test_survivors_come_back_one_at_a_time_while_new_work_runs_beside_them() -> None:
    runner = CulpritRunner()
    crashed = {"p0", "p1", "p2", CULPRIT}
    async with Scheduler(runner) as sched:
        tasks = {p: asyncio.create_task(generate(sched, p)) for p in sorted(crashed)}
        await runner.crashed.wait()
        await asyncio.sleep(TOKEN)  # every batch-mate has seen the crash
        snapshot = sched.snapshot()
        # Nothing is dropped: one re-admitted, the others queued still.
        assert len(snapshot.running_jobs) == 1
        assert sum(len(jobs) for jobs in snapshot.queued.values()) == 3
        # A job of no crash runs beside the one re-admitted; here that one is
        # the culprit, so it is in the second crash, its first: it comes back too.
        fresh = await generate(sched, "fresh")
        assert fresh == [f"w{n} " for n in range(TOKENS)] and runner.runs["fresh"] == 2
        with pytest.raises(CrashedTwice):
            await tasks.pop(CULPRIT)
        assert [len(a) for a in await asyncio.gather(*tasks.values())] == [TOKENS] * 3
    # After the crash, no two of its jobs ran at once; the fresh one ran
    # beside one of them.
    after = runner.beside[len(crashed) :]
    assert all(not (beside & crashed) for prompt, beside in after if prompt in crashed)
    assert any(beside & crashed for prompt, beside in after if prompt == "fresh")


async def test_a_person_s_chat_in_the_crash_comes_back_first() -> None:
    """The survivors come back best tier first: a person's chat does not
    wait for background answers that finish one after another."""
    runner = CulpritRunner()
    async with Scheduler(runner) as sched:
        tasks = {p: asyncio.create_task(generate(sched, p)) for p in ("p0", "p1", CULPRIT)}
        await asyncio.sleep(TOKEN)  # they are decoding when the chat comes
        chat = await generate(sched, "chat", class_name="chat")
        assert chat == [f"w{n} " for n in range(TOKENS)]
        with pytest.raises(CrashedTwice):
            await tasks.pop(CULPRIT)
        assert [len(a) for a in await asyncio.gather(*tasks.values())] == [TOKENS] * 2
    assert runner.runs["chat"] == 2
    assert [prompt for prompt, _ in runner.beside][4] == "chat"  # the first after the crash
