"""A model id's GGUF file and its llama.cpp load options, typed and checked.

llama-cpp-python's ``Llama(...)`` silently ignores keyword arguments it does not
know, so an option misspelt, or one that lives elsewhere in llama.cpp (such as
``use_extra_bufts``, a model parameter ``Llama()`` has no argument for), would
quietly do nothing. Every option here is a typed field, checked when the spec
is built; the free-form ``options`` are checked by name against ``Llama()``'s
signature when the model is loaded; and after loading, the worker reads each
option back from what llama.cpp was given (``loader.verify_applied``).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "DEFAULT_N_BATCH",
    "DEFAULT_N_CTX",
    "LlamaModelSpec",
    "cpu_has_amx",
    "default_threads",
    "llama_arguments",
    "physical_cores",
]

# llama-cpp-python's server default (its Llama() default, 512, is too short for chat).
DEFAULT_N_CTX = 2048
# llama-cpp-python's Llama() default: tokens per llama_decode call of a prompt.
DEFAULT_N_BATCH = 512
# The typed fields below: never also in `options`, where they would be given twice.
_TYPED = frozenset(
    {"n_ctx", "n_threads", "n_threads_batch", "n_batch", "n_gpu_layers", "seed", "flash_attn"}
)
# Set by the runner itself: a spec may not override them.
_RESERVED = frozenset({"model_path", "verbose", "use_extra_bufts", "chat_handler"})


def physical_cores() -> int:
    """Physical cores among the CPUs this process may run on (hyper-threads of
    one core count once); all usable CPUs when the topology is unknown."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
    cores: set[str] = set()
    for cpu in cpus:
        siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            cores.add(siblings.read_text().strip())
        except OSError:
            cores.add(f"cpu{cpu}")  # no topology (containers, other OSes): one core each
    return max(1, len(cores))


