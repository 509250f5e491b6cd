"""How a runner writes tool calls into its stream of text pieces.

Runners yield text (docs/design.md §2: one piece per token), so a tool call
travels as text in one format, the one Hermes-style chat templates (Qwen2.5,
Hermes, SmolLM2's larger siblings) teach their models::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Several calls follow one another, separated by a newline. The llama-cpp runner
makes its model write exactly this (a grammar forces it); the upstream runners
write what their server sent as structured ``tool_calls`` in the same form
(``ToolCallWriter``); the gateway parses it back into OpenAI's ``tool_calls``
(``tierlm.server.openai.tools``). Because it is plain text, a tool call preempted
half-way resumes like any other text.
"""

from __future__ import annotations

import json

from tierlm.runners.errors import RunnerError
from tierlm.runners.requests import GenerationRequest

__all__ = [
    "CALL_TAIL",
    "CLOSE_TAG",
    "OPEN_TAG",
    "ToolCallWriter",
    "call_head",
    "check_resumable",
    "format_call",
]

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
CALL_TAIL = "}\n" + CLOSE_TAG
"""What ends a call, after its arguments."""


def call_head(name: str) -> str:
    """The text of a call up to its arguments."""
    return f'{OPEN_TAG}\n{{"name": {json.dumps(name)}, "arguments": '


def format_call(name: str, arguments: str) -> str:
    """One whole call; ``arguments`` is the JSON text of the arguments."""
    return call_head(name) + arguments + CALL_TAIL


def check_resumable(request: GenerationRequest) -> None:
    """Refuse to continue a preempted answer that holds a tool call on a server:
    its calls came structured, and no server continues one from this text (a
    llama.cpp model under tierlm's grammar does: it wrote the text)."""
    if OPEN_TAG in request.resume_text and request.extra.get("tools"):
        raise RunnerError(
            f"model {request.model_id!r}: an answer preempted in the middle of a tool call "
            "cannot be continued on an upstream server (make tool-calling classes "
            "requeue = false, or serve them with the llama-cpp backend)",
            model_id=request.model_id,
        )


class ToolCallWriter:
    """Turns a server's streamed tool calls (OpenAI's deltas: an index, then a
    name, then fragments of the arguments) into the text above."""

    def __init__(self) -> None:
        self.open: int | None = None
        """The index of the call being written."""
        self.calls = 0

    def start(self, index: int, name: str) -> str:
        """A new call: closes the previous one."""
        text = self.close()
        if self.calls:
            text += "\n"
        self.open = index
        self.calls += 1
        return text + call_head(name)

    def close(self) -> str:
        """The end of the open call, if any (at a new call, or the end of the stream)."""
        if self.open is None:
            return ""
        self.open = None
        return CALL_TAIL
