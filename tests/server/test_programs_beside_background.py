"""A real agent framework that sends no header, beside background, on the real
default model (docs/design.md §4.11).

pydantic-ai's ``Agent`` (``OpenAIChatModel`` on the gateway, as its docs show
for any OpenAI-compatible server) runs one agent call after another, as an
agent loop does, beside eight background streams (``X-Tierlm-Class: gana``).
Its first request is a person's (no evidence yet); the next, sent as the last
answer ends, are a program's: served in the fair pool, they never take the
chat latency guard, so background keeps most of what it does alone. Measured
in tokens against a window of the same length without the agent, in the same
test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.server.helpers import WAIT, BackgroundStreams, Gateway, serve_default_model

pytestmark = [pytest.mark.llama]
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
pytest.importorskip("pydantic_ai", reason="needs pydantic-ai-slim[openai] (the dev extra)")

from pydantic_ai import Agent, ModelSettings  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

MODEL = "smollm2-135m"
STREAMS = 8
AGENT_CALLS = 6
NO_END = {"0": -100, "2": -100}  # SmolLM2's end tokens: a stream runs as long as the test


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve_default_model(keyless="auto") as g:  # the default: judged by pacing
        yield g


def test_an_agent_framework_without_headers_leaves_background_its_share(gw: Gateway) -> None:
    background = BackgroundStreams(gw.url, MODEL, STREAMS, 4000, NO_END)
    provider = OpenAIProvider(base_url=f"{gw.url}/v1", api_key="unused")
    agent = Agent(OpenAIChatModel(MODEL, provider=provider))
    settings = ModelSettings(max_tokens=24, temperature=0, timeout=WAIT)
    pool = ThreadPoolExecutor(STREAMS)
    try:
        background.start(pool, tokens_each=3)
        assert background.going(WAIT * 3), dict(background.counts)
        # Its first call is a person's (no evidence yet: a person's first
        # message never waits); then the loop, its calls back to back.
        agent.run_sync("Step 0: name one colour.", model_settings=settings)
        before, started = background.tokens(), time.monotonic()
        for step in range(1, AGENT_CALLS + 1):
            agent.run_sync(f"Step {step}: name one colour.", model_settings=settings)
        beside, window = background.tokens() - before, time.monotonic() - started
        # Alone, for as long.
        before = background.tokens()
        time.sleep(window)
        alone = background.tokens() - before
        people = httpx.get(f"{gw.url}/v1/scheduler/state", timeout=WAIT).json()["people"]
    finally:
        background.stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
    agents = [i for i in people["identities"] if i["client"] == "pydantic-ai"]
    assert agents and agents[0]["served_as"] == "program", people
    assert beside >= 0.7 * alone, (beside, alone)
