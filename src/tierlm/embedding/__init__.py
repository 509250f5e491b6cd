"""The embedding lane and its embedders (docs/design.md §5).

Embeddings run beside the LLM scheduler, never through it::

    from tierlm.embedding import EmbeddingLane, OnnxMiniLMEmbedder

    async with EmbeddingLane(OnnxMiniLMEmbedder()) as lane:
        vector = await lane.embed("a new note")
        vectors = await lane.embed_many(["first", "second"])
"""

from tierlm.embedding.embedders import (
    Embedder,
    LlamaCppEmbedder,
    SentenceTransformerEmbedder,
    SimulatedEmbedder,
    Vector,
)
from tierlm.embedding.errors import (
    EmbeddingError,
    EmbeddingFailed,
    LaneClosed,
    LaneFull,
    TextTooLong,
)
from tierlm.embedding.lane import EmbeddingLane
from tierlm.embedding.machine import default_concurrency, total_memory_bytes
from tierlm.embedding.onnx_minilm import OnnxMiniLMEmbedder
from tierlm.embedding.stats import BatchObserver, LaneStats

__all__ = [
    "BatchObserver",
    "Embedder",
    "EmbeddingError",
    "EmbeddingFailed",
    "EmbeddingLane",
    "LaneClosed",
    "LaneFull",
    "LaneStats",
    "LlamaCppEmbedder",
    "OnnxMiniLMEmbedder",
    "SentenceTransformerEmbedder",
    "SimulatedEmbedder",
    "TextTooLong",
    "Vector",
    "default_concurrency",
    "total_memory_bytes",
]
