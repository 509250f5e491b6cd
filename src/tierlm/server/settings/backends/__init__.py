"""The gateway's backends: what runs the models (``[backend]``).

Each backend is a pydantic model of its ``[backend]`` table that declares its
``kind``, its settings, its capabilities, how to build its runner and which
models it lists (``base.BackendSettings``). ``AnyBackend`` is the registry: the
settings accept exactly these kinds, and the gateway asks a backend what it can
do, never which kind it is.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, get_args

from pydantic import BeforeValidator, Field

from tierlm.runners.protocol import Runner
from tierlm.server.settings.backends.base import BackendSettings, Capabilities
from tierlm.server.settings.backends.llama_cpp import (
    LlamaCppBackend,
    LlamaModel,
    installed,
    local_model_available,
)
from tierlm.server.settings.backends.sim import SimBackend
from tierlm.server.settings.backends.upstream import OllamaBackend, OpenAIBackend, UpstreamModel
from tierlm.server.settings.schema import Flag

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "AnyBackend",
    "BackendSettings",
    "Capabilities",
    "LlamaCppBackend",
    "LlamaModel",
    "OllamaBackend",
    "OpenAIBackend",
    "SimBackend",
    "UpstreamModel",
    "backend_class",
    "close_runner",
    "local_model_available",
    "make_runner",
    "serve_candidates",
]

logger = logging.getLogger("tierlm.server")

_Backends = SimBackend | LlamaCppBackend | OpenAIBackend | OllamaBackend
BACKENDS: tuple[type[BackendSettings], ...] = get_args(_Backends)
"""Every backend, the default first."""
# The schema's default (ServerSettings(), a [backend] table without kind): the
# simulated device, the whole API with no model, the same on every machine.
# `tierlm serve` with no backend named prefers a real model (serve_default).
DEFAULT_BACKEND = SimBackend


def _kind_of(backend: type[BackendSettings]) -> Any:
    return backend.model_fields["kind"].default


def backend_class(value: Any) -> type[BackendSettings] | None:
    """The backend a ``[backend]`` table (or settings object) is; None if its
    kind is unknown. A table without ``kind`` is the default backend's."""
    if isinstance(value, BackendSettings):
        return type(value)
    kind = value.get("kind", _kind_of(DEFAULT_BACKEND)) if isinstance(value, dict) else None
    if value is None:
        kind = _kind_of(DEFAULT_BACKEND)
    return next((b for b in BACKENDS if _kind_of(b) == kind), None)


def _default_kind(value: Any) -> Any:
    if isinstance(value, dict) and "kind" not in value:
        return {"kind": _kind_of(DEFAULT_BACKEND), **value}
    return value


AnyBackend = Annotated[
    _Backends,
    Field(discriminator="kind"),
    BeforeValidator(_default_kind),
    Flag("--backend", "KIND"),
]
"""``[backend]``: one of ``BACKENDS``, told apart by ``kind`` (default ``sim``)."""


def serve_candidates() -> list[type[BackendSettings]]:
    """The backends ``tierlm serve`` tries, in order, when nothing names a kind:
    llama-cpp when llama-cpp-python is installed (with no models given, the
    embedded SmolLM2 of ``tierlm[local]``: a newcomer sees real tokens
    scheduled), then the simulated device. The first the settings validate
    for is served (``--n-ctx 512`` is llama-cpp's, ``--token-interval`` sim's)."""
    if installed("llama_cpp"):
        return [LlamaCppBackend, SimBackend]
    return [SimBackend]


def make_runner(backend: BackendSettings) -> Runner:
    """The runner ``backend`` describes."""
    return backend.make_runner()


async def close_runner(runner: Runner) -> None:
    """Free the model / close HTTP connections, for runners that hold any."""
    aclose = getattr(runner, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except Exception:
            logger.exception("closing the %s runner failed", type(runner).__name__)
