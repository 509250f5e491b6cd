"""Ollama's native API on the real default model (SmolLM2-135M-Instruct on
llama.cpp, 127.0.0.1), with the official ``ollama`` client and LangChain's
``ChatOllama``: what needs a model that reads its prompt (tools, ``format``
as JSON or a schema, the model's details). Greedy answers are compared with
the same request through ``/v1`` in the same test: one pipeline, one answer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.server.helpers import WAIT, Gateway, serve_default_model

pytestmark = pytest.mark.llama
llama_cpp = pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
ollama = pytest.importorskip("ollama", reason="needs the ollama client (the dev extra)")
jsonschema = pytest.importorskip("jsonschema")

from tierlm.runners.llama_cpp import DEFAULT_CHAT_MODEL_ID  # noqa: E402

MODEL = DEFAULT_CHAT_MODEL_ID
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
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
ALICE = [{"role": "user", "content": "Extract the name and age as JSON: Alice is 30."}]
PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve_default_model() as g:
        yield g


def client(gw: Gateway) -> Any:
    return ollama.Client(host=gw.url, timeout=WAIT * 4)


def v1(gw: Gateway, messages: list[dict[str, Any]], tokens: int, **more: Any) -> Any:
    return (
        gw.openai()
        .chat.completions.create(
            model=MODEL, messages=messages, max_tokens=tokens, temperature=0, **more
        )
        .choices[0]
    )


def test_a_chat_answers_as_the_same_chat_on_v1(gw: Gateway) -> None:
    expected = v1(gw, FRANCE, 16).message.content
    options = {"temperature": 0, "num_predict": 16}
    c = client(gw)
    answer = c.chat(model=MODEL, messages=FRANCE, stream=False, options=options)
    assert answer.message.content == expected and expected
    parts = list(c.chat(model=MODEL, messages=FRANCE, stream=True, options=options))
    assert "".join(p.message.content for p in parts) == expected
    last = parts[-1]
    assert last.done and last.eval_count == answer.eval_count
    # Exact counts, from the model's tokenizer: the same as /v1's usage.
    usage = (
        gw.openai()
        .chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=1, temperature=0)
        .usage
    )
    assert usage is not None and answer.prompt_eval_count == usage.prompt_tokens


def test_format_json_and_a_json_schema(gw: Gateway) -> None:
    c = client(gw)
    options = {"temperature": 0, "num_predict": 60}
    loose = c.chat(model=MODEL, messages=ALICE, format="json", stream=False, options=options)
    assert isinstance(json.loads(loose.message.content), dict)
    strict = c.chat(model=MODEL, messages=ALICE, format=PERSON, stream=False, options=options)
    jsonschema.validate(json.loads(strict.message.content), PERSON)
    generated = c.generate(model=MODEL, prompt=ALICE[0]["content"], format=PERSON, options=options)
    jsonschema.validate(json.loads(generated.response), PERSON)


def same_greedy_start(got: str, expected: str, head: int = 40) -> bool:
    """``got`` begins as ``expected`` does, over its first ``head``
    characters or until either ends."""
    start = expected[:head]
    return got.startswith(start) or (bool(got) and start.startswith(got))


def test_tools_answer_as_on_v1_with_object_arguments(gw: Gateway) -> None:
    c = client(gw)
    options = {"temperature": 0, "num_predict": 60}
    for messages in (PARIS, FRANCE):
        expected = v1(gw, messages, 60, tools=[WEATHER]).message
        answer = c.chat(
            model=MODEL, messages=messages, tools=[WEATHER], stream=False, options=options
        )
        streamed = list(
            c.chat(model=MODEL, messages=messages, tools=[WEATHER], stream=True, options=options)
        )
        calls = [call for p in streamed for call in p.message.tool_calls or ()]
        if expected.tool_calls:
            (call,) = answer.message.tool_calls
            assert call.function.name == expected.tool_calls[0].function.name
            arguments = dict(call.function.arguments)  # an object, as Ollama's
            assert arguments == json.loads(expected.tool_calls[0].function.arguments)
            jsonschema.validate(arguments, WEATHER["function"]["parameters"])
            assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
                (call.function.name, arguments)
            ]
        else:
            # Greedy, yet late tokens may differ: a batched decode sums in
            # another order, and one may end where the other goes on (on an
            # AVX2-only CPU the answer stopped three characters short).
            assert same_greedy_start(answer.message.content, expected.content) and not calls
            assert "<tool_call>" not in answer.message.content


def test_a_tool_result_goes_back_to_the_model(gw: Gateway) -> None:
    history = [
        *PARIS,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "tool_name": "get_weather", "content": "18 C and sunny"},
    ]
    options = {"temperature": 0, "num_predict": 30}
    with_result = client(gw).chat(model=MODEL, messages=history, stream=False, options=options)
    assert with_result.message.content
    # The call and its result are in the prompt the model read (exact counts).
    alone = client(gw).chat(model=MODEL, messages=PARIS, stream=False, options=options)
    assert with_result.prompt_eval_count > alone.prompt_eval_count + 10


def test_show_and_ps_tell_the_model_s_context_and_memory(gw: Gateway) -> None:
    c = client(gw)
    shown = c.show(MODEL)
    context = (shown.modelinfo or {})["context_length"]
    assert context > 0 and "tools" in (shown.capabilities or [])
    (listed,) = [m for m in c.list().models if m.model == f"{MODEL}:latest"]
    (loaded,) = c.ps().models
    assert loaded.context_length == context
    # The file, plus the KV of every slot's context: more than the file alone.
    assert listed.size is not None and loaded.size is not None
    assert os.path.getsize(shown.modelfile.split("FROM ", 1)[1].strip()) == listed.size
    assert loaded.size > listed.size


langchain_ollama = pytest.importorskip("langchain_ollama", reason="needs langchain-ollama")


def test_langchain_chat_ollama_chats_streams_and_extracts(gw: Gateway) -> None:
    """LangChain's ChatOllama, an app of Ollama's ecosystem, pointed at the gateway."""
    llm = langchain_ollama.ChatOllama(
        model=MODEL, base_url=gw.url, temperature=0, num_predict=16, validate_model_on_init=True
    )
    expected = v1(gw, FRANCE, 16).message.content
    assert llm.invoke(FRANCE[0]["content"]).content == expected
    assert "".join(str(chunk.content) for chunk in llm.stream(FRANCE[0]["content"])) == expected
    extractor = langchain_ollama.ChatOllama(
        model=MODEL, base_url=gw.url, temperature=0, num_predict=60
    ).with_structured_output(PERSON, method="json_schema")
    person = extractor.invoke(ALICE[0]["content"])
    jsonschema.validate(person, PERSON)
