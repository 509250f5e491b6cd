"""How an answer ended, as each API tells it (docs/design.md §2.7): the
runner's typed ending, mapped once (``gateway/endings``), never guessed from
how many tokens came.

Real requests to a real gateway on 127.0.0.1: a simulated device whose
answers end by themselves after ``ANSWER`` tokens (its end of sequence) and
one of whose models has a small context; and an OpenAI-compatible upstream
(the fake of ``fake_upstream``: no real server filters content on demand)
whose content filter ends an answer. Asserted on what the client reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.server.fake_upstream import FILTERED, FakeLog, make_fake_upstream
from tests.server.helpers import Gateway, run_app, serve, sim_settings
from tierlm.server.settings.sources import settings_from_dict

ANSWER = 5  # tokens of every simulated answer, then its end of sequence
CONTEXT = 4  # the "small" model's context, prompt included
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    raw = {
        "backend": {"answer_tokens": ANSWER, "models": {"sim-a": {}, "small": {"context": CONTEXT}}}
    }
    with serve(sim_settings(raw)) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def upstream_gw() -> Iterator[Gateway]:
    with run_app(make_fake_upstream(FakeLog())) as url:
        settings = settings_from_dict({"backend": {"kind": "openai", "url": url}})
        with serve(settings) as gateway:
            yield gateway


def _chat(gw: Gateway, model: str, max_tokens: int) -> tuple[str, int, int]:
    reply = gw.openai().chat.completions.create(model=model, messages=HI, max_tokens=max_tokens)
    assert reply.usage is not None
    reason = reply.choices[0].finish_reason
    return reason, reply.usage.prompt_tokens, reply.usage.completion_tokens


def _streamed(gw: Gateway, model: str, max_tokens: int) -> str | None:
    stream = gw.openai().chat.completions.create(
        model=model, messages=HI, max_tokens=max_tokens, stream=True
    )
    reasons = [c.choices[0].finish_reason for c in stream if c.choices]
    assert reasons[:-1] == [None] * (len(reasons) - 1)  # only the last says it
    return reasons[-1]


def _ollama(gw: Gateway, model: str, max_tokens: int) -> Any:
    body = {
        "model": model,
        "messages": HI,
        "stream": False,
        "options": {"num_predict": max_tokens},
    }
    reply = gw.http.post("/api/chat", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


# (model, max_tokens, finish_reason, tokens): cut by max_tokens, ended by the
# model's end of sequence, cut where the context is full.
CASES = [
    pytest.param("sim-a", 3, "length", 3, id="max_tokens"),
    pytest.param("sim-a", 10, "stop", ANSWER, id="eos"),
    pytest.param("small", 10, "length", None, id="context-full"),
]


@pytest.mark.parametrize(("model", "max_tokens", "reason", "tokens"), CASES)
def test_each_ending_says_its_reason_on_every_surface(
    gw: Gateway, model: str, max_tokens: int, reason: str, tokens: int | None
) -> None:
    said, prompt, completion = _chat(gw, model, max_tokens)
    assert said == reason
    if tokens is None:  # it ran until the context was full, not to max_tokens
        assert prompt + completion == CONTEXT
    else:
        assert completion == tokens
    assert _streamed(gw, model, max_tokens) == reason
    text = gw.openai().completions.create(model=model, prompt="hi", max_tokens=max_tokens)
    assert text.choices[0].finish_reason == reason
    ollama = _ollama(gw, model, max_tokens)
    assert ollama["done_reason"] == reason
    assert ollama["eval_count"] == completion


def test_an_upstreams_content_filter_is_passed_on(upstream_gw: Gateway) -> None:
    said, _, completion = _chat(upstream_gw, "filtered", 10)
    assert said == "content_filter"
    assert completion == FILTERED
    assert _streamed(upstream_gw, "filtered", 10) == "content_filter"
    assert _ollama(upstream_gw, "filtered", 10)["done_reason"] == "content_filter"
    # The Responses API: a filtered answer is incomplete, and says why.
    reply = upstream_gw.http.post(
        "/v1/responses", json={"model": "filtered", "input": "hi", "max_output_tokens": 10}
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["status"] == "incomplete", json.dumps(body)
    assert body["incomplete_details"] == {"reason": "content_filter"}
    # The same upstream's own "length" stays "length".
    assert _chat(upstream_gw, "ok", 3)[0] == "length"
