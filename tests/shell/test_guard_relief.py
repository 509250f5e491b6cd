"""The chat latency guard is bounded (docs/design.md §4.7 (guard relief)): while
people keep a batched device busy without a pause, background keeps one slot
once they have held it ``GUARD_SPAN`` seconds; people who pause reset it.
Virtual time, the steep 1-thread CPU curve (the guard pauses every background
sequence beside a person)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from tierlm import Scheduler
from tierlm.core.guard_relief import GUARD_SPAN
from tierlm.runners import GenerationRequest, SimulatedRunner

TOKEN = 0.05
STEEP = 0.59  # a step of n costs 1 + 0.59 (n - 1) one step's: llama.cpp, 1 thread
CHAT = 40  # tokens of a person's answer


async def people_and_background(
    people: int, gap: float, seconds: float
) -> tuple[Counter[str], list[float]]:
    """Tokens by who over ``seconds``, and each chat's seconds from submit to
    end: ``people`` persons chatting (each sends the next ``gap`` s after the
    last answer) beside four background streams on 4 slots."""
    runner = SimulatedRunner(
        token_interval=TOKEN, initial_model="m1", slots=4, batch_cost=STEEP, swap_seconds=1.0
    )
    tokens: Counter[str] = Counter()
    chats: list[float] = []
    async with Scheduler(runner) as sched:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds

        def count(who: str) -> Callable[[str], None]:
            return lambda _piece: tokens.update([who])

        streams = [
            sched.submit_generation(
                "nataraj",
                GenerationRequest(model_id="m1", prompt=f"bg {i}", max_tokens=100_000),
                count("background"),
                producer=f"agent{i}",
            )
            for i in range(4)
        ]

        async def person(i: int) -> None:
            while loop.time() < end:
                request = GenerationRequest(model_id="m1", prompt=f"p{i}", max_tokens=CHAT)
                sent = loop.time()
                await sched.submit_generation("chat", request, count("people"), producer=f"p{i}")
                chats.append(loop.time() - sent)
                await asyncio.sleep(gap)

        await asyncio.gather(*(person(i) for i in range(people)))
        for stream in streams:
            stream.cancel()
    return tokens, chats


async def test_people_busy_without_a_pause_leave_background_one_slot_after_the_span() -> None:
    seconds = 4 * GUARD_SPAN
    tokens, chats = await people_and_background(people=3, gap=0.5, seconds=seconds)
    # Three people who each read 0.5 s keep a person's chat running or queued
    # at every instant: without relief, background got nothing after the first
    # step. With it, one slot of four from GUARD_SPAN on, at the curve's
    # speed for a batch of (at most) 4.
    relieved = (seconds - GUARD_SPAN) / (TOKEN * (1 + 3 * STEEP))
    assert tokens["background"] >= 0.9 * relieved, tokens
    # The people's bound: a chat at most the curve's batch of all + one slower.
    assert max(chats) <= CHAT * TOKEN * (1 + 3 * STEEP) * 1.1, max(chats)


async def test_a_person_who_reads_meets_no_background_beside_their_chat() -> None:
    # One person who reads 5 s between answers pauses every time: no relief,
    # each chat runs alone (the steep curve), as fast as on an idle device.
    tokens, chats = await people_and_background(people=1, gap=5.0, seconds=4 * GUARD_SPAN)
    assert max(chats) <= (CHAT + 3) * TOKEN, max(chats)  # its tokens, a stop and a step
    assert tokens["background"] > 0  # background ran in the reading gaps


async def test_one_person_back_to_back_is_never_relieved_against() -> None:
    # One identity sending chats 0.5 s apart never pauses, but it is one
    # person (or a program, docs/design.md §4.11): relief needs two people
    # at work, and each chat still runs alone.
    _, chats = await people_and_background(people=1, gap=0.5, seconds=4 * GUARD_SPAN)
    assert max(chats) <= (CHAT + 3) * TOKEN, max(chats)
