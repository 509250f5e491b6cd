"""Structured output and tool calls on the real SmolLM2-135M-Instruct, through
``LlamaCppRunner``: what the grammar forces parses and matches its schema,
also after a preemption in the middle of the JSON object (the resumed run's
grammar is fed the partial output first), whether the resume restores the KV
snapshot, re-evaluates the exact tokens, or re-tokenizes the text.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from tests.runners.helpers import run
from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.requests import GenerationRequest

if TYPE_CHECKING:
    from pathlib import Path

    from tierlm.runners.llama_cpp import LlamaCppRunner

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
jsonschema = pytest.importorskip("jsonschema")

from tierlm.runners.llama_cpp import (  # noqa: E402
    DEFAULT_CHAT_MODEL_ID,
    LlamaCppRunner,
    default_chat_spec,
)

MODEL = DEFAULT_CHAT_MODEL_ID
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "city": {"type": "string"},
        "hobbies": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age", "city", "hobbies"],
    "additionalProperties": False,
}
ASK = [
    {
        "role": "user",
        "content": "Alice is 30, lives in Paris and likes chess and tennis. Describe her in JSON.",
    }
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}


def runner_for(**options: Any) -> LlamaCppRunner:
    spec = default_chat_spec()
    assert spec is not None
    return LlamaCppRunner({MODEL: replace(spec, n_threads=1)}, **options)


def ask(extra: dict[str, Any], max_tokens: int = 120, **more: Any) -> GenerationRequest:
    return GenerationRequest(
        model_id=MODEL, messages=ASK, max_tokens=max_tokens, temperature=0.0, extra=extra, **more
    )


def as_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}


async def collect(
    runner: LlamaCppRunner, request: GenerationRequest, preempt_after: int = 0
) -> list[str]:
    token = CancelToken()
    pieces: list[str] = []
    async for piece in runner.generate(request, token):
        pieces.append(piece)
        if len(pieces) == preempt_after:
            token.cancel(CancelReason.PREEMPTED)
    return pieces


def test_json_schema_output_parses_and_matches(smollm2: Path) -> None:
    async def main() -> None:
        runner = runner_for()
        await runner.load(MODEL)
        text = "".join(await collect(runner, ask(as_schema(PERSON))))
        jsonschema.validate(json.loads(text), PERSON)
        assert runner.last_stats is not None and runner.last_stats.ended == "eos"
        await runner.aclose()

    run(main())


def test_json_object_output_is_an_object(smollm2: Path) -> None:
    async def main() -> None:
        runner = runner_for()
        await runner.load(MODEL)
        # Any object: what the prompt asks for is up to the model. (Asked to
        # "describe her in JSON", this 135M model lists hobbies until max_tokens.)
        extract = [{"role": "user", "content": "Extract the name and age as JSON: Alice is 30."}]
        request = replace(ask({"response_format": {"type": "json_object"}}), messages=extract)
        text = "".join(await collect(runner, request))
        answer = json.loads(text)
        assert isinstance(answer, dict) and answer.get("name") == "Alice"
        await runner.aclose()

    run(main())


def test_a_forced_tool_call_is_well_formed(smollm2: Path) -> None:
    async def main() -> None:
        runner = runner_for()
        await runner.load(MODEL)
        choice = {"type": "function", "function": {"name": "get_weather"}}
        request = replace(
            ask({"tools": [WEATHER], "tool_choice": choice}),
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        )
        text = "".join(await collect(runner, request))
        head = '<tool_call>\n{"name": "get_weather", "arguments": '
        assert text.startswith(head) and text.endswith("}\n</tool_call>")
        arguments = json.loads(text[len(head) : -len("}\n</tool_call>")])
        jsonschema.validate(arguments, WEATHER["function"]["parameters"])  # type: ignore[index]
        await runner.aclose()

    run(main())


@pytest.mark.parametrize("mode", ["kv restore", "re-evaluation", "re-tokenized text"])
def test_a_preemption_in_the_middle_of_a_json_object_still_yields_valid_json(
    smollm2: Path, mode: str
) -> None:
    """The resumed run continues the object under the same grammar: the grammar
    first accepts the partial output, so the continuation completes it."""

    async def main() -> None:
        runner = runner_for(kv_pool_bytes=0 if mode == "re-evaluation" else 256 * 2**20)
        await runner.load(MODEL)
        request = ask(as_schema(PERSON))
        full = "".join(await collect(runner, request))
        expected = {"kv restore": "snapshot", "re-evaluation": "tokens"}
        for after in (2, 6, 11, 17):
            partial = await collect(runner, request, preempt_after=after)
            assert runner.last_stats is not None and runner.last_stats.ended == "cancelled"
            so_far = "".join(partial)
            assert so_far.startswith("{") and so_far != full  # in the middle of the object
            resumer = runner
            if mode == "re-tokenized text":  # another worker, no snapshot: the text alone
                resumer = runner_for(kv_pool_bytes=0)
                await resumer.load(MODEL)
            else:  # something else runs meanwhile: the context no longer holds it
                await collect(runner, GenerationRequest(model_id=MODEL, prompt="Hi", max_tokens=2))
            resumed = replace(request, max_tokens=request.max_tokens - len(partial))
            rest = await collect(resumer, replace(resumed, resume_text=so_far))
            stats = resumer.last_stats
            assert stats is not None and stats.ended == "eos"
            assert stats.resumed_from == expected.get(mode, "text")
            text = so_far + "".join(rest)
            jsonschema.validate(json.loads(text), PERSON)
            if mode == "kv restore":  # exact: the uninterrupted run's KV state
                assert text == full
            if resumer is not runner:
                await resumer.aclose()
        await runner.aclose()

    run(main())
