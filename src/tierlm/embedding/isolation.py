"""A failing batch fails only the texts the embedder cannot take
(docs/design.md §5.2).

Batching puts strangers' texts in one embedder call; if that call fails, every
text in it would fail, and one bad text (or one caller sending them) would
fail everybody batched with it. ``embed_isolating`` retries a failed batch in
halves, down to single texts: a text that fails alone is the one that fails;
the others get their vectors. Bisection, not one call per text: with one bad
text in a batch of 32 that is 10 more calls, not 32 (at most ``2n - 1`` calls
in all, when every text fails).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from tierlm.embedding.errors import EmbeddingFailed

if TYPE_CHECKING:
    from tierlm.embedding.embedders import Vector

__all__ = ["embed_isolating", "failed_alone"]

Call = Callable[[list[str]], Awaitable[list["Vector"]]]


async def embed_isolating(call: Call, texts: Sequence[str]) -> list[Vector | Exception]:
    """Each text's vector, or the exception of the call that failed on it alone.

    ``call`` embeds a list of texts (all or nothing). Cancellation is not caught.
    """
    batch = list(texts)
    try:
        vectors: list[Vector | Exception] = list(await call(batch))
    except Exception as exc:
        if len(batch) == 1:
            return [exc]
        middle = len(batch) // 2
        return [
            *await embed_isolating(call, batch[:middle]),
            *await embed_isolating(call, batch[middle:]),
        ]
    return vectors


def failed_alone(cause: Exception, batch_size: int) -> EmbeddingFailed:
    """The error of a text the embedder failed on, alone, from a batch of ``batch_size``."""
    where = "" if batch_size == 1 else f", alone, after its batch of {batch_size} texts failed"
    error = EmbeddingFailed(f"embedder failed on this text{where}: {cause!r}")
    error.__cause__ = cause
    return error
