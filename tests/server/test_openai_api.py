"""The official ``openai`` client against the gateway (sim backend): streamed and
not, chat and completions, models, health; the gateway's own additions."""

from __future__ import annotations

import openai
import pytest

from tests.payloads import MESSAGES
from tests.server.helpers import Gateway


def test_models_and_health(gateway: Gateway) -> None:
    client = gateway.openai()
    # The sim backend serves simulated embeddings too, and lists that model.
    assert [m.id for m in client.models.list()] == ["sim-a", "sim-b", "sim-embed"]
    assert client.models.retrieve("sim-b").id == "sim-b"
    assert client.models.retrieve("sim-embed").id == "sim-embed"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")
    health = gateway.http.get("/health").json()
    assert health["status"] == "ok"
    assert health["loaded_model"] == "sim-a"  # preloaded: the first model


def test_chat_completion(gateway: Gateway) -> None:
    client = gateway.openai()
    raw = client.chat.completions.with_raw_response.create(
        model="sim-a", messages=MESSAGES, max_tokens=6
    )
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.model == "sim-a"
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "w0 w1 w2 w3 w4 w5 "
    assert choice.finish_reason == "length"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 6
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 6
    # Without keys or headers a request is chat (ServerSettings.default_class).
    assert raw.headers["x-tierlm-class"] == "chat"
    extra = completion.model_extra or {}
    assert extra["tierlm"]["job_id"] == int(raw.headers["x-tierlm-job-id"])
    assert extra["tierlm"]["time_to_first_token"] > 0


def test_chat_stream(gateway: Gateway) -> None:
    client = gateway.openai()
    stream = client.chat.completions.create(
        model="sim-a",
        messages=MESSAGES,
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "w0 w1 w2 w3 w4 "
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 5


def test_completions(gateway: Gateway) -> None:
    client = gateway.openai()
    completion = client.completions.create(model="sim-a", prompt="Once upon", max_tokens=4)
    assert completion.object == "text_completion"
    assert completion.choices[0].text == "w0 w1 w2 w3 "
    assert completion.choices[0].finish_reason == "length"

    stream = client.completions.create(
        model="sim-a", prompt=["Once upon"], max_tokens=3, stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == "w0 w1 w2 "
    assert chunks[-1].choices[0].finish_reason == "length"


def test_message_forms(gateway: Gateway) -> None:
    """Text parts, the developer role, an assistant turn without content."""
    client = gateway.openai()
    completion = client.chat.completions.create(
        model="sim-b",  # a swap on the way, too
        messages=[
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}],
            },
            {"role": "assistant", "content": None},
            {"role": "user", "content": "again"},
        ],
        max_tokens=2,
        temperature=0.2,
        top_p=0.9,
        stop=["x"],
        seed=1,
    )
    assert completion.choices[0].message.content == "w0 w1 "
    assert gateway.state()["loaded_model"] == "sim-b"
