"""A generation's text, token by token: what the decode engine sends as pieces.

One piece per token (possibly empty, so pieces count tokens): the token's
bytes decoded as UTF-8 across token boundaries, with the text that may be the
start of a stop string held back until it cannot be, and cut at a stop string
when one appears; each token and the piece it gave go to the generation's
journal (``snapshots.TokenLog``: what a resume continues from, docs/design.md
§4.9). ``generation.py`` uses it.
"""

from __future__ import annotations

import codecs
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tierlm.runners.llama_cpp.worker.snapshots import TokenLog

__all__ = ["RUN_AHEAD", "Pieces"]

RUN_AHEAD = 8
"""Tokens a generation may produce beyond what its reader has taken.

Unbounded, a loop decoding thousands of tokens a second runs far ahead of a
busy event loop, and all of that is decoded after a cancel the reader would
have honoured at once. A few tokens of slack keep the engine from waiting on
the reader for every token."""


class Pieces:
    """The pieces of one generation's tokens (module docstring)."""

    def __init__(self, llm: Any, stops: Sequence[str], journal: TokenLog) -> None:
        self._llm = llm
        self._stops = [s for s in stops if s]
        self._journal = journal
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""
        """Text that may be the start of a stop string, not yet sent."""

    def of(self, token: int, *, last: bool) -> tuple[str, bool]:
        """The piece to send for ``token``, and whether a stop string ended the
        text with it. ``last``: the generation's last token releases all."""
        piece = self._utf8.decode(self._llm.detokenize([token], special=False))
        if self._stops:
            held = self._held + piece
            hit = _find_stop(held, self._stops)
            if hit is not None:
                self._record(token, held[:hit], clean=False)
                self._held = ""
                return held[:hit], True
            # Hold back what may start a stop string, but still one piece per
            # token (possibly empty), so pieces count tokens.
            cut = len(held) if last else _safe_prefix(held, self._stops)
            piece, self._held = held[:cut], held[cut:]
        self._record(token, piece, clean=not self._held and not self._utf8.getstate()[0])
        return piece, False

    def release(self) -> str:
        """Text held back for a stop string that never came, for the end
        token's piece. (After a cancel it is not sent: a resume regenerates
        it, so nothing is duplicated.)"""
        held, self._held = self._held, ""
        return held

    def _record(self, token: int, piece: str, *, clean: bool) -> None:
        self._journal.tokens.append(token)
        self._journal.pieces.append(piece)
        self._journal.clean.append(clean)


def _find_stop(text: str, stops: Sequence[str]) -> int | None:
    """Index of the earliest stop string in ``text``, None if there is none."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def _safe_prefix(text: str, stops: Sequence[str]) -> int:
    """Length of the prefix of ``text`` that cannot be part of a stop string."""
    for start in range(len(text)):
        rest = text[start:]
        if any(s.startswith(rest) for s in stops):
            return start
    return len(text)
