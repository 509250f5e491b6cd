"""``Scheduler.reclass``: a job served as another class from now
(docs/design.md §4.11: a request taken for a person's before there was
evidence, shown a program's by the next ones), in virtual time on one slot."""

from __future__ import annotations

import asyncio

from tests.helpers import TOKEN, runner
from tests.payloads import MESSAGES
from tierlm import JobState, Scheduler
from tierlm.runners import GenerationRequest


async def test_a_running_chat_served_as_background_yields_to_the_pool_losing_nothing() -> None:
    async with Scheduler(runner()) as sched:
        loop = asyncio.get_running_loop()
        firsts: dict[str, float] = {}

        def note(name: str) -> object:
            return lambda _piece: firsts.setdefault(name, loop.time())

        chat = sched.submit_generation(
            "chat", GenerationRequest("m1", messages=MESSAGES, max_tokens=100), note("chat")
        )
        background = sched.submit_generation(
            "gana",
            GenerationRequest("m1", messages=MESSAGES, max_tokens=10),
            note("gana"),
            producer="other",
        )
        await asyncio.sleep(20 * TOKEN)  # the chat runs; background waits behind it
        assert chat.state is JobState.RUNNING and "gana" not in firsts
        assert sched.reclass(chat, "gana", producer="script")
        text = await chat
        await background
        assert sched.stats.requeues == 1  # preempted once, re-queued as gana
    # In the pool beside another producer, it no longer holds the device:
    # the other's job starts before the former chat's 100 tokens are done.
    assert firsts["gana"] < 101 * TOKEN
    # One continuous answer, nothing lost or repeated.
    assert text == "".join(f"w{i} " for i in range(100))


async def test_a_queued_chat_moves_to_the_pool_at_once_and_an_ended_job_is_left_alone() -> None:
    async with Scheduler(runner()) as sched:
        first = sched.submit_generation(
            "chat", GenerationRequest("m1", prompt="x", max_tokens=40), lambda _p: None
        )
        second = sched.submit_generation(
            "chat", GenerationRequest("m1", prompt="y", max_tokens=5), lambda _p: None
        )
        await asyncio.sleep(TOKEN)
        assert first.state is JobState.RUNNING and second.state is JobState.QUEUED
        assert [j.id for j in sched.snapshot().queued[0]] == [second.id]  # tier 0: a chat
        assert sched.reclass(second, "gana", producer="script")
        queued = sched.snapshot().queued
        assert queued[0] == [] and [(j.id, j.producer) for j in queued[4]] == [
            (second.id, "script")
        ]
        await first
        await second
        assert not sched.reclass(second, "chat", producer="script")  # it has ended
