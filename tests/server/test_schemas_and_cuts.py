"""Issue 19 items 1 and 2, as the clients that hit them see it, on the real
default model (SmolLM2-135M-Instruct, llama-cpp) on 127.0.0.1.

1. JSON-schema keywords OpenAI accepts are accepted (pydantic's ``Field(ge=,
   lt=)``, ``format``...): integer bounds and formats are enforced by the
   grammar, the rest is checked on the finished output and reported in
   ``tierlm.schema_errors``.
2. A tool call cut by ``max_tokens`` ends with ``finish_reason: "length"`` and
   arguments that are a prefix of the call (whole when only the markup was
   cut), never the template's markup; streamed and not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, Field

from tests.server.helpers import Gateway, serve_default_model
from tierlm.server.openai.schema_check import schema_errors

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
jsonschema = pytest.importorskip("jsonschema")

from tierlm.runners.llama_cpp import DEFAULT_CHAT_MODEL_ID  # noqa: E402

MODEL = DEFAULT_CHAT_MODEL_ID
PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
FORCED = {"type": "function", "function": {"name": "get_weather"}}


class Magic(BaseModel):
    """LangChain's standard-suite tool: an integer with exclusive bounds."""

    input: int = Field(gt=-1000, lt=1000)


class Person(BaseModel):
    name: str = Field(min_length=1)
    age: int = Field(ge=0, le=120)
    email: str = Field(json_schema_extra={"format": "email"})
    height: float = Field(gt=0, le=3, description="metres")


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve_default_model() as g:
        yield g


def chat(gw: Gateway, **fields: Any) -> Any:
    fields.setdefault("messages", PARIS)
    fields.setdefault("temperature", 0)
    fields.setdefault("max_tokens", 120)
    return gw.openai().chat.completions.create(model=MODEL, **fields)


# -- 1. schema keywords -------------------------------------------------------------


def test_pydantic_bounds_and_formats_are_accepted_and_the_grammar_holds_them(
    gw: Gateway,
) -> None:
    schema = Person.model_json_schema()
    answer = chat(
        gw,
        messages=[{"role": "user", "content": "Alice, 30, alice@example.com, 1.7 m. As JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}},
        max_tokens=200,
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    person = json.loads(choice.message.content)
    assert 0 <= person["age"] <= 120  # the grammar's integer range
    assert re.fullmatch(r"[^@\s]+@[^@\s]+\.[a-z]+", person["email"])  # the grammar's pattern
    # height's bounds are not in the grammar: checked after, and said when broken.
    errors = (answer.model_extra or {}).get("tierlm", {}).get("schema_errors")
    expected = [
        e for e in schema_errors({"response_format": _fmt(schema)}, choice.message.content, [])
    ]
    assert (errors or []) == expected


def _fmt(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}


def test_a_broken_keyword_is_reported_in_tierlm_schema_errors(gw: Gateway) -> None:
    """``not`` is no grammar: a schema the grammar makes impossible to meet
    (maxLength 3, and not maxLength 3) shows what the report looks like."""
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "maxLength": 3, "not": {"maxLength": 3}}},
        "required": ["code"],
    }
    for stream in (False, True):
        fields = {"response_format": _fmt(schema), "max_tokens": 40}
        if not stream:
            answer = chat(gw, **fields)
            errors = answer.model_extra["tierlm"]["schema_errors"]
        else:
            chunks = list(chat(gw, stream=True, **fields))
            last = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
            errors = last.model_extra["tierlm"]["schema_errors"]
        assert errors and errors[0]["where"] == "content['code']"
        assert "should not be valid" in errors[0]["message"]


def test_langchain_tool_with_field_bounds_is_called_within_them(gw: Gateway) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    llm = langchain_openai.ChatOpenAI(
        model=MODEL, base_url=f"{gw.url}/v1", api_key="unused", temperature=0, max_retries=0
    )
    bound = llm.bind_tools([Magic], tool_choice="Magic")
    message = bound.invoke("What is the magic function of 3?")
    assert not message.invalid_tool_calls
    (call,) = message.tool_calls
    assert call["name"] == "Magic" and -1000 < call["args"]["input"] < 1000


