"""The official ``openai`` client against the gateway with the REAL llama-cpp
backend, over tiny random-weight GGUF models the tests generate (no download).

The generated models emit one printable ASCII character per token and always
run to max_tokens (``tierlm.testing.gguf_model``), so lengths are exact.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.payloads import MESSAGES
from tests.server.helpers import WAIT, Gateway, serve
from tests.server.test_errors import error_of
from tierlm.server.settings.embedders import minilm_installed
from tierlm.server.settings.sources import settings_from_dict
from tierlm.testing.gguf_model import write_model_pair

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

# One thread: the tiny models are not compute-bound, and llama.cpp's threads
# spin-wait on each other (see tests/runners/test_llama_cpp_runner.py).
MODEL = {"n_threads": 1, "n_ctx": 4096}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    a, b = write_model_pair(tmp_path_factory.mktemp("models"))
    settings = settings_from_dict(
        {
            "backend": {
                "kind": "llama-cpp",
                "models": {
                    "tiny-a": {"path": str(a), **MODEL},
                    "tiny-b": {"path": str(b), **MODEL},
                },
            },
            "limits": {"max_tokens_limit": 3500},
            # No swap away from a model within chat_grace of its last chat (30 s):
            # right for a person, but these tests change models right after chats.
            "scheduler": {"chat_grace": 0},
            # Its chats, back to back, stand for a person's (docs/design.md §4.11).
            "people": {"keyless": "person"},
        }
    )
    with serve(settings) as g:
        yield g


def test_models_and_preload(gw: Gateway) -> None:
    # Then MiniLM, served by default wherever the [embed] extra is installed.
    embed = ["all-MiniLM-L6-v2"] if minilm_installed() else []
    assert [m.id for m in gw.openai().models.list()] == ["tiny-a", "tiny-b", *embed]
    assert gw.http.get("/health").json()["loaded_model"] == "tiny-a"


def test_chat_streamed_and_not(gw: Gateway) -> None:
    client = gw.openai()
    completion = client.chat.completions.create(
        model="tiny-a", messages=MESSAGES, max_tokens=16, temperature=0
    )
    text = completion.choices[0].message.content
    assert text is not None and len(text) == 16 and text.isprintable()
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 16

    stream = client.chat.completions.create(
        model="tiny-a",
        messages=MESSAGES,
        max_tokens=16,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    # Greedy: the same text, token by token.
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 16


def test_completions_streamed_and_not(gw: Gateway) -> None:
    client = gw.openai()
    completion = client.completions.create(
        model="tiny-b", prompt="Once upon a time", max_tokens=12, temperature=0
    )
    text = completion.choices[0].text
    assert len(text) == 12
    stream = client.completions.create(
        model="tiny-b", prompt="Once upon a time", max_tokens=12, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in stream) == text
    assert gw.state()["loaded_model"] == "tiny-b"


def test_chat_preempts_a_background_request_across_a_swap(gw: Gateway) -> None:
    tokens = 3000  # ~2 s on the tiny model: seen running, then preempted
    gana = gw.openai(X_Tierlm_Class="gana")
    before = gw.state()["stats"]

    def background() -> tuple[str, int]:
        stream = gana.chat.completions.create(
            model="tiny-a",
            messages=MESSAGES,
            max_tokens=tokens,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        usage = chunks[-1].usage
        assert usage is not None
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return text, usage.completion_tokens

    future = gw.background(background)
    gw.wait_running("gana")
    # A person on the other model: T0 swaps at once (docs/design.md §4.8).
    chat = gw.openai().chat.completions.create(model="tiny-b", messages=MESSAGES, max_tokens=8)
    assert len(chat.choices[0].message.content or "") == 8
    assert not future.done()
    text, used = future.result(WAIT)
    # Resumed on tiny-a after the chat: one stream, every token once.
    assert used == tokens and len(text) == tokens
    after = gw.state()["stats"]
    assert after["preemptions"] - before["preemptions"] == 1
    assert after["swaps"] - before["swaps"] >= 2  # to tiny-b for the chat, back for the gana
    assert gw.metric("tierlm_preemptions_total", class_="gana") == 1
    assert gw.metric("tierlm_swaps_total", model="tiny-b") >= 1


@pytest.mark.parametrize(
    ("key", "param", "says"),
    [
        # Past int()'s 4 300 digits: was a 400 on ``messages`` with Python's text.
        ("9" * 5000, "logit_bias", "0 to 2147483647"),
        ("9" * 20, "logit_bias", "0 to 2147483647"),  # an integer, no token id
        ("2147483648", "logit_bias", "0 to 2147483647"),
        ("100000", "logit_bias.100000", "not in this model's vocabulary (0 to"),
    ],
)
def test_logit_bias_keys_out_of_range(gw: Gateway, key: str, param: str, says: str) -> None:
    body = {"model": "tiny-a", "messages": MESSAGES, "max_tokens": 2, "logit_bias": {key: 5}}
    response = gw.http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["param"] == param, error
    assert says in error["message"] and "token id" in error["message"], error
    assert "Exceeds" not in error["message"] and len(error["message"]) < 300, error
