"""LiteLLM's SDK (``litellm.completion`` / ``acompletion``), unchanged, against
the gateway on the real default model (SmolLM2-135M-Instruct, llama-cpp) on
127.0.0.1: ``openai/<model>`` with ``api_base`` at the gateway, as LiteLLM's
docs say for any OpenAI-compatible server. Plain and streamed, sync and async,
a forced tool call and a ``json_schema`` response format.

LiteLLM fetches its model price map from the internet when imported unless
``LITELLM_LOCAL_MODEL_COST_MAP`` is set, and tiktoken downloads its encodings
unless they are cached: the map is read from the package, tiktoken from the
cache LiteLLM ships, and every connection that is not to loopback fails the
test that makes it (``loopback_only``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from tests.server.helpers import Gateway, serve_default_model
from tests.server.loopback import loopback_only

pytestmark = [pytest.mark.llama]
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

MODEL = "smollm2-135m"  # DEFAULT_CHAT_MODEL_ID, the id plain `tierlm serve` serves
TIMEOUT = 120.0  # a real model on a shared 2-core machine: generous, never asserted on
SAY_HELLO = [{"role": "user", "content": "Say hello."}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
EXTRACT = [{"role": "user", "content": "Extract the name and age as JSON: Alice is 30."}]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


# Read when litellm is imported: the price map bundled in the package, no fetch.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
with loopback_only() as import_attempts:
    litellm = pytest.importorskip("litellm", reason="needs litellm (the dev extra)")


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve_default_model() as g:
        yield g


@pytest.fixture(autouse=True)
def no_internet() -> Iterator[None]:
    with loopback_only() as attempts:
        yield
    assert not attempts, f"litellm reached beyond 127.0.0.1: {attempts}"


def call(gw: Gateway, **request: Any) -> dict[str, Any]:
    """LiteLLM's arguments for the gateway's model; ``request`` adds to them."""
    return {
        "model": f"openai/{MODEL}",
        "api_base": f"{gw.url}/v1",
        "api_key": "unused",
        "temperature": 0,
        "timeout": TIMEOUT,
        "max_retries": 0,
        **request,
    }


def test_the_import_fetched_nothing_and_tiktoken_reads_litellm_s_cache() -> None:
    assert not import_attempts, import_attempts
    tokenizers = os.path.dirname(litellm.litellm_core_utils.tokenizers.__file__)
    assert os.environ["TIKTOKEN_CACHE_DIR"] == tokenizers
    # Counting tokens (LiteLLM's token_counter, tiktoken's cl100k_base) needs no download.
    assert litellm.token_counter(model=f"openai/{MODEL}", messages=SAY_HELLO) > 0


def test_completion(gw: Gateway) -> None:
    response = litellm.completion(**call(gw, messages=SAY_HELLO, max_tokens=16))
    choice = response.choices[0]
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    assert response.usage.prompt_tokens > 0 and 0 < response.usage.completion_tokens <= 16


def test_completion_streamed(gw: Gateway) -> None:
    stream = litellm.completion(**call(gw, messages=SAY_HELLO, max_tokens=16, stream=True))
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    # The whole answer, put back together by LiteLLM's own helper.
    rebuilt = litellm.stream_chunk_builder(chunks, messages=SAY_HELLO)
    assert rebuilt.choices[0].message.content == text


def test_acompletion_plain_and_streamed(gw: Gateway) -> None:
    async def both() -> tuple[Any, list[Any]]:
        plain = await litellm.acompletion(**call(gw, messages=SAY_HELLO, max_tokens=8))
        stream = await litellm.acompletion(
            **call(gw, messages=SAY_HELLO, max_tokens=8, stream=True)
        )
        return plain, [chunk async for chunk in stream]

    plain, chunks = asyncio.run(both())
    assert plain.choices[0].message.content.strip()
    assert plain.choices[0].finish_reason in ("stop", "length")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_a_forced_tool_call_has_parsed_arguments(gw: Gateway) -> None:
    response = litellm.completion(
        **call(
            gw,
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=40,
        )
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    (tool_call,) = choice.message.tool_calls
    assert tool_call.function.name == "get_weather" and tool_call.id
    arguments = json.loads(tool_call.function.arguments)
    assert set(arguments) == {"city"} and isinstance(arguments["city"], str)


def test_a_json_schema_response_format_holds_to_the_schema(gw: Gateway) -> None:
    response = litellm.completion(
        **call(
            gw,
            messages=EXTRACT,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "person", "schema": PERSON, "strict": True},
            },
            max_tokens=60,
        )
    )
    choice = response.choices[0]
    assert choice.finish_reason == "stop"
    # The grammar holds the answer to the schema, whatever the model's quality.
    jsonschema.validate(json.loads(choice.message.content), PERSON)
