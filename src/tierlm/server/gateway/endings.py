"""How a generation ended, in the words of the APIs: the one map from the
runner's ``Finish`` (docs/design.md §2.7) to OpenAI's ``finish_reason`` and
Ollama's ``done_reason`` (vLLM v1 maps its ``RequestStatus`` once, so).

| ``Finish``       | ``finish_reason``, ``done_reason``          |
|------------------|---------------------------------------------|
| STOP             | ``stop`` (``tool_calls`` when it made calls) |
| LENGTH           | ``length``                                  |
| CONTEXT          | ``length`` (cut where the context is full)  |
| CONTENT_FILTER   | ``content_filter`` (an upstream's filter)   |
| CANCELLED        | ``stop`` (never an answer: the job did not complete) |
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from tierlm.runners.endings import Ending, Finish

__all__ = ["WORDS", "cut", "done_reason", "finish_reason"]

WORDS: Final[Mapping[Finish, str]] = {
    Finish.STOP: "stop",
    Finish.LENGTH: "length",
    Finish.CONTEXT: "length",
    Finish.CONTENT_FILTER: "content_filter",
    Finish.CANCELLED: "stop",
}
"""Each ``Finish`` as both APIs say it."""

_CUT: Final = frozenset({Finish.LENGTH, Finish.CONTEXT, Finish.CONTENT_FILTER})


def finish_reason(ending: Ending | None, tool_calls: bool = False) -> str:
    """OpenAI's ``finish_reason`` of a generation that ended so (``tool_calls``:
    its text held tool calls). No ending known (a runner that says none, and
    no count to tell by) is the model's stop."""
    word = WORDS[ending.finish] if ending is not None else "stop"
    return "tool_calls" if tool_calls and word == "stop" else word


def done_reason(ending: Ending | None) -> str:
    """Ollama's ``done_reason`` of a generation that ended so."""
    return WORDS[ending.finish] if ending is not None else "stop"


def cut(ending: Ending | None) -> bool:
    """Was it cut short rather than ended by the model (its text then need not
    be whole: a tool call, a JSON value)?"""
    return ending is not None and ending.finish in _CUT
