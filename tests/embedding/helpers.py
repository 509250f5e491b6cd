"""Shared pieces of the embedding-lane tests."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tierlm.embedding import SimulatedEmbedder

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tierlm.embedding import Vector


class RecordingEmbedder(SimulatedEmbedder):
    """A simulated embedder that remembers each batch and when it started."""

    def __init__(self, dim: int = 16, **kwargs: object) -> None:
        super().__init__(dim, **kwargs)  # type: ignore[arg-type]
        self.batches: list[list[str]] = []
        self.started_at: list[float] = []

    async def embed_batch(self, texts: Sequence[str]) -> list[Vector]:
        self.batches.append(list(texts))
        self.started_at.append(asyncio.get_running_loop().time())
        return await super().embed_batch(texts)

    @property
    def sizes(self) -> list[int]:
        return [len(batch) for batch in self.batches]

    @property
    def seen(self) -> list[str]:
        return [text for batch in self.batches for text in batch]
