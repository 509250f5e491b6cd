"""The lane beside the LLM scheduler: a flood of embeddings leaves chat untouched.

"While a flood runs, the LLM scheduler's chat time-to-first-token is
unchanged (same figure with and without the flood, in virtual time)".
"""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers import first_token_time, runner, work_for
from tests.payloads import MESSAGES
from tierlm import Scheduler
from tierlm.embedding import EmbeddingLane, SimulatedEmbedder
from tierlm.testing import run_virtual


async def chat_with_background(flood: bool) -> tuple[float, str, int]:
    """Chat time-to-first-token (s) and text, with background LLM jobs queued,
    and optionally 200 embeddings/s for 10 s on the lane; plus texts embedded."""
    embedder = SimulatedEmbedder()

    loop = asyncio.get_running_loop()
    async with Scheduler(runner()) as sched, EmbeddingLane(embedder) as lane:
        background = [sched.submit("gana", "m1", work_for(3), producer=f"p{i}") for i in range(4)]

        async def offer() -> int:
            start = loop.time()
            callers = []
            for i in range(2000):
                await asyncio.sleep(max(0.0, start + i / 200 - loop.time()))
                callers.append(asyncio.create_task(lane.embed(f"note {i}")))
            vectors = await asyncio.gather(*callers)
            assert vectors[7] == embedder.vector_for("note 7")
            return len(vectors)

        flooding = asyncio.create_task(offer()) if flood else None
        await asyncio.sleep(2.0)  # mid-flood, a background job on the device
        asked = loop.time()
        first, text = await first_token_time(sched.generate("chat", "m1", MESSAGES, max_tokens=20))
        assert first is not None
        embedded = await flooding if flooding is not None else 0
        await asyncio.gather(*background)
        return first - asked, text, embedded


def test_a_flood_of_embeddings_does_not_change_chat_time_to_first_token() -> None:
    quiet_ttft, quiet_text, _ = run_virtual(chat_with_background(flood=False))
    flood_ttft, flood_text, embedded = run_virtual(chat_with_background(flood=True))
    assert embedded == 2000
    # Equal up to the rounding of a virtual clock that took more (timer) steps.
    assert flood_ttft == pytest.approx(quiet_ttft, abs=1e-9)
    assert flood_text == quiet_text
