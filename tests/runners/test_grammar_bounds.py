"""A grammar's bounds, known before it is built (``prompt/grammar_bounds.py``,
docs/design.md §1.8):

- a schema whose repetitions would make a grammar over a bound is refused
  naming the keyword, before anything is built, and before the worker is asked;
- a grammar llama.cpp would abort on (a character class that matches nothing,
  a character no output can have) or crash parsing (groups nested past its
  stack) is refused naming its field;
- a refused grammar is not kept in the grammar cache.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from tierlm.runners.errors import InvalidRequest
from tierlm.runners.llama_cpp.prompt import grammars
from tierlm.runners.llama_cpp.prompt.grammar_bounds import (
    MAX_GRAMMAR_BYTES,
    MAX_GRAMMAR_NESTING,
    check_grammar_text,
    check_request_bounds,
)
from tierlm.runners.requests import GenerationRequest

if TYPE_CHECKING:
    from tests.runners.helpers import TinyModels

SCHEMA = "response_format.json_schema.schema"
BYTES = MAX_GRAMMAR_BYTES


def response(schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}


def strings(**bounds: int) -> dict[str, Any]:
    return {"type": "string", **bounds}


def refusal(extra: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        grammars.request_grammar(extra, "m")
    return info.value


@pytest.fixture
def nothing_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    def build(*_: Any) -> None:
        raise AssertionError("the grammar was built")

    monkeypatch.setattr(grammars, "_make_grammar", build)


@pytest.mark.parametrize(
    ("extra", "param", "value", "limit"),
    [
        (response(strings(minLength=2 * 10**8)), f"{SCHEMA}.minLength", 2 * 10**8, BYTES),
        (response(strings(minLength=10**9)), f"{SCHEMA}.minLength", 10**9, BYTES),
        (response(strings(minLength=2e8)), f"{SCHEMA}.minLength", 2 * 10**8, BYTES),  # JSON 2e8
        (
            response({"type": "array", "items": {"type": "string"}, "minItems": 10**7}),
            f"{SCHEMA}.minItems", 10**7, BYTES,
        ),
        (
            response({"type": "object", "properties": {"name": strings(maxLength=20_000)}}),
            f"{SCHEMA}.properties.name.maxLength", 20_000, MAX_GRAMMAR_NESTING,
        ),
        (response(strings(pattern="^a{0,5000}$")), f"{SCHEMA}.pattern", 5000, MAX_GRAMMAR_NESTING),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object",
                "properties": {"xs": {"type": "array", "items": {}, "maxItems": 10**6}},
            }}}]},
            "tools.0.function.parameters.properties.xs.maxItems", 10**6, MAX_GRAMMAR_NESTING,
        ),
    ],
)  # fmt: skip
def test_a_repetition_over_a_bound_is_refused_naming_it_before_anything_is_built(
    nothing_is_built: None, extra: dict[str, Any], param: str, value: int, limit: int
) -> None:
    error = refusal(extra)
    assert error.param == param
    assert str(value) in str(error) and f"limit of {limit}" in str(error)
    assert str(error).startswith(f"{param}: ")


def test_a_repetition_the_converter_does_not_write_costs_nothing() -> None:
    """The converter ignores ``maxItems`` without ``items``, a string's lengths
    under a pattern, an enum's type: taken as before."""
    for schema in (
        {"type": "array", "maxItems": 10**6},
        strings(pattern="^[a-z]+$", maxLength=10**6),
        {"type": "string", "enum": ["a", "b"], "minLength": 10**9},
        {"type": ["string", "null"], "maxLength": 10**6},
    ):
        assert grammars.request_grammar(response(schema), "m") is not None


def test_a_schema_within_the_bounds_is_built_and_under_the_byte_limit() -> None:
    """The edge: what the estimate takes, the converter builds under the limit."""
    for schema in (
        strings(minLength=150_000),
        strings(maxLength=MAX_GRAMMAR_NESTING),
        strings(minLength=10, maxLength=10 + MAX_GRAMMAR_NESTING),
        {"type": "array", "items": {"type": "integer"}, "minItems": 20_000},
        strings(pattern="^[a-z]{0,1000}$"),
    ):
        grammar = grammars.request_grammar(response(schema), "m")
        assert grammar is not None and len(grammar) <= MAX_GRAMMAR_BYTES


@pytest.mark.parametrize(
    "grammar",
    [
        r"root ::= [^\x00-\U0010FFFF]",  # the issue's: excludes every character
        r"root ::= [z-a]",  # a range from high to low
        r"root ::= [\x00]",  # NUL ends a token's text: no token has it
        r"root ::= [^\x01-\U0010FFFF]",
        r'root ::= "ok" [\U00110000-\U00110010]',  # past the last code point
        r'root ::= "a\x00b"',
        r'root ::= "a" | x' + "\n" + r"x ::= [^\u0000-\U0010FFFF]+",
    ],
)
def test_a_grammar_llama_cpp_would_abort_on_is_refused(grammar: str) -> None:
    error = refusal({"grammar": grammar})
    assert error.param == "grammar"
    assert "no character" in str(error) or "which no output can have" in str(error)


