"""A person on another AI surface, or away from all of them (docs/design.md
§4.8 (presence)). Virtual time, the tests' device (20 tokens/s, 10 s swaps):
a background backlog on m1, one job on m2 that reaches the starvation bound
(120 s)."""

from __future__ import annotations

import asyncio

from tests.core.test_affinity_across_models import chat_wait, device, noting_start
from tests.helpers import SWAP, work_for
from tierlm import Scheduler, TaskClass, Tier

CLASSES = [
    TaskClass("chat", Tier.T0, fair=False, requeue=False),
    TaskClass("bulk", Tier.T2, fair=False, requeue=True),
    TaskClass("nataraj", Tier.T4, fair=True, requeue=True),
]


async def test_a_person_on_another_ai_page_meets_no_swap_for_background() -> None:
    """issue118, seed 25 at 8 slots: a swap to m2 for an overdue cron job
    started while the person swiped on the deck page (its work on m1); they
    opened chat and their first message waited 10 s for the swap back. The
    page, active, holds m1 as the chat page does; the swap waits for the
    person to leave."""
    async with Scheduler(device("m1", "m2"), CLASSES) as sched:

        async def backlog() -> None:
            while True:  # one at a time: always newer than the m2 job
                await sched.run("bulk", "m1", work_for(10), producer="bulk")

        async def deck() -> None:
            while True:  # the deck filler: a card per swipe
                await sched.run("nataraj", "m1", work_for(1), producer="deck")
                await asyncio.sleep(20)

        sched.set_foreground("chat")
        await chat_wait(sched, then=1)  # their last chat was on m1
        tasks = [asyncio.create_task(backlog()), asyncio.create_task(deck())]
        sched.set_foreground("nataraj")
        await asyncio.sleep(30)  # past chat_grace
        started: list[float] = []
        other = sched.submit("bulk", "m2", noting_start(started), producer="cron")
        await asyncio.sleep(135)  # past the bound (120 s) on the deck page
        sched.set_foreground("chat")
        await asyncio.sleep(3)
        waits = [await chat_wait(sched, then=10), await chat_wait(sched, then=10)]
        sched.set_foreground(None)
        left = sched.now()
        await other
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert max(waits) <= 0.2, waits  # no swap: one device step at most
    # Gone, the person frees m1 after chat_grace (30 s) from their last chat,
    # then the job in progress (10 s) and the swap.
    assert started[0] <= left + 30 + 10 + SWAP + 1, (started, left)


async def test_with_no_ai_surface_open_starved_work_swaps_ahead_of_older_work() -> None:
    """The starvation bound served the loaded model's older work first; on
    issue118 a deep backlog on m1 drained through the person's absence, and
    the swap came once they were back on a page (seed 136 at 1 slot). With a
    person who uses the app away, the swap goes at the bound."""
    async with Scheduler(device("m1", "m2"), CLASSES) as sched:
        sched.set_foreground("nataraj")
        sched.set_foreground(None)  # the person was here and left
        # Older work on m1, below the m2 job's tier: it runs while the m2 job
        # has not waited the bound (affinity), then only what waited as long.
        backlog = [sched.submit("nataraj", "m1", work_for(10), producer="pool") for _ in range(30)]
        await asyncio.sleep(1)
        started: list[float] = []
        await sched.submit("bulk", "m2", noting_start(started), producer="cron")
        for job in backlog:
            job.cancel()
    # The bound (from t = 1 s), the m1 job in progress, the swap: not 300 s.
    assert started[0] <= 1 + 120 + 10 + SWAP + 1e-6, started
