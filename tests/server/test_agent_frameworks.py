"""Real agent frameworks that send no header, beside background, on the real
default model (docs/design.md §4.11).

Each framework is set up as its own docs show for an OpenAI-compatible
server, and run as an agent loop runs it: one call after another, the next
sent as the last answer ends, beside eight background streams
(``X-Tierlm-Class: gana``). Its first request is a person's (no evidence
yet); the next are a program's: served in the fair pool, they never take the
chat latency guard, so background keeps most of what it does alone. Measured
in tokens against a window of the same length without the agent, in the
same test.

- pydantic-ai's ``Agent`` (``OpenAIChatModel``);
- smolagents' ``ToolCallingAgent`` with one tool (``OpenAIServerModel``);
- dspy's ``Predict`` (``dspy.LM("openai/...")``, its own HTTP engine).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.server.helpers import WAIT, BackgroundStreams, Gateway, serve_default_model

pytestmark = [pytest.mark.llama]
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

# dspy and LiteLLM fetch a price map from GitHub on first use unless told not to.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

MODEL = "smollm2-135m"
STREAMS = 8
AGENT_CALLS = 6
MAX_TOKENS = 24
NO_END = {"0": -100, "2": -100}  # SmolLM2's end tokens: a stream runs as long as the test

Step = Callable[[int], object]
"""One call of the agent loop: step ``i``."""


def pydantic_ai_loop(url: str) -> Step:
    pytest.importorskip("pydantic_ai", reason="needs pydantic-ai-slim[openai] (the dev extra)")
    from pydantic_ai import Agent, ModelSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=f"{url}/v1", api_key="unused")
    agent = Agent(OpenAIChatModel(MODEL, provider=provider))
    settings = ModelSettings(max_tokens=MAX_TOKENS, temperature=0, timeout=WAIT)
    return lambda i: agent.run_sync(f"Step {i}: name one colour.", model_settings=settings)


def smolagents_loop(url: str) -> Step:
    pytest.importorskip("smolagents", reason="needs smolagents (the dev extra)")
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def colour_of(thing: str) -> str:
        """The colour of a thing.

        Args:
            thing: what to look at.
        """
        return "blue"

    model = OpenAIServerModel(
        model_id=MODEL,
        api_base=f"{url}/v1",
        api_key="unused",
        max_tokens=MAX_TOKENS,
        temperature=0,
    )
    # CodeAgent's system prompt (2 302 tokens) does not fit SmolLM2's 2 048;
    # the tool-calling agent's does.
    agent = ToolCallingAgent(tools=[colour_of], model=model, max_steps=2, verbosity_level=0)
    return lambda i: agent.run(f"Step {i}: what colour is the sky?")


def dspy_loop(url: str) -> Step:
    pytest.importorskip("dspy", reason="needs dspy (the dev extra)")
    import dspy

    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    lm = dspy.LM(
        f"openai/{MODEL}",
        api_base=f"{url}/v1",
        api_key="unused",
        max_tokens=MAX_TOKENS,
        temperature=0,
        cache=False,
    )
    predict = dspy.Predict("question -> answer")

    def step(i: int) -> object:
        with dspy.context(lm=lm):
            try:
                return predict(question=f"Step {i}: name one colour.")
            except Exception as error:  # a 135M model's answer may not parse
                # The call was made and answered; only dspy's parsing of a
                # tiny model's text failed (the gateway answered 200).
                if "parse" not in str(error).lower():
                    raise
                return error

    return step


FRAMEWORKS: dict[str, tuple[str, Callable[[str], Step]]] = {
    # name: (the client its User-Agent names, its agent loop)
    "pydantic-ai": ("pydantic-ai", pydantic_ai_loop),
    "smolagents": ("OpenAI", smolagents_loop),
    "dspy": ("lm15", dspy_loop),
}


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve_default_model(keyless="auto") as g:  # the default: judged by pacing
        yield g


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_an_agent_framework_without_headers_leaves_background_its_share(
    gw: Gateway, framework: str
) -> None:
    client, loop_of = FRAMEWORKS[framework]
    step = loop_of(gw.url)
    background = BackgroundStreams(gw.url, MODEL, STREAMS, 4000, NO_END)
    pool = ThreadPoolExecutor(STREAMS)
    try:
        background.start(pool, tokens_each=3)
        assert background.going(WAIT * 3), dict(background.counts)
        # Its first call is a person's (no evidence yet: a person's first
        # message never waits); then the loop, its calls back to back.
        step(0)
        before, started = background.tokens(), time.monotonic()
        for i in range(1, AGENT_CALLS + 1):
            step(i)
        beside, window = background.tokens() - before, time.monotonic() - started
        # Alone, for as long.
        before = background.tokens()
        time.sleep(window)
        alone = background.tokens() - before
        people = httpx.get(f"{gw.url}/v1/scheduler/state", timeout=WAIT).json()["people"]
    finally:
        background.stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
    agents = [i for i in people["identities"] if i["client"] == client]
    assert agents and agents[0]["served_as"] == "program", people
    print(f"{framework}: background {beside} tokens beside it, {alone} alone")
    assert beside >= 0.7 * alone, (beside, alone)
