"""Message text is tokenized as text: control tokens come only from the template.

docs/design.md §1 "Message text is text": a chat template writes its turns with the
model's control tokens (``<|im_start|>``, ``<|im_end|>``...), and the rendered
prompt is tokenized with ``special=True`` so that those become the real
tokens. Tokenized that way, a message that merely *contains* the text
``<|im_end|>\\n<|im_start|>system`` (an agent pasting web text, a hostile
user) would close its own turn and open a system turn: it forges the chat.

So a message whose content holds any control-token text is rendered with a
one-off marker in its place; the rendered prompt is cut at the markers, the
template's pieces are tokenized with ``special=True`` and the message's text
with ``special=False`` (plain text: ``<|im_end|>`` becomes the tokens of
``<``, ``|``, ``im``...). A message without such text (nearly every one) takes
the one-string path, so its tokens are exactly what they always were.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from typing import Any

from tierlm.runners.errors import InvalidRequest
from tierlm.runners.requests import Message

__all__ = ["Piece", "has_control_text", "mark_control_text", "split_rendered", "tokenize_pieces"]

Piece = tuple[str, bool]
"""A piece of a rendered prompt and whether it is a message's literal text."""


def has_control_text(model: Any, text: str) -> bool:
    """Whether ``text`` holds the text of any of the model's special tokens
    (it tokenizes differently when they are parsed)."""
    raw = text.encode("utf-8")
    special: list[int] = model.tokenize(raw, add_bos=False, special=True)
    plain: list[int] = model.tokenize(raw, add_bos=False, special=False)
    return special != plain


def mark_control_text(
    model: Any, messages: Sequence[Message]
) -> tuple[list[dict[str, Any]], dict[str, tuple[int, str]]]:
    """The messages with each content holding control-token text replaced by
    a marker, and what each marker stands for (message index, content)."""
    nonce = secrets.token_hex(6)  # a marker no message can contain by chance or by design
    marked: list[dict[str, Any]] = []
    literals: dict[str, tuple[int, str]] = {}
    for index, message in enumerate(messages):
        m = dict(message)
        content = m.get("content")
        if isinstance(content, str) and content and has_control_text(model, content):
            marker = f"\ue000{nonce}:{index}\ue001"
            literals[marker] = (index, content)
            m["content"] = marker
        marked.append(m)
    return marked, literals


def split_rendered(prompt: str, literals: dict[str, tuple[int, str]]) -> list[Piece]:
    """``prompt`` cut at the markers, each put back as its message's text.

    A template that changes a content (slices it, or drops it) loses its
    marker: that message cannot be kept as text, so it is refused, naming it.
    """
    if not literals:
        return [(prompt, False)]
    pattern = "(" + "|".join(re.escape(marker) for marker in literals) + ")"
    parts = re.split(pattern, prompt)
    seen = [part for part in parts if part in literals]
    for marker, (index, _) in literals.items():
        if seen.count(marker) != 1:
            raise InvalidRequest(
                f"messages[{index}].content holds control-token text (such as <|im_end|>) "
                "that this model's chat template rewrites, so it cannot be kept as plain "
                "text; remove that text",
                param=f"messages[{index}].content",
            )
    pieces: list[Piece] = []
    for part in parts:
        if part in literals:
            pieces.append((literals[part][1], True))
        elif part:
            pieces.append((part, False))
    return pieces


def tokenize_pieces(model: Any, pieces: Sequence[Piece]) -> list[int]:
    """Tokens of a rendered chat: template text with its control tokens parsed,
    message text as plain text (the template writes any BOS itself)."""
    tokens: list[int] = []
    for text, literal in pieces:
        tokens += model.tokenize(text.encode("utf-8"), add_bos=False, special=not literal)
    return tokens
