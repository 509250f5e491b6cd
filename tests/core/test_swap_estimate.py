"""Before any swap is measured, the ski-rental cap uses the runner's own swap
estimate, not the seed's 10 s (docs/design.md §4.8)."""

from __future__ import annotations

import asyncio

from tierlm import Scheduler
from tierlm.runners import GenerationRequest, SimulatedRunner


async def test_a_fast_swapping_device_holds_a_chats_model_only_a_few_of_its_swaps() -> None:
    runner = SimulatedRunner(
        token_interval=0.05, swap_seconds=0.5, initial_model="m1", models={"m1", "m2"}
    )
    async with Scheduler(runner) as sched:
        async for _piece in sched.generate(
            "chat", model_id="m1", messages=[{"role": "user", "content": "hi"}], max_tokens=5
        ):
            pass
        submitted = sched.now()
        request = GenerationRequest(model_id="m2", prompt="x", max_tokens=5)
        started: list[float] = []
        handle = sched.submit_generation(
            "nataraj", request, lambda _p: started.append(sched.now()) if not started else None
        )
        await handle
        await asyncio.sleep(0)
    # Before: 31.5 s (3 x the seed's 10 s, plus the work); now 3 x 0.5 s + swap + work.
    assert started[0] - submitted <= 3 * 0.5 + 0.5 + 0.5, started[0] - submitted
