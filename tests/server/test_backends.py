"""The gateway over its HTTP backends: ``openai`` (upstream: another tierlm
gateway, a real OpenAI-compatible server on 127.0.0.1) and ``ollama`` (the fake
Ollama of the runner tests: Ollama cannot be installed here). And an upstream
that is down: 502, naming the cause, and the gateway keeps serving."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.payloads import MESSAGES
from tests.runners.fake_servers import make_app
from tests.runners.helpers import FakeState, free_port
from tests.server.helpers import Gateway, run_app, serve
from tierlm.server.settings.embedders import minilm_installed
from tierlm.server.settings.sources import settings_from_dict


@pytest.fixture(scope="module")
def upstream() -> Iterator[Gateway]:
    with serve() as gw:
        yield gw


def test_openai_backend(upstream: Gateway) -> None:
    settings = settings_from_dict(
        {"backend": {"kind": "openai", "url": upstream.url, "models": {"up": "sim-b"}}}
    )
    with serve(settings) as gw:
        client = gw.openai()
        # MiniLM too, by default, wherever the [embed] extra is installed.
        embed = ["all-MiniLM-L6-v2"] if minilm_installed() else []
        assert [m.id for m in client.models.list()] == ["up", *embed]
        completion = client.chat.completions.create(model="up", messages=MESSAGES, max_tokens=4)
        assert completion.choices[0].message.content == "w0 w1 w2 w3 "
        stream = client.completions.create(model="up", prompt="x", max_tokens=3, stream=True)
        assert "".join(c.choices[0].text for c in stream) == "w0 w1 w2 "
    # The upstream ran them as its own model sim-b.
    assert {j["model"] for j in upstream.state()["gateway"]["recent"][:2]} == {"sim-b"}


def test_openai_backend_without_models_passes_names_upstream(upstream: Gateway) -> None:
    settings = settings_from_dict({"backend": {"kind": "openai", "url": f"{upstream.url}/v1"}})
    with serve(settings) as gw:
        client = gw.openai()
        # Whatever the upstream lists (here a sim gateway, its embedding model too),
        # then this gateway's own embedding model (MiniLM by default with [embed]).
        embed = ["all-MiniLM-L6-v2"] if minilm_installed() else []
        assert [m.id for m in client.models.list()] == ["sim-a", "sim-b", "sim-embed", *embed]
        completion = client.chat.completions.create(model="sim-a", messages=MESSAGES, max_tokens=2)
        assert completion.choices[0].message.content == "w0 w1 "


def test_ollama_backend() -> None:
    with run_app(make_app(FakeState(requests=[], loaded={}, disconnects=[]))) as fake:
        settings = settings_from_dict(
            {"backend": {"kind": "ollama", "url": fake, "models": {"small": "llama3.2:1b"}}}
        )
        with serve(settings) as gw:
            client = gw.openai()
            completion = client.chat.completions.create(
                model="small", messages=MESSAGES, max_tokens=3
            )
            assert completion.choices[0].message.content == "t0 t1 t2 "
            stream = client.chat.completions.create(
                model="small", messages=MESSAGES, max_tokens=3, stream=True
            )
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == (
                "t0 t1 t2 "
            )


def test_an_upstream_that_is_down() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    settings = settings_from_dict(
        {"backend": {"kind": "openai", "url": url, "models": ["m"], "preload": False}}
    )
    with serve(settings) as gw:
        client = gw.openai()
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2)
        assert info.value.status_code == 502
        assert "backend: " in info.value.message
        stream = client.chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=2, stream=True
        )
        with pytest.raises(openai.APIError) as streamed:
            list(stream)
        assert "backend: " in str(streamed.value)
        assert gw.http.get("/health").json()["status"] == "ok"
        assert gw.state()["stats"]["failed"] == 2


def test_ollama_backend_tools_and_formats() -> None:
    """OpenAI's tool fields in Ollama's API, and Ollama's whole calls back as
    tool_calls (the fake follows Ollama's documented shapes)."""
    state = FakeState(requests=[], loaded={}, disconnects=[])
    with run_app(make_app(state)) as fake:
        settings = settings_from_dict(
            {"backend": {"kind": "ollama", "url": fake, "models": ["caller"]}}
        )
        with serve(settings) as gw:
            client = gw.openai()
            tool = {
                "type": "function",
                "function": {"name": "get_weather", "parameters": {"type": "object"}},
            }
            answer = client.chat.completions.create(
                model="caller", messages=MESSAGES, tools=[tool], max_tokens=20
            )
            (call,) = answer.choices[0].message.tool_calls or []
            assert (call.function.name, call.function.arguments) == (
                "get_weather",
                '{"city": "Paris"}',
            )
            assert answer.choices[0].finish_reason == "tool_calls"
            history = [
                *MESSAGES,
                {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
            ]
            client.chat.completions.create(
                model="caller",
                messages=history,
                max_tokens=3,
                response_format={"type": "json_object"},
            )
            _, sent = state.requests[-1]
            assert sent["format"] == "json" and "tools" not in sent
            assert sent["messages"][1]["tool_calls"] == [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
            ]
            assert sent["messages"][2]["role"] == "tool"
            with pytest.raises(openai.BadRequestError) as info:
                client.chat.completions.create(
                    model="caller", messages=MESSAGES, tools=[tool], tool_choice="required"
                )
            assert (
                "tool_choice: not supported by the ollama backend (supported by: llama-cpp, openai)"
                in info.value.message
            )
