"""A real agent framework that sends no header, beside background, on the real
default model (docs/design.md §4.11 who is a person).

pydantic-ai's ``Agent`` (``OpenAIChatModel`` on the gateway, as its docs show
for any OpenAI-compatible server) runs one agent call after another, as an
agent loop does, beside four background streams (``X-Tierlm-Class: gana``).
Its first request is a person's (no evidence yet); the next, sent as the last
answer ends, are a program's: served in the fair pool, they never take the
chat latency guard, so background keeps most of what it does alone. Measured
in tokens against a window of the same length without the agent, in the same
test.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.server.helpers import WAIT, Gateway, serve_default_model

pytestmark = [pytest.mark.llama]
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
pytest.importorskip("pydantic_ai", reason="needs pydantic-ai-slim[openai] (the dev extra)")

from pydantic_ai import Agent, ModelSettings  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

MODEL = "smollm2-135m"
STREAMS = 4
AGENT_CALLS = 6
NO_END = {"0": -100, "2": -100}  # SmolLM2's end tokens: a stream runs as long as the test


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve_default_model(keyless="auto") as g:  # the default: judged by pacing
        yield g


def test_an_agent_framework_without_headers_leaves_background_its_share(gw: Gateway) -> None:
    counts: Counter[int] = Counter()
    lock = threading.Lock()
    going = threading.Event()
    stop = threading.Event()

    def background(i: int) -> None:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": f"Tell me story number {i}."}],
            "max_tokens": 4000,
            "temperature": 0,
            "logit_bias": NO_END,
            "stream": True,
        }
        headers = {"X-Tierlm-Class": "gana", "X-Tierlm-Producer": f"bg{i}"}
        with (
            httpx.Client(base_url=gw.url, timeout=WAIT) as client,
            client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as reply,
        ):
            for line in reply.iter_lines():
                if stop.is_set():
                    return
                if line.startswith("data: {") and '"content"' in line:
                    with lock:
                        counts[i] += 1
                        if len(counts) == STREAMS and min(counts.values()) >= 3:
                            going.set()

    def tokens() -> int:
        with lock:
            return sum(counts.values())

    provider = OpenAIProvider(base_url=f"{gw.url}/v1", api_key="unused")
    agent = Agent(OpenAIChatModel(MODEL, provider=provider))
    settings = ModelSettings(max_tokens=24, temperature=0, timeout=WAIT)

    pool = ThreadPoolExecutor(STREAMS)
    try:
        for i in range(STREAMS):
            pool.submit(background, i)
        assert going.wait(WAIT * 3), dict(counts)
        # Beside the agent loop: its calls back to back.
        before, started = tokens(), time.monotonic()
        for step in range(AGENT_CALLS):
            agent.run_sync(f"Step {step}: name one colour.", model_settings=settings)
        beside, window = tokens() - before, time.monotonic() - started
        # Alone, for as long.
        before = tokens()
        time.sleep(window)
        alone = tokens() - before
        people = httpx.get(f"{gw.url}/v1/scheduler/state", timeout=WAIT).json()["people"]
    finally:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
    agents = [i for i in people["identities"] if i["client"] == "pydantic-ai"]
    assert agents and agents[0]["served_as"] == "program", people
    assert beside >= 0.7 * alone, (beside, alone)
