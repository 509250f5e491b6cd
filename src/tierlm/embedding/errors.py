"""The embedding lane's errors (docs/design.md §5)."""

from __future__ import annotations

from tierlm.errors import TierlmError

__all__ = ["EmbeddingError", "EmbeddingFailed", "LaneClosed", "LaneFull", "TextTooLong"]


class EmbeddingError(TierlmError):
    """Base class of the lane's errors."""

    code = "backend_error"


class LaneFull(EmbeddingError):
    """``nowait=True`` and the queue has no room for the text(s)."""

    status_hint = 429
    code = "queue_full"
    reason = "embedding_queue_full"


class LaneClosed(EmbeddingError):
    """The lane is closed, or was closed before the text was embedded."""

    status_hint = 503
    code = "shutting_down"


class EmbeddingFailed(EmbeddingError):
    """The embedder failed on this text (alone: its batch was retried in parts);
    ``__cause__`` says why, ``index`` which of an ``embed_many`` call's texts it was."""

    index: int | None = None


class TextTooLong(EmbeddingError, ValueError):
    """``overlong="error"`` and a text is longer than ``max_chars``."""

    status_hint = 400
    code = "invalid_request"
