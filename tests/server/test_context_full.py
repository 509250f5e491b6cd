"""An answer that fills the model's context (issue 18, item 1), on the real
default model (SmolLM2-135M-Instruct) behind a gateway on 127.0.0.1 with a
small context (``n_ctx`` 256).

The answer is cut where the context ends: the client must be told so
(``finish_reason: "length"``, as OpenAI says it), or an agent takes truncated
JSON for a whole answer. And the full context must not outlive that request:
every later request, from anyone, is answered with tokens. Asserted on what
the client sees (``finish_reason``, token counts, text), never on time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.server.helpers import Gateway, serve_default_model

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp", reason="needs llama-cpp-python")

from tierlm.runners.llama_cpp import DEFAULT_CHAT_MODEL_ID  # noqa: E402

MODEL = DEFAULT_CHAT_MODEL_ID
N_CTX = 256
LONG = [
    {"role": "system", "content": "You are a storyteller."},
    {"role": "user", "content": "Tell me a long story about a dragon."},
]
# The model's end-of-generation tokens (<|endoftext|>, <|im_end|>, <reponame>)
# banned: the answer cannot end by itself, so it fills the context on any CPU,
# whatever text the kernels' rounding makes of it.
ENDLESS = {"logit_bias": {"0": -100, "2": -100, "4": -100}}
SHORT = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serve_default_model(n_ctx=N_CTX) as g:
        yield g


def chat(gw: Gateway, messages: list[dict[str, str]], **fields: Any) -> Any:
    return gw.openai().chat.completions.create(
        model=MODEL, messages=messages, temperature=0, **fields
    )


def test_an_answer_cut_by_the_context_says_length_and_the_next_is_answered(
    gw: Gateway,
) -> None:
    full = chat(gw, LONG, max_tokens=2000, **ENDLESS)
    assert full.choices[0].finish_reason == "length"
    # It ran until the context was full, not to max_tokens.
    assert full.usage.prompt_tokens + full.usage.completion_tokens == N_CTX
    assert full.choices[0].message.content

    # The context of that answer is gone: a short question gets its answer.
    for _ in range(2):
        short = chat(gw, SHORT, max_tokens=24)
        assert short.usage.completion_tokens > 0
        assert short.choices[0].message.content
        assert short.choices[0].finish_reason in ("stop", "length")


def test_a_streamed_answer_cut_by_the_context_ends_with_length(gw: Gateway) -> None:
    stream = chat(
        gw, LONG, max_tokens=2000, stream=True, stream_options={"include_usage": True}, **ENDLESS
    )
    chunks = list(stream)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons[-1] == "length" and set(reasons[:-1]) == {None}
    pieces = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > N_CTX // 2
    usage = chunks[-1].usage
    assert usage.prompt_tokens + usage.completion_tokens == N_CTX
    # And a streamed request after it streams tokens.
    after = chat(gw, SHORT, max_tokens=24, stream=True)
    assert [c for c in after if c.choices and c.choices[0].delta.content]


def test_a_request_that_asks_for_less_than_the_room_left_ends_as_before(gw: Gateway) -> None:
    """max_tokens smaller than the room: the cut is max_tokens', as always."""
    answer = chat(gw, LONG, max_tokens=10, **ENDLESS)
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 10