def test_instructor_model_with_bounds(gw: Gateway) -> None:
    instructor = pytest.importorskip("instructor")

    class Age(BaseModel):
        name: str
        age: int = Field(ge=0, le=120)

    client = instructor.from_openai(gw.openai(), mode=instructor.Mode.TOOLS)
    age = client.chat.completions.create(
        model=MODEL,
        response_model=Age,
        messages=[{"role": "user", "content": "Alice is 30."}],
        max_tokens=80,
        temperature=0,
        max_retries=1,
    )
    assert 0 <= age.age <= 120


# -- 2. a tool call cut by max_tokens -----------------------------------------------


def _whole_call(gw: Gateway) -> tuple[str, int]:
    answer = chat(gw, tools=[WEATHER], tool_choice=FORCED)
    assert answer.choices[0].finish_reason == "tool_calls"
    return answer.choices[0].message.tool_calls[
        0
    ].function.arguments, answer.usage.completion_tokens


@pytest.mark.parametrize("short", [1, 3, 6])
def test_a_cut_call_has_a_prefix_of_its_arguments_streamed_and_not(gw: Gateway, short: int) -> None:
    whole, tokens = _whole_call(gw)
    fields = {"tools": [WEATHER], "tool_choice": FORCED, "max_tokens": tokens - short}
    answer = chat(gw, **fields)
    choice = answer.choices[0]
    assert choice.finish_reason == "length"
    calls = choice.message.tool_calls or []
    assert choice.message.content in (None, "")
    streamed: dict[int, str] = {}
    finish = None
    for chunk in chat(gw, stream=True, **fields):
        for c in chunk.choices:
            finish = c.finish_reason or finish
            assert not c.delta.content
            for delta in c.delta.tool_calls or ():
                streamed[delta.index] = streamed.get(delta.index, "") + (
                    delta.function.arguments or ""
                )
    assert finish == "length"
    assert [c.function.arguments for c in calls] == list(streamed.values())
    for call in calls:
        assert whole.startswith(call.function.arguments), call.function.arguments
        assert "</" not in call.function.arguments
    if short == 1:  # only the closing markup was cut: the arguments are whole
        assert [c.function.arguments for c in calls] == [whole]


def test_langchain_sees_a_valid_call_when_only_the_markup_was_cut(gw: Gateway) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    whole, tokens = _whole_call(gw)
    llm = langchain_openai.ChatOpenAI(
        model=MODEL,
        base_url=f"{gw.url}/v1",
        api_key="unused",
        temperature=0,
        max_tokens=tokens - 1,
        max_retries=0,
    )
    message = llm.bind_tools([WEATHER], tool_choice="get_weather").invoke(PARIS[0]["content"])
    assert message.response_metadata["finish_reason"] == "length"
    assert not message.invalid_tool_calls
    assert [c["args"] for c in message.tool_calls] == [json.loads(whole)]


def test_llamaindex_reads_the_cut_call_s_arguments_not_an_empty_dict(gw: Gateway) -> None:
    """LlamaIndex parses partial JSON: with the markup in ``arguments`` it fell
    back to ``{}`` and called the tool with no arguments."""
    openai_like = pytest.importorskip("llama_index.llms.openai_like")
    from llama_index.core.tools import FunctionTool

    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return city

    tool = FunctionTool.from_defaults(get_weather)

    def call(max_tokens: int) -> Any:
        llm = openai_like.OpenAILike(
            model=MODEL,
            api_base=f"{gw.url}/v1",
            api_key="unused",
            is_chat_model=True,
            is_function_calling_model=True,
            temperature=0,
            max_tokens=max_tokens,
        )
        response = llm.chat_with_tools([tool], user_msg=PARIS[0]["content"], tool_required=True)
        (selection,) = llm.get_tool_calls_from_response(response)
        assert selection.tool_name == "get_weather"
        return selection.tool_kwargs, response.raw.usage.completion_tokens

    whole, tokens = call(120)
    assert whole and isinstance(whole, dict)
    assert call(tokens - 1)[0] == whole  # only the markup was cut
