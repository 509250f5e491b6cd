"""How a generation ended: the last word of a runner's stream (docs/design.md §2.7).

A runner's ``generate`` yields one text piece per token and then says how it
ended, typed: ``Finish`` (the model ended it, its ``max_tokens``, a full
context, a cancel, an upstream's content filter) and the usage it knows, in
an ``Ending``. vLLM v1's ``RequestStatus`` and its one ``FinishReason`` map
are the model: the runner says what happened, and the surfaces map it to
their own words in one place (``tierlm.server.gateway.endings``).

A tierlm runner returns a ``Stream``: its source yields the pieces and, last,
one ``Ending``, which the stream keeps (``Stream.ending``) instead of passing
it on, so every reader of pieces reads ``str`` as before. ``ending_of`` reads
it from any stream, and infers it for a runner written without one.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierlm.runners.cancellation import CancelToken
    from tierlm.runners.requests import GenerationRequest

__all__ = ["Ending", "Finish", "Stream", "ending_of"]


class Finish(enum.Enum):
    """How a generation ended (not why it was told to stop: that is
    ``CancelReason``, which a ``CANCELLED`` end has as its cause)."""

    STOP = "stop"
    """The model ended it: an end-of-sequence token or a stop string."""
    LENGTH = "length"
    """It produced its ``max_tokens``."""
    CONTEXT = "context"
    """The model's context window is full."""
    CANCELLED = "cancelled"
    """Its cancel token stopped it (a yield, a preemption, the caller...)."""
    CONTENT_FILTER = "content_filter"
    """An upstream's content filter withheld the rest."""


@dataclass(frozen=True, slots=True)
class Ending:
    """One ``generate`` call's end: how, and its usage as the runner knows it."""

    finish: Finish
    tokens: int
    """Pieces this call yielded (one per token)."""
    prompt_tokens: int | None = None
    """Tokens of the prompt (+ resume text) the model continued from, when
    the runner knows them."""
    detail: str = ""
    """The runner's own word for it, where it has one (an upstream's
    ``finish_reason``, the llama.cpp worker's ``eos``): for logs and tests."""


class Stream(AsyncIterator[str]):
    """A runner's answer to ``generate``: its pieces, then ``ending`` (None
    until the source says it, and when a reader stops early)."""

    __slots__ = ("_source", "ending")

    def __init__(self, source: AsyncIterator[str | Ending]) -> None:
        self._source = source
        self.ending: Ending | None = None

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> str:
        item = await self._source.__anext__()
        while isinstance(item, Ending):  # the last item: kept, not yielded
            self.ending = item
            item = await self._source.__anext__()
        return item

    async def aclose(self) -> None:
        close = getattr(self._source, "aclose", None)
        if close is not None:
            await close()


def ending_of(
    stream: AsyncIterator[str], request: GenerationRequest, tokens: int, cancel: CancelToken
) -> Ending:
    """How ``stream`` (read to its end, ``tokens`` pieces) ended: its own
    ``Ending``; for a stream that says none (a runner written without one),
    a cancel if its token was cancelled, its ``max_tokens`` if it produced as
    many, else the model's stop."""
    if isinstance(stream, Stream) and stream.ending is not None:
        return stream.ending
    if cancel.cancelled:
        return Ending(Finish.CANCELLED, tokens)
    return Ending(Finish.LENGTH if tokens >= request.max_tokens else Finish.STOP, tokens)
