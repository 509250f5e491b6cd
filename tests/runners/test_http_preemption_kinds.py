"""The preemption kinds on the HTTP runners (docs/design.md §4.6): a yield lets the server finish
the prompt's evaluation and closes the
stream after the first token; a person's preemption closes it at once, a
yield under way included.

Against the fake server of ``fake_servers.py``: its ``mute`` model sends
nothing for 2 s (a server evaluating a long prompt before its headers), its
``slow`` model waits 0.5 s before each token (the first one too). The cancels
land well inside those waits; the assertions count pieces, not time.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from tests.payloads import STORY
from tests.runners.fake_servers import SLOW_SECONDS
from tests.runners.helpers import run
from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.ollama import OllamaRunner
from tierlm.runners.openai_compat import OpenAIRunner
from tierlm.runners.requests import GenerationRequest

if TYPE_CHECKING:
    from tests.runners.helpers import FakeServer

YIELD, PREEMPTED = CancelReason.YIELD, CancelReason.PREEMPTED


async def pieces_after(
    runner: OpenAIRunner | OllamaRunner, model: str, cancels: list[tuple[float, CancelReason]]
) -> list[str]:
    """Stream 50 tokens of ``model``; cancel with each reason at its time."""
    request = GenerationRequest(model_id=model, messages=STORY, max_tokens=50)
    token = CancelToken()
    loop = asyncio.get_running_loop()
    for delay, reason in cancels:
        loop.call_later(delay, token.cancel, reason)
    return [piece async for piece in runner.generate(request, token)]


# Well before the first token: 0.5 s of a 2 s (mute) or 0.5 s (slow) wait.
EARLY = SLOW_SECONDS / 5
CASES = [
    ([(EARLY, YIELD)], ["t0 "]),  # the first token, then the stream is closed
    ([(EARLY, PREEMPTED)], []),  # at once
    ([(EARLY, YIELD), (2 * EARLY, PREEMPTED)], []),  # the yield cut short
    ([(EARLY, YIELD), (2 * EARLY, CancelReason.CALLER)], []),
]


@pytest.mark.parametrize(("cancels", "expected"), CASES)
@pytest.mark.parametrize("model", ["mute", "slow"])
def test_openai_runner(
    fake: FakeServer, model: str, cancels: list[tuple[float, CancelReason]], expected: list[str]
) -> None:
    async def main() -> None:
        async with OpenAIRunner(fake.url) as runner:
            assert await pieces_after(runner, model, cancels) == expected

    run(main())


@pytest.mark.parametrize(("cancels", "expected"), CASES)
def test_ollama_runner(
    fake: FakeServer, cancels: list[tuple[float, CancelReason]], expected: list[str]
) -> None:
    async def main() -> None:
        async with OllamaRunner(fake.url) as runner:
            assert await pieces_after(runner, "slow", cancels) == expected

    run(main())


def test_a_yield_after_the_first_token_stops_at_the_next_boundary(fake: FakeServer) -> None:
    async def main() -> None:
        async with OpenAIRunner(fake.url) as runner:
            # The second token comes at 1 s: the yield at 0.75 s stops there.
            cancels = [(1.5 * SLOW_SECONDS, YIELD)]
            assert await pieces_after(runner, "slow", cancels) == ["t0 "]

    run(main())
