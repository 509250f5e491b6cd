"""Issue 19 item 3: ``POST /v1/responses`` with the official ``openai`` client
(sync and async, ``responses.create`` and streaming) and the OpenAI Agents SDK,
on the real default model (SmolLM2-135M-Instruct) on 127.0.0.1; its store's
bound on the simulated device."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.server.helpers import Gateway, serve, serve_default_model, sim_settings

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
    with serve_default_model() as g:
        yield g


def model() -> str:
    from tierlm.runners.llama_cpp import DEFAULT_CHAT_MODEL_ID

    return DEFAULT_CHAT_MODEL_ID


@pytest.mark.llama
def test_text_with_instructions(gw: Gateway) -> None:
    response = gw.openai().responses.create(
        model=model(),
        instructions="Answer with one word.",
        input="What is the capital of France?",
        max_output_tokens=20,
        temperature=0,
    )
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status in ("completed", "incomplete")
    assert response.output[0].type == "message"
    assert response.output_text and "Paris" in response.output_text
    assert response.usage is not None and response.usage.output_tokens > 0
    assert response.instructions == "Answer with one word."


@pytest.mark.llama
def test_streaming_events_add_up_to_the_response(gw: Gateway) -> None:
    """Cut by max_output_tokens, the last event is ``response.incomplete`` (as
    OpenAI's: the client's ``get_final_response`` wants a ``completed`` one)."""
    deltas: list[str] = []
    kinds: list[str] = []
    sequence: list[int] = []
    with gw.openai().responses.stream(
        model=model(), input="Say hello.", max_output_tokens=12, temperature=0
    ) as stream:
        for event in stream:
            kinds.append(event.type)
            sequence.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = event.response  # the last event's
    assert final.status == kinds[-1].removeprefix("response.")
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert "response.output_item.added" in kinds and "response.output_text.done" in kinds
    assert sequence == list(range(len(sequence)))
    assert "".join(deltas) == final.output_text
    # And with stream=True on create: the same event types.
    events = list(
        gw.openai().responses.create(model=model(), input="Hi", max_output_tokens=5, stream=True)
    )
    assert events[0].type == "response.created" and events[-1].type.startswith("response.")


@pytest.mark.llama
def test_async_client(gw: Gateway) -> None:
    async def main() -> str:
        client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
        response = await client.responses.create(model=model(), input="Hi", max_output_tokens=8)
        streamed = []
        async with client.responses.stream(
            model=model(), input="Hi", max_output_tokens=8
        ) as stream:
            async for event in stream:
                streamed.append(event.type)
        await client.close()
        assert streamed[-1] in ("response.completed", "response.incomplete")
        return response.output_text

    assert isinstance(asyncio.run(main()), str)


@pytest.mark.llama
@pytest.mark.parametrize("stream", [False, True])
def test_a_function_tool_call(gw: Gateway, stream: bool) -> None:
    client = gw.openai()
    fields: dict[str, Any] = {
        "model": model(),
        "input": "What is the weather in Paris?",
        "tools": [WEATHER],
        "tool_choice": "required",
        "max_output_tokens": 60,
        "temperature": 0,
    }
    if stream:
        with client.responses.stream(**fields) as events:
            kinds = [e.type for e in events]
            response = events.get_final_response()
        assert "response.function_call_arguments.delta" in kinds
    else:
        response = client.responses.create(**fields)
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_weather" and "city" in json.loads(call.arguments)
    # The result goes back with previous_response_id, as agents do.
    follow = client.responses.create(
        model=model(),
        previous_response_id=response.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=30,
        temperature=0,
    )
    assert follow.output_text and follow.previous_response_id == response.id


@pytest.mark.llama
def test_text_format_json_schema(gw: Gateway) -> None:
    response = gw.openai().responses.create(
        model=model(),
        input="Extract the name and age as JSON: Alice is 30.",
        text={"format": {"type": "json_schema", "name": "person", "schema": PERSON}},
        max_output_tokens=60,
        temperature=0,
    )
    person = json.loads(response.output_text)
    assert set(person) == {"name", "age"} and person["age"] >= 0


@pytest.mark.llama
def test_previous_response_id_continues_the_conversation(gw: Gateway) -> None:
    client = gw.openai()
    first = client.responses.create(
        model=model(), input="My name is Ann.", max_output_tokens=10, temperature=0
    )
    second = client.responses.create(
        model=model(),
        previous_response_id=first.id,
        input="What is my name?",
        max_output_tokens=30,
        temperature=0,
    )
    assert second.usage is not None and first.usage is not None
    # The stored conversation was in the prompt: more input than the question alone.
    assert second.usage.input_tokens > first.usage.input_tokens + 5
    assert client.responses.retrieve(second.id).id == second.id


@pytest.mark.llama
def test_the_agents_sdk_runs_an_agent_with_a_tool(gw: Gateway) -> None:
    agents = pytest.importorskip("agents", reason="needs openai-agents")
    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        calls.append(city)
        return f"18 C and sunny in {city}"

    client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
    agent = agents.Agent(
        name="weather",
        instructions="You answer questions about the weather with the get_weather tool.",
        tools=[get_weather],
        model=agents.OpenAIResponsesModel(model=model(), openai_client=client),
        model_settings=agents.ModelSettings(tool_choice="required", max_tokens=60, temperature=0),
        tool_use_behavior="stop_on_first_tool",
    )
    agents.set_tracing_disabled(True)
    result = agents.Runner.run_sync(agent, "What is the weather in Paris?", max_turns=2)
    assert calls and result.final_output.startswith("18 C and sunny in")


def test_the_store_forgets_the_oldest_past_its_bytes() -> None:
    with serve(sim_settings({"limits": {"responses_store_bytes": 6000}})) as gw:
        client = gw.openai()
        ids = [
            client.responses.create(model="sim-a", input=f"note {i}", max_output_tokens=3).id
            for i in range(12)
        ]
        store = gw.app.state.responses_store
        assert 0 < len(store) < 12 and store.size <= 6000
        assert client.responses.retrieve(ids[-1]).id == ids[-1]
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(
                model="sim-a", previous_response_id=ids[0], input="again", max_output_tokens=3
            )
        assert info.value.param == "previous_response_id"  # type: ignore[attr-defined]
        unstored = client.responses.create(
            model="sim-a", input="x", max_output_tokens=3, store=False
        )
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(unstored.id)


def test_unsupported_input_is_a_400_naming_it() -> None:
    with serve() as gw:
        with pytest.raises(openai.BadRequestError) as info:
            gw.openai().responses.create(
                model="sim-a",
                input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
            )
        assert info.value.param == "input[0].content[0]"  # type: ignore[attr-defined]


@pytest.mark.llama
def test_langchain_use_responses_api(gw: Gateway) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    llm = langchain_openai.ChatOpenAI(
        model=model(),
        base_url=f"{gw.url}/v1",
        api_key="unused",
        use_responses_api=True,
        temperature=0,
        max_tokens=40,
        max_retries=0,
    )
    assert llm.invoke("What is the capital of France?").text
    streamed = "".join(chunk.text for chunk in llm.stream("Say hi."))
    assert streamed
    called = llm.bind_tools([WEATHER], tool_choice="required").invoke("Weather in Paris?")
    assert [c["name"] for c in called.tool_calls] == ["get_weather"]
