"""How tokens are produced: the runner protocol and its backends (docs/design.md §1).

Backends that need optional packages are imported lazily, so
``from tierlm.runners import SimulatedRunner`` works on the base install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlm.runners.cancellation import CallToken, Cancelled, CancelReason, CancelToken
from tierlm.runners.errors import CrashedTwice, DeviceCrashed, RunnerError
from tierlm.runners.protocol import Runner
from tierlm.runners.requests import GenerationRequest, Message
from tierlm.runners.simulated import SimulatedRunner

if TYPE_CHECKING:
    from tierlm.runners.llama_cpp import LlamaCppRunner
    from tierlm.runners.ollama import OllamaRunner
    from tierlm.runners.openai_compat import OpenAIRunner

__all__ = [
    "CallToken",
    "CancelReason",
    "CancelToken",
    "Cancelled",
    "CrashedTwice",
    "DeviceCrashed",
    "GenerationRequest",
    "LlamaCppRunner",
    "Message",
    "OllamaRunner",
    "OpenAIRunner",
    "Runner",
    "RunnerError",
    "SimulatedRunner",
]

_LAZY = {
    "LlamaCppRunner": "tierlm.runners.llama_cpp",
    "OpenAIRunner": "tierlm.runners.openai_compat",
    "OllamaRunner": "tierlm.runners.ollama",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tierlm.runners' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
