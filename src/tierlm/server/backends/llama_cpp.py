"""``kind = "llama-cpp"``: GGUF files run in this process by llama-cpp-python,
one loaded at a time (``tierlm.runners.llama_cpp``; needs ``tierlm[llama]``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from tierlm.runners.protocol import Runner
from tierlm.server.backends.base import MODELS, BackendSettings, at_least_one
from tierlm.server.keep_alive import Duration
from tierlm.server.schema import Expect, FieldError, PathField, Required, Schema

__all__ = ["LlamaCppBackend", "LlamaModel"]


def _existing_file(path: Path) -> Path:
    if not path.is_file():
        raise ValueError(f"no such file: {str(path)!r}")
    return path


GGUFFile = Annotated[
    PathField, AfterValidator(_existing_file), Required("needs the GGUF file's path")
]


class LlamaModel(Schema):
    """A GGUF model and how to load it (``LlamaModelSpec``): a table, or just the
    file's path. Options left out take the runner's defaults."""

    path: GGUFFile
    """The GGUF file, relative to the config file."""
    n_ctx: Annotated[int | None, Field(ge=1)] = None
    """Context size in tokens (unset: the runner's default)."""
    n_threads: Annotated[int | None, Field(ge=1)] = None
    """Decode threads (unset: all cores)."""
    n_threads_batch: Annotated[int | None, Field(ge=1)] = None
    """Prompt-evaluation threads (unset: ``n_threads``)."""
    n_batch: Annotated[int | None, Field(ge=1)] = None
    """Prompt tokens per batch (unset: the runner's default)."""
    n_gpu_layers: Annotated[int | None, Field(ge=-1)] = None
    """Layers offloaded to a GPU; -1: all (unset: none)."""
    seed: Annotated[int | None, Field(ge=0)] = None
    """Sampling seed (unset: llama.cpp's random one)."""
    chat_template: str | None = None
    """A Jinja chat template instead of the model's own."""
    options: Mapping[str, Any] = Field(default_factory=dict)
    """Any other ``llama_cpp.Llama`` argument (``flash_attn = true``...)."""
    keep_alive: Duration = None
    """Unload the model after this long idle (``"10m"``; unset: keep it until a swap)."""

    @model_validator(mode="before")
    @classmethod
    def _from_path(cls, value: Any) -> Any:
        return {"path": value} if isinstance(value, str) else value

    def load_options(self) -> dict[str, Any]:
        """The options given, as ``LlamaModelSpec`` takes them (the rest keep its defaults)."""
        return self.model_dump(exclude={"path", "keep_alive"}, exclude_unset=True)


def _paths_as_ids(value: Any) -> Any:
    # `--model path/to/qwen.gguf` (no ID=): the id is the file's name.
    if isinstance(value, list):
        raise ValueError("give a table of model id = GGUF path for llama-cpp")
    if isinstance(value, Mapping):
        return {
            (Path(key).stem if spec is None else key): (key if spec is None else spec)
            for key, spec in value.items()
        }
    return value


class LlamaCppBackend(BackendSettings):
    """GGUF models in this process, through llama-cpp-python."""

    kind: Literal["llama-cpp"] = "llama-cpp"
    models: Annotated[
        Mapping[str, Annotated[LlamaModel, Expect("the GGUF file's path, or a table with path")]],
        AfterValidator(at_least_one),
        MODELS,
        Required(
            "the llama-cpp backend needs at least one GGUF model "
            "([backend.models] in the config file, or --model ID=file.gguf)"
        ),
    ]
    """Model id = the GGUF file's path, or a table with ``path`` and load options."""

    @model_validator(mode="before")
    @classmethod
    def _bare_paths(cls, value: Any) -> Any:
        if isinstance(value, Mapping) and "models" in value:
            try:
                return {**value, "models": _paths_as_ids(value["models"])}
            except ValueError as exc:
                raise FieldError(str(exc), "models") from None
        return value

    def make_runner(self) -> Runner:
        from tierlm.runners.llama_cpp import LlamaCppRunner, LlamaModelSpec

        return LlamaCppRunner(
            {
                model_id: LlamaModelSpec(model.path, **model.load_options())
                for model_id, model in self.models.items()
            }
        )
