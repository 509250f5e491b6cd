"""The embedding lane's errors (docs/design.md §5)."""

from __future__ import annotations

__all__ = ["EmbeddingError", "EmbeddingFailed", "LaneClosed", "LaneFull", "TextTooLong"]


class EmbeddingError(Exception):
    """Base class of the lane's errors."""


class LaneFull(EmbeddingError):
    """``nowait=True`` and the queue has no room for the text(s)."""


class LaneClosed(EmbeddingError):
    """The lane is closed, or was closed before the text was embedded."""


class EmbeddingFailed(EmbeddingError):
    """The embedder failed on this text (alone: its batch was retried in parts);
    ``__cause__`` says why, ``index`` which of an ``embed_many`` call's texts it was."""

    index: int | None = None


class TextTooLong(EmbeddingError, ValueError):
    """``overlong="error"`` and a text is longer than ``max_chars``."""
