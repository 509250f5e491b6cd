"""Nothing below a person starves (docs/design.md §4.3, §4.5): chat plus an
extraction backlog within its budget must leave the fair pool its floor."""

from __future__ import annotations

import asyncio

from tests.helpers import Recorder, runner, work_for
from tierlm import Scheduler


async def pool_share_with_chat(chat_share: float) -> float:
    async with Scheduler(runner()) as sched:
        recorder = Recorder.attach(sched)
        handles = [sched.submit("extract", "m1", work_for(2.0)) for _ in range(400)]
        handles += [
            sched.submit("nataraj", "m1", work_for(2.0), producer=f"deck:{i % 4}")
            for i in range(400)
        ]

        async def person() -> None:
            # A chat of 2 s every 2 / chat_share s: chat_share of the device.
            while True:
                await sched.run("chat", "m1", work_for(2.0))
                await asyncio.sleep(2.0 / chat_share - 2.0)

        chat = asyncio.create_task(person())
        await asyncio.sleep(900.0)
        chat.cancel()
        busy = recorder.busy_by_class(600.0, 900.0, sched.now())
        for handle in handles:
            handle.cancel()
    return busy.get("nataraj", 0.0) / sum(busy.values())


async def test_chat_at_40_percent_and_an_extract_backlog_leave_the_pool_its_floor() -> None:
    # Before: 1.3 % of the busy time (chat 40 %, extract its 60 % cap).
    assert await pool_share_with_chat(0.4) >= 0.09


async def test_chat_at_50_percent_leaves_the_pool_its_floor_too() -> None:
    # Before: 0 % for 25 minutes.
    assert await pool_share_with_chat(0.5) >= 0.09
