"""Bad requests get a 4xx in OpenAI's error format naming the field, and the
gateway keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.payloads import MESSAGES, chat_body
from tests.server.helpers import Gateway, module_gateway
from tierlm.server.openai.compat import TOOL

# One gateway for the module: each test also checks it still serves.
gw = module_gateway({"limits": {"max_body_bytes": 10_000, "max_tokens_limit": 100}})


def still_serves(gw: Gateway) -> None:
    completion = gw.openai().chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=2)
    assert completion.choices[0].message.content == "w0 w1 "


def error_of(response: Any) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "request body: not valid JSON"),
        (b"", "request body: empty"),
        (b"[1, 2]", "request body: must be a JSON object, got an array"),
        (b"\xff\xfe", "request body: not valid JSON"),
    ],
)
def test_malformed_body(gw: Gateway, content: bytes, message: str) -> None:
    response = gw.http.post(
        "/v1/chat/completions", content=content, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    error = error_of(response)
    assert error["message"].startswith(message)
    assert error["type"] == "invalid_request_error"
    still_serves(gw)


@pytest.mark.parametrize(
    ("change", "param", "message"),
    [
        ({"model": 3}, "model", "must be a non-empty string naming a model, got an integer"),
        (
            {"messages": "hi"},
            "messages",
            "must be a non-empty array of up to 2048 messages, got a string",
        ),
        ({"messages": []}, "messages", "must be a non-empty array"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "must be one of"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "got an integer"),
        ({"max_tokens": "ten"}, "max_tokens", "must be an integer, got a string"),
        ({"max_tokens": 0}, "max_tokens", "must be between 1 and 100"),
        ({"max_tokens": 101}, "max_tokens", "(limits.max_tokens_limit), got 101"),
        ({"max_completion_tokens": 500}, "max_completion_tokens", "must be between 1 and 100"),
        ({"temperature": "hot"}, "temperature", "must be a number, got a string"),
        ({"temperature": 3}, "temperature", "must be between 0 and 2"),
        ({"stop": 7}, "stop", "must be a string or an array"),
        ({"stream": "yes"}, "stream", "must be a boolean, got a string"),
        ({"stream_options": {"include_usage": 1}}, "stream_options.include_usage", "boolean"),
        ({"n": 17}, "n", "must be between 1 and 16, got 17"),
        ({"tools": [{"type": "function"}]}, "tools[0].function", "required"),
        (
            {"tools": [{"type": "function", "function": {"name": "get weather"}}]},
            "tools[0].function.name",
            "must be 1 to 64 letters, digits, underscores or dashes, got 'get weather'",
        ),
        ({"tool_choice": "required"}, "tool_choice", "needs tools"),
        ({"response_format": {"type": "xml"}}, "response_format.type", "must be one of text"),
        ({"logit_bias": {"a": 1}}, "logit_bias.a", "keys must be token ids"),
        ({"logit_bias": {"²": 5}}, "logit_bias.²", "keys must be token ids"),
        ({"logit_bias": {"٣": 5}}, "logit_bias.٣", "keys must be token ids"),
        ({"logit_bias": {"1": -101}}, "logit_bias.1", "between -100 and 100"),
        ({"logit_bias": {"9" * 5000: 1}}, "logit_bias", "token ids, decimal integers from 0 to"),
        ({"mirostat_tau": 3.0}, "mirostat_tau", "no effect without mirostat_mode"),
        ({"top_logprobs": 2}, "top_logprobs", "needs logprobs: true"),
        (
            {"messages": [{"role": "tool", "content": "x"}]},
            "messages[0].tool_call_id",
            "needs the id of the call",
        ),
    ],
)
def test_wrong_fields(gw: Gateway, change: dict[str, Any], param: str, message: str) -> None:
    response = gw.http.post("/v1/chat/completions", json={**chat_body(), **change})
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["param"] == param
    assert error["message"].startswith(f"{param}: ")
    assert message in error["message"]
    still_serves(gw)


def test_wrong_fields_through_the_openai_client(gw: Gateway) -> None:
    client = gw.openai()
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="sim-a", prompt=None, max_tokens=2)  # type: ignore[arg-type]
    assert "prompt: must be a string" in info.value.message
    assert info.value.param == "prompt"  # type: ignore[attr-defined]
    still_serves(gw)


def test_unknown_model(gw: Gateway) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        gw.openai().chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert "model 'gpt-4o': not served by this gateway (models: sim-a, sim-b)" in info.value.message
    assert info.value.code == "model_not_found"
    still_serves(gw)


def test_oversized_body(gw: Gateway) -> None:
    big = chat_body(messages=[{"role": "user", "content": "x" * 20_000}])
    response = gw.http.post("/v1/chat/completions", json=big)
    assert response.status_code == 413
    assert "larger than the limit of 10000 bytes" in error_of(response)["message"]

    # Without Content-Length (chunked): counted while reading.
    def chunks() -> Iterator[bytes]:
        yield b'{"model": "sim-a", "messages": [{"role": "user", "content": "'
        for _ in range(30):
            yield b"y" * 1000
        yield b'"}]}'

    response = gw.http.post("/v1/chat/completions", content=chunks())
    assert response.status_code == 413
    assert "larger than the limit of 10000 bytes" in error_of(response)["message"]
    still_serves(gw)


def test_bad_scheduling_headers(gw: Gateway) -> None:
    cases = {
        "X-Tierlm-Class": (
            "boss",
            "unknown task class 'boss' (classes: chat, extract, gana, nataraj)",
        ),
        "X-Tierlm-Deadline": ("tomorrow", "must be seconds from now (e.g. 30) or an RFC 3339 time"),
        "X-Tierlm-Producer": ("p" * 300, "must be 1 to 200 printable characters"),
    }
    for header, (value, message) in cases.items():
        response = gw.http.post("/v1/chat/completions", json=chat_body(), headers={header: value})
        assert response.status_code == 400
        error = error_of(response)
        assert error["param"] == header
        assert message in error["message"]
    # A deadline without a timezone is ambiguous.
    response = gw.http.post(
        "/v1/chat/completions",
        json=chat_body(),
        headers={"X-Tierlm-Deadline": "2030-01-01T00:00:00"},
    )
    assert response.status_code == 400
    still_serves(gw)


def test_unknown_endpoint_and_method(gw: Gateway) -> None:
    response = gw.http.get("/v1/engines")
    assert response.status_code == 404
    assert error_of(response)["message"] == "GET /v1/engines: no such endpoint"
    response = gw.http.get("/v1/chat/completions")
    assert response.status_code == 405
    assert "method not allowed" in error_of(response)["message"]
    still_serves(gw)


def test_rejections_are_counted(gw: Gateway) -> None:
    before = gw.metric("tierlm_rejected_requests_total", reason="invalid_json")
    gw.http.post("/v1/completions", content=b"{")
    assert gw.metric("tierlm_rejected_requests_total", reason="invalid_json") == before + 1
    before = gw.metric("tierlm_rejected_requests_total", reason="unknown_model")
    gw.http.post("/v1/completions", json={"model": "x", "prompt": "y"})
    assert gw.metric("tierlm_rejected_requests_total", reason="unknown_model") == before + 1


@pytest.mark.parametrize(
    ("change", "param", "message"),
    [
        ({"logit_bias": {"50256": -100}}, "logit_bias", "not supported by the sim backend"),
        ({"grammar": "root ::= [a-z]+"}, "grammar", "not supported by the sim backend"),
        ({"mirostat_mode": 2}, "mirostat_mode", "not supported by the sim backend"),
        ({"modalities": ["text", "audio"]}, "modalities", "only text is supported"),
        ({"tools": [TOOL]}, "tools", "not supported by the sim backend"),
        (
            {"response_format": {"type": "json_object"}},
            "response_format",
            "not supported by the sim backend",
        ),
        ({"logprobs": True}, "logprobs", "not supported by the sim backend"),
        ({"functions": [TOOL["function"]]}, "functions", "use tools and tool_choice"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content[0]",
            "only text parts are supported, got 'image_url'",
        ),
    ],
)
def test_fields_the_gateway_does_not_honour_are_refused(
    gw: Gateway, change: dict[str, Any], param: str, message: str
) -> None:
    """Never silently ignored: a value that asks for a feature the backend does
    not give is a 400 saying so, with code "unsupported"."""
    before = gw.metric("tierlm_rejected_requests_total", reason="unsupported")
    response = gw.http.post("/v1/chat/completions", json={**chat_body(), **change})
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert (error["param"], error["code"]) == (param, "unsupported")
    assert error["message"].startswith(f"{param}: ") and message in error["message"]
    assert gw.metric("tierlm_rejected_requests_total", reason="unsupported") == before + 1
    still_serves(gw)


def test_values_that_ask_for_nothing_pass(gw: Gateway) -> None:
    harmless = {
        "n": 1,
        "logprobs": False,
        "logit_bias": {},
        "mirostat_mode": 0,
        "modalities": ["text"],
        "response_format": {"type": "text"},
        "stream": None,
        "user": "end-user-7",
    }
    response = gw.http.post("/v1/chat/completions", json={**chat_body(max_tokens=2), **harmless})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "w0 w1 "


@pytest.mark.parametrize(
    ("path", "body", "param", "message"),
    [
        ("/v1/chat/completions", chat_body(max_token=5), "max_token", "did you mean 'max_tokens'?"),
        ("/v1/chat/completions", chat_body(frobnicate=1), "frobnicate", "(fields: model, "),
        (
            "/v1/completions",
            {"model": "sim-a", "prompt": "x", "echo": True, "logprobs": 1},
            "echo",
            "together with logprobs",
        ),
        ("/v1/completions", {"model": "sim-a", "prompt": "x", "best_of": 3}, "best_of", "got 3"),
        ("/v1/completions", {"model": "sim-a", "prompt": ["a"] * 17}, "prompt", "at most 16"),
        (
            "/v1/completions",
            {"model": "sim-a", "prompt": "x", "max_completion_tokens": 2},
            "max_completion_tokens",
            "unknown field",
        ),
    ],
)
def test_unknown_and_unsupported_fields_are_named(
    gw: Gateway, path: str, body: dict[str, Any], param: str, message: str
) -> None:
    response = gw.http.post(path, json=body)
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["param"] == param and message in error["message"]
    still_serves(gw)


def test_the_official_client_raises_on_unsupported_fields(gw: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        gw.openai().chat.completions.create(
            model="sim-a", messages=MESSAGES, logit_bias={"1": 5}, max_tokens=2
        )
    assert info.value.param == "logit_bias"  # type: ignore[attr-defined]
    assert info.value.code == "unsupported"
    assert "not supported by the sim backend" in info.value.message
    still_serves(gw)