@pytest.mark.parametrize(
    "grammar",
    [
        r"root ::= [^a]",
        r"root ::= [^\x00-\x40\x42-\U0010FFFF]",  # "A" is left
        r"root ::= [a-z0-9_-]+",
        r'root ::= "# not a comment [z-a]" # [z-a] a comment',
        r'root ::= "\"" [^"\\\x7F\x00-\x1F]* "\""',  # a JSON string's characters
    ],
)
def test_grammars_that_can_match_are_taken(grammar: str) -> None:
    check_grammar_text(grammar, "grammar")


def test_a_schema_pattern_that_matches_nothing_is_refused_naming_the_response_format() -> None:
    error = refusal(response(strings(pattern="^[z-a]$")))
    assert error.param == "response_format"
    assert "[z-a]" in str(error)


def test_groups_nested_past_llama_cpp_s_stack_are_refused() -> None:
    """20 000 nested groups segfault llama.cpp's recursive parser (measured)."""
    deep = "root ::= " + "(" * 20_000 + '"a"' + ")" * 20_000
    error = refusal({"grammar": deep})
    assert error.param == "grammar" and str(MAX_GRAMMAR_NESTING) in str(error)


def test_refused_grammars_are_not_kept() -> None:
    kept = dict(grammars._cache)
    for extra in (
        response(strings(minLength=40_000_000)),
        {"grammar": r"root ::= [^\x00-\U0010FFFF]"},
        response(strings(pattern="^[z-a]$")),
    ):
        with pytest.raises(InvalidRequest):
            grammars.request_grammar(extra, "m")
        assert not grammars.is_made(extra, "m")
    assert dict(grammars._cache) == kept
    taken = response(strings(minLength=3))
    grammars.request_grammar(taken, "m")
    assert grammars.is_made(taken, "m")  # the control: a grammar that passed is kept


@pytest.mark.llama
def test_a_grammar_llama_cpp_refuses_is_not_kept(tiny_models: TinyModels) -> None:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
    from tierlm.runners.llama_cpp import LlamaModelSpec
    from tierlm.runners.llama_cpp.worker.loader import open_vocab
    from tierlm.runners.llama_cpp.worker.sampling import check_options

    vocab = open_vocab("a", LlamaModelSpec(tiny_models.a))
    extra = {"grammar": "root ::= undefined-rule"}
    request = GenerationRequest(model_id="a", prompt="x", extra=extra)
    with pytest.raises(InvalidRequest) as info:
        check_options(vocab.text.model, request)
    assert info.value.param == "grammar"
    assert not grammars.is_made(extra, "a")


def test_the_runner_refuses_before_the_worker_is_asked(
    tiny_models: TinyModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
    from tierlm.runners.llama_cpp import LlamaCppRunner

    runner = LlamaCppRunner({"a": str(tiny_models.a)})

    async def asked(*_: Any, **__: Any) -> Any:
        raise AssertionError("the worker was asked")

    monkeypatch.setattr(runner._supervisor, "call", asked)
    extra = response(strings(minLength=10**9))
    request = GenerationRequest(model_id="a", prompt="x", extra=extra)
    with pytest.raises(InvalidRequest) as info:
        asyncio.run(runner.count_prompt_tokens(request))
    assert info.value.param == f"{SCHEMA}.minLength"
    check_request_bounds({"grammar": 'root ::= "a"'})  # and a small grammar passes


@pytest.mark.llama
@pytest.mark.parametrize("slots", [1, 2])
def test_no_grammar_is_built_on_the_decode_thread(
    tiny_models: TinyModels, monkeypatch: pytest.MonkeyPatch, slots: int
) -> None:
    """A generation whose grammar no count made (a library caller's, or one
    that left the cache) has it made on a render thread, then runs under it:
    the decode thread, which steps every stream of the batch, builds none."""
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")
    import threading

    from tierlm.runners.cancellation import CancelToken
    from tierlm.runners.llama_cpp import LlamaCppRunner

    built_on: list[str] = []
    make = grammars._make_grammar

    def recording(extra: Any, model_id: str) -> str | None:
        built_on.append(threading.current_thread().name)
        return make(extra, model_id)

    monkeypatch.setattr(grammars, "_make_grammar", recording)
    extra = {"grammar": f'root ::= "yes" | "no{slots}"'}  # a grammar no test made before

    async def run() -> str:
        runner = LlamaCppRunner({"a": str(tiny_models.a)}, isolation="thread", slots=slots)
        try:
            await runner.load("a")
            request = GenerationRequest(
                model_id="a", prompt="Answer:", max_tokens=5, temperature=0, extra=extra
            )
            return "".join([piece async for piece in runner.generate(request, CancelToken())])
        finally:
            await runner.aclose()

    assert asyncio.run(run()) in ("yes", f"no{slots}")
    assert built_on and "tierlm-llama-decode" not in built_on