def cpu_has_amx(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> bool:
    """Whether this CPU has Intel AMX (an ``amx_*`` flag in ``/proc/cpuinfo``).

    There, llama.cpp crashes in every batched decode of quantized weights
    repacked into AMX buffers (llama.cpp issues #16315, #20824), so a spec
    that leaves ``use_extra_bufts`` open loads with it off (the runner). False
    where the file cannot be read (not Linux): the start-up probe still guards.
    """
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() == "flags":
                    return any(flag.startswith("amx") for flag in value.split())
    except OSError:
        pass
    return False


def default_threads() -> int:
    """Decode threads when a spec leaves ``n_threads`` open: the physical cores.

    Not all logical CPUs: llama.cpp's threads wait for one another after every
    operation, so two hyper-threads of one core only slow each other down, and a
    descheduled thread stalls the rest (measured on a busy 2-core machine: all
    cores decoded 5x slower than one thread). Not llama-cpp-python's default of
    half the CPUs either, which wastes half of a machine without hyper-threads.
    """
    return physical_cores()


@functools.cache
def llama_arguments() -> frozenset[str]:
    """The keyword arguments ``llama_cpp.Llama()`` really takes (its signature)."""
    import inspect

    import llama_cpp

    parameters = inspect.signature(llama_cpp.Llama.__init__).parameters.values()
    return frozenset(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _positive(name: str, value: object, *, lowest: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name}: must be an int, got {type(value).__name__}")
    if value < lowest:
        raise ValueError(f"{name}: must be >= {lowest}, got {value}")


@dataclass(frozen=True, slots=True)
class LlamaModelSpec:
    """A model id's GGUF file and load options.

    Two specs of the same file with different options are two models: loading
    one after the other is a swap, as it is for llama.cpp.
    """

    path: str | os.PathLike[str]
    n_ctx: int = DEFAULT_N_CTX
    """Context size in tokens (llama.cpp rounds it up to a multiple of 256)."""
    n_threads: int | None = None
    """Decode threads; None = ``default_threads()``, the physical cores.

    On a machine where other busy processes share the cores, fewer threads can be
    much faster (measured here: 2 threads fell from ~150 to ~5-90 tokens/s while
    tests ran alongside; 1 thread held ~80), which is why the tests use 1.
    """
    n_threads_batch: int | None = None
    """Prompt-evaluation threads; None = ``n_threads``."""
    n_batch: int = DEFAULT_N_BATCH
    n_gpu_layers: int = 0
    """Layers offloaded to a GPU; -1 = all (llama.cpp's convention); 0 on a CPU build."""
    use_extra_bufts: bool | None = None
    """llama.cpp's weight repacking into extra buffer types (AMX, CPU_REPACK).

    None = off on a CPU with AMX (``cpu_has_amx``: quantized models crash in
    AMX code there, llama.cpp issues #16315, #20824), else llama.cpp's default
    (on); either way with the runner's start-up probe: if the first tiny
    generation after loading crashes the worker with it on, the model is
    loaded again with it off. True = on (the probe still guards); False = off.
    """
    flash_attn: bool = False
    """llama.cpp's flash attention (llama-cpp-python's default: off)."""
    seed: int | None = None
    """Sampling seed; None = llama.cpp's default (a random seed)."""
    chat_template: str | None = None
    """Overrides the model's ``tokenizer.chat_template``."""
    system_prompt: str | None = None
    """A system message put first when a chat request has none (what an Ollama
    Modelfile's ``SYSTEM`` does); None = the chat template's own default."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Other ``llama_cpp.Llama`` keyword arguments (``use_mmap``, ``type_k``...),
    checked by name against ``Llama()`` when the model loads."""

    def __post_init__(self) -> None:
        if not isinstance(self.path, str | os.PathLike):
            raise TypeError(f"path: must be a file path, got {type(self.path).__name__}")
        _positive("n_ctx", self.n_ctx)
        _positive("n_batch", self.n_batch)
        for name in ("n_threads", "n_threads_batch"):
            value = getattr(self, name)
            if value is not None:
                _positive(name, value)
        _positive("n_gpu_layers", self.n_gpu_layers, lowest=-1)
        if self.seed is not None:
            _positive("seed", self.seed, lowest=0)
        for name in ("use_extra_bufts", "flash_attn"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (name == "use_extra_bufts" and value is None):
                raise TypeError(f"{name}: must be true or false, got {value!r}")
        if self.chat_template is not None and not isinstance(self.chat_template, str):
            raise TypeError("chat_template: must be a string (a Jinja2 template)")
        if self.system_prompt is not None and not isinstance(self.system_prompt, str):
            raise TypeError("system_prompt: must be a string or None")
        clash = sorted((_TYPED | _RESERVED) & set(self.options))
        if clash:
            raise ValueError(
                f"options: {', '.join(clash)} must not be given here "
                "(each is a LlamaModelSpec field of its own, or set by the runner)"
            )

    @property
    def threads(self) -> int:
        return self.n_threads or default_threads()

    def options_summary(self) -> dict[str, object]:
        """The file and the main load options, as a gateway shows them."""
        return {
            "path": str(self.path),
            "n_ctx": self.n_ctx,
            "n_threads": self.threads,
            "n_batch": self.n_batch,
            "n_gpu_layers": self.n_gpu_layers,
            "use_extra_bufts": self.use_extra_bufts,
            "flash_attn": self.flash_attn,
        }

    def check_options(self) -> None:
        """Raise if ``options`` names an argument ``llama_cpp.Llama()`` does not
        take (it would silently ignore it). Imports llama_cpp."""
        accepted = llama_arguments()
        unknown = sorted(set(self.options) - accepted)
        if unknown:
            raise ValueError(
                f"options: {', '.join(map(repr, unknown))}: not an argument of "
                f"llama_cpp.Llama() (accepted: {', '.join(sorted(accepted - _RESERVED))})"
            )

    def llama_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``llama_cpp.Llama`` (``use_extra_bufts`` apart:
        it is a model parameter Llama() has no argument for; see loader.py)."""
        threads = self.threads
        kwargs: dict[str, Any] = {
            "n_ctx": self.n_ctx,
            "n_threads": threads,
            "n_threads_batch": self.n_threads_batch or threads,
            "n_batch": self.n_batch,
            "n_gpu_layers": self.n_gpu_layers,
            "flash_attn": self.flash_attn,
            "verbose": False,
        }
        if self.seed is not None:
            kwargs["seed"] = self.seed
        kwargs.update(self.options)
        return kwargs
