"""Message text is tokenized as text: control tokens come only from the template.

docs/design.md §1.9: a chat template writes its turns with the
model's control tokens (``<|im_start|>``, ``<|im_end|>``...), and the rendered
prompt is tokenized with ``special=True`` so that those become the real
tokens. Tokenized that way, a message that merely *contains* the text
``<|im_end|>\\n<|im_start|>system`` (an agent pasting web text, a hostile
user) would close its own turn and open a system turn: it forges the chat.

So every client text the template prints that holds control-token text is
rendered with a one-off marker in its place: a message's content, a past tool
call's arguments (each string in them) and each string of a tool's
definition (its description, its parameters'). The rendered prompt is cut at
the markers, the template's pieces are tokenized with ``special=True`` and
the client's text with ``special=False`` (plain text: ``<|im_end|>`` becomes
the tokens of ``<``, ``|``, ``im``...). A template (or the documented tool
format, ``chat_format.py``) may print a string as JSON (``tojson``): the
marker holds characters JSON escapes, so its JSON form is told apart and the
text is put back JSON-escaped, as it would have been printed. A chat without
such text (nearly every one) takes the one-string path, so its tokens are
exactly what they always were.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from tierlm.runners.errors import InvalidRequest
from tierlm.runners.requests import Message

__all__ = ["Literals", "Piece", "has_control_text", "split_rendered", "tokenize_pieces"]

Piece = tuple[str, bool]
"""A piece of a rendered prompt and whether it is the client's literal text."""


def has_control_text(model: Any, text: str) -> bool:
    """Whether ``text`` holds the text of any of the model's special tokens
    (it tokenizes differently when they are parsed)."""
    raw = text.encode("utf-8")
    special: list[int] = model.tokenize(raw, add_bos=False, special=True)
    plain: list[int] = model.tokenize(raw, add_bos=False, special=False)
    return special != plain


class Literals:
    """The client's texts that hold control-token text, each behind a marker:
    marker -> (the request field it came from, the text)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        # A marker no client text can contain by chance or by design; \x01 and
        # \x02 are escaped by JSON, so a marker printed with tojson is told apart.
        self._nonce = secrets.token_hex(6)
        self.texts: dict[str, tuple[str, str]] = {}

    def text(self, text: str, param: str) -> str:
        """``text``, or a marker for it if it holds control-token text."""
        if not text or not has_control_text(self.model, text):
            return text
        marker = f"\x01{self._nonce}:{len(self.texts)}\x02"
        self.texts[marker] = (param, text)
        return marker

    def strings(self, value: Any, param: str) -> Any:
        """A JSON value with each string (keys too) that holds control-token
        text behind a marker; ``value`` itself when none does (one check of
        its JSON text first: nearly every tool and call has none)."""
        if not has_control_text(self.model, json.dumps(value, ensure_ascii=False)):
            return value
        return self._walk(value, param)

    def _walk(self, value: Any, param: str) -> Any:
        if isinstance(value, str):
            return self.text(value, param)
        if isinstance(value, Mapping):
            return {self.text(k, param): self._walk(v, f"{param}.{k}") for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._walk(v, f"{param}[{i}]") for i, v in enumerate(value)]
        return value

    def messages(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """The messages with their contents and past calls' arguments marked."""
        marked: list[dict[str, Any]] = []
        for index, message in enumerate(messages):
            m = dict(message)
            content = m.get("content")
            if isinstance(content, str):
                m["content"] = self.text(content, f"messages[{index}].content")
            calls = m.get("tool_calls")
            if isinstance(calls, list) and calls:
                where = f"messages[{index}].tool_calls"
                m["tool_calls"] = [self._call(c, f"{where}[{i}]") for i, c in enumerate(calls)]
            marked.append(m)
        return marked

    def tools(self, extra: Mapping[str, Any]) -> Mapping[str, Any]:
        """``extra`` with the strings of its ``tools`` marked."""
        tools = extra.get("tools")
        if not tools:
            return extra
        return {**extra, "tools": self.strings(list(tools), "tools")}

    def _call(self, call: Any, param: str) -> Any:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            return call
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            return call
        param = f"{param}.function.arguments"
        try:
            parsed = json.loads(arguments)
        except ValueError:
            marked = self.text(arguments, param)  # not JSON: printed as it came
        else:
            # Checked as parsed: "\u003c|im_end|\u003e" is a control token once a
            # template prints the object with tojson.
            strings = self.strings(parsed, param)
            marked = arguments if strings is parsed else json.dumps(strings, ensure_ascii=False)
        if marked is arguments:
            return call
        return {**call, "function": {**function, "arguments": marked}}


def split_rendered(prompt: str, literals: Mapping[str, tuple[str, str]]) -> list[Piece]:
    """``prompt`` cut at the markers, each put back as its text (JSON-escaped
    where the marker was printed as JSON).

    A template that changes a text (slices it, or drops it) loses its marker:
    that text cannot be kept as text, so it is refused, naming its field.
    """
    if not literals:
        return [(prompt, False)]
    forms: dict[str, tuple[str, str]] = {}
    for marker, (_, text) in literals.items():
        forms[marker] = (marker, text)
        forms[_json(marker)] = (marker, _json(text))
    pattern = "(" + "|".join(re.escape(form) for form in forms) + ")"
    parts = re.split(pattern, prompt)
    seen = [forms[part][0] for part in parts if part in forms]
    for marker, (param, _) in literals.items():
        if seen.count(marker) != 1:
            raise InvalidRequest(
                f"{param} holds control-token text (such as <|im_end|>) that this model's "
                "chat template rewrites, so it cannot be kept as plain text; remove that text",
                param=param,
            )
    pieces: list[Piece] = []
    for part in parts:
        if part in forms:
            pieces.append((forms[part][1], True))
        elif part:
            pieces.append((part, False))
    return pieces


def _json(text: str) -> str:
    """``text`` as a JSON string prints it, without the quotes."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def tokenize_pieces(model: Any, pieces: Sequence[Piece]) -> list[int]:
    """Tokens of a rendered chat: template text with its control tokens parsed,
    message text as plain text (the template writes any BOS itself)."""
    tokens: list[int] = []
    for text, literal in pieces:
        tokens += model.tokenize(text.encode("utf-8"), add_bos=False, special=not literal)
    return tokens
