"""Ollama's tool calls from the text a runner writes (``tierlm.runners.tool_calls``):
whole, once complete, with their arguments as an object, however the text is
cut into pieces. (The real model test, test_ollama_llama.py, reaches these only
when SmolLM2 chooses to call, which at 135M parameters it does not under
Ollama's "auto": Ollama's API has no tool_choice to force it.)"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tierlm.runners.tool_calls import format_call
from tierlm.server.ollama.answers import OllamaAnswer
from tierlm.server.ollama.schemas import OllamaChatRequest
from tierlm.server.ollama.translate import chat_params
from tierlm.server.settings.sections import LimitSettings

WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object"}},
}
TEXT = (
    "Let me look. "
    + format_call("get_weather", '{"city": "Paris"}')
    + "\n"
    + format_call("get_weather", '{"city": "Lyon", "note": "a } inside"}')
)


def answer() -> OllamaAnswer:
    request = OllamaChatRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER]}
    )
    return OllamaAnswer(chat_params(request, LimitSettings(), "llama-cpp"), "chat")


def pieces_of(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@given(st.lists(st.integers(min_value=0, max_value=len(TEXT)), max_size=30))
def test_calls_stream_whole_with_object_arguments(cuts: list[int]) -> None:
    rendered = answer()
    lines: list[dict[str, Any]] = []
    for piece in pieces_of(TEXT, cuts):
        lines += rendered.piece(piece)
    messages = [line["message"] for line in lines]
    # The space before a call is sent when it came before the call's tag could be
    # seen (the parser of /v1, tools.py, holds whitespace only once it may be a call's).
    assert "".join(m["content"] for m in messages).rstrip() == "Let me look."
    calls = [call["function"] for m in messages for call in m.get("tool_calls", ())]
    assert [(c["name"], c["arguments"]) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Lyon", "note": "a } inside"}),
    ]
    assert not any(line["done"] for line in lines)
