"""LangChain's ``ChatOpenAI`` against the gateway: ``with_structured_output``
(``json_schema``, ``json_mode``, ``function_calling``) and ``bind_tools``
(a named tool, any tool, auto), on the llama-cpp backend with the default
model (the real SmolLM2-135M-Instruct), on 127.0.0.1.

An optional group (``-m langchain``; ``langchain-openai`` is in the dev
extra, which scripts/install installs): skipped when it is not installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.server.helpers import Gateway, serve_default_model

pytestmark = [pytest.mark.llama, pytest.mark.langchain]
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
langchain_openai = pytest.importorskip("langchain_openai", reason="needs langchain-openai")

from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from tierlm.runners.llama_cpp import (  # noqa: E402
    DEFAULT_CHAT_MODEL_ID,
)

MODEL = DEFAULT_CHAT_MODEL_ID
EXTRACT = "Extract the name and age as JSON: Alice is 30."


class Person(BaseModel):
    name: str
    age: int


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"sunny in {city}"


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve_default_model() as g:
        yield g


def chat_model(gw: Gateway) -> Any:
    return langchain_openai.ChatOpenAI(
        model=MODEL,
        base_url=f"{gw.url}/v1",
        api_key="unused",
        temperature=0,
        max_tokens=100,
        max_retries=0,
    )


@pytest.mark.parametrize("method", ["json_schema", "json_mode", "function_calling"])
def test_with_structured_output(gw: Gateway, method: str) -> None:
    structured = chat_model(gw).with_structured_output(Person, method=method, include_raw=True)
    result = structured.invoke(EXTRACT)
    assert result["parsing_error"] is None
    assert isinstance(result["parsed"], Person)
    assert result["parsed"].name == "Alice"


def weather_call(message: AIMessage) -> dict[str, Any]:
    assert isinstance(message, AIMessage) and not message.invalid_tool_calls
    (call,) = message.tool_calls
    assert call["name"] == "get_weather" and call["id"]
    assert set(call["args"]) == {"city"} and isinstance(call["args"]["city"], str)
    return dict(call)


@pytest.mark.parametrize("choice", ["get_weather", "any"])
def test_bind_tools_forced(gw: Gateway, choice: str) -> None:
    bound = chat_model(gw).bind_tools([get_weather], tool_choice=choice)
    message = bound.invoke("What is the weather in Paris?")
    weather_call(message)
    assert message.response_metadata["finish_reason"] == "tool_calls"


def test_bind_tools_auto_answers_or_calls(gw: Gateway) -> None:
    bound = chat_model(gw).bind_tools([get_weather])
    for question in ("What is the weather in Paris?", "What is the capital of France?"):
        message = bound.invoke(question)
        if message.tool_calls:
            weather_call(message)
        else:
            assert isinstance(message.content, str) and message.content.strip()


def test_a_tool_round_trip(gw: Gateway) -> None:
    """The call, its result as a ToolMessage, and the model's answer."""
    llm = chat_model(gw)
    question = "What is the weather in Paris?"
    call = weather_call(llm.bind_tools([get_weather], tool_choice="get_weather").invoke(question))
    history = [
        ("human", question),
        AIMessage(content="", tool_calls=[call]),
        get_weather.invoke(call),
    ]
    answer = llm.bind_tools([get_weather]).invoke(history)
    assert isinstance(answer, AIMessage) and (answer.content or answer.tool_calls)
