"""Tool calls in a generated text, parsed back into OpenAI's ``tool_calls``.

Runners write tool calls as text (``tierlm.runners.tool_calls``). The parser
reads that text as it streams, piece by piece, and splits it into the
answer's text and its calls: a call is announced as soon as its name is known
and its arguments follow in fragments, so a streamed answer gets OpenAI's
deltas (``index``, ``id``, ``type``, ``function.name``, then
``function.arguments`` fragments) while the model writes them. Whitespace
around calls (the newline between two calls) is not part of the answer.
A call cut short (``max_tokens``) keeps the arguments written so far, as
OpenAI's does: a prefix of its JSON (the whole of it when only the template's
closing markup was cut), never the markup; a call cut before its name is
complete is no call and no text. A ``<tool_call>`` followed by something else
than a call's head is text.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from tierlm.runners.tool_calls import CLOSE_TAG, OPEN_TAG

__all__ = ["Arguments", "Call", "Content", "Event", "ToolCallParser"]

_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*')
# The longest head worth waiting for: a name is at most 64 characters (OpenAI's rule).
_HEAD_MAX = 200


def _partial(text: str) -> str:
    """A regex matching any prefix of ``text`` (possibly empty)."""
    out = ""
    for char in reversed(text):
        out = f"(?:{re.escape(char)}{out})?"
    return out


# What may be the end of a call's arguments: "}" then the close tag, all or part.
_TAIL = re.compile(r"\s*(?:\}\s*" + _partial(CLOSE_TAG) + r")?\Z")


# What a call cut before its name ended begins with.
_HEAD_START = re.compile(r"\s*(?:\{.*)?\Z", re.DOTALL)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _open_prefix(text: str) -> int:
    """Length of the longest suffix of ``text`` that begins the open tag."""
    for size in range(min(len(text), len(OPEN_TAG) - 1), 0, -1):
        if OPEN_TAG.startswith(text[-size:]):
            return size
    return 0


@dataclass(slots=True)
class Call:
    index: int
    id: str
    name: str
    arguments: str = ""
    complete: bool = False

    def as_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class Content:
    text: str


@dataclass(frozen=True, slots=True)
class Arguments:
    index: int
    fragment: str


Event = Content | Call | Arguments
"""Text of the answer, a new call (name known), or a fragment of its arguments."""


class ToolCallParser:
    """Feed it the pieces of a generation; it says what they are."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.content = ""
        self._buffer = ""
        self._state = "text"  # "text", "head" (after the open tag), "arguments"
        self._space = ""  # whitespace held: part of the answer only if text follows

    def feed(self, text: str) -> list[Event]:
        self._buffer += text
        events: list[Event] = []
        while self._step(events):
            pass
        return events

    def finish(self, cut: bool = False) -> list[Event]:
        """The end of the generation (``cut``: by ``max_tokens``): what was held back."""
        events = self.feed("")
        buffer, self._buffer = self._buffer, ""
        if self._state == "head":
            if not (cut and _HEAD_START.match(buffer)):  # not a call after all
                self._text(OPEN_TAG + buffer, events)
            # else: a call cut before its name was complete: nothing to show
        elif self._state == "arguments":
            self._arguments(self._cut_arguments(buffer), events)
        elif not (cut and len(buffer) > 1):  # cut in "<tool_c": a call was beginning
            self._text(buffer, events)
        if not self.calls and self._space:
            events.append(self._answer(self._space))
        self._space = ""
        return events

    # -- states --------------------------------------------------------------

    def _step(self, events: list[Event]) -> bool:
        """Consume what can be decided; True if there may be more to do."""
        buffer = self._buffer
        if self._state == "text":
            at = buffer.find(OPEN_TAG)
            if at < 0:
                keep = _open_prefix(buffer)
                self._text(buffer[: len(buffer) - keep], events)
                self._buffer = buffer[len(buffer) - keep :]
                return False
            self._text(buffer[:at], events)
            self._buffer = buffer[at + len(OPEN_TAG) :]
            self._state = "head"
            return True
        if self._state == "head":
            match = _HEAD.match(buffer)
            if match is None:
                if len(buffer) > _HEAD_MAX or CLOSE_TAG in buffer:
                    self._text(OPEN_TAG, events)  # not a call
                    self._state = "text"
                    return True
                return False
            call = Call(len(self.calls), f"call_{secrets.token_hex(12)}", json.loads(match[1]))
            self.calls.append(call)
            events.append(call)
            self._buffer = buffer[match.end() :]
            self._state = "arguments"
            return True
        at = buffer.find(CLOSE_TAG)
        if at >= 0:
            end = buffer[:at].rstrip()
            self._arguments(end[:-1].rstrip() if end.endswith("}") else end, events)
            self.calls[-1].complete = True
            self._buffer = buffer[at + len(CLOSE_TAG) :]
            self._state = "text"
            return True
        held = _TAIL.search(buffer)
        cut = held.start() if held is not None else len(buffer)
        self._arguments(buffer[:cut], events)
        self._buffer = buffer[cut:]
        return False

    def _cut_arguments(self, held: str) -> str:
        """What of the held tail of a cut call's arguments belongs to them: all
        of it if that ends the JSON, none of it if it is the template's
        closing markup (``}\n</tool_...``) after whole arguments."""
        written = self.calls[-1].arguments
        tail = _TAIL.search(held)
        if tail is None or _is_json(written + held):
            return held
        return held[: tail.start()]

    def _text(self, text: str, events: list[Event]) -> None:
        if not text:
            return
        text = self._space + text
        if text.isspace():
            self._space = text
            return
        self._space = ""
        events.append(self._answer(text))

    def _answer(self, text: str) -> Content:
        self.content += text
        return Content(text)

    def _arguments(self, fragment: str, events: list[Event]) -> None:
        call = self.calls[-1]
        if not call.arguments:
            fragment = fragment.lstrip()
        if fragment:
            call.arguments += fragment
            events.append(Arguments(call.index, fragment))
