"""What every backend of the gateway declares: its ``[backend]`` table (a
pydantic model whose ``kind`` tells the backends apart), its capabilities, how
it builds its runner and which models it serves. The registry of backends is
``tierlm.server.settings.backends``; nothing else in the gateway asks which kind it runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BeforeValidator, Field

from tierlm.runners.errors import RunnerError
from tierlm.runners.protocol import ModelLister, Runner
from tierlm.runners.requests import GenerationRequest
from tierlm.server.settings.schema import Expect, Flag, Schema

__all__ = [
    "BackendSettings",
    "Capabilities",
    "HttpURL",
    "at_least_one",
    "model_table",
]

logger = logging.getLogger("tierlm.server")


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do, for the parts of the gateway that depend on it."""

    upstream: bool = False
    """A server elsewhere runs the models: its failures are the gateway's 502
    (bad gateway), not a 500."""
    passes_model_names: bool = False
    """Without configured models, any model name a client sends goes upstream."""
    lists_models: bool = False
    """Without configured models, /v1/models lists the upstream's (the runner is
    a ``ModelLister``)."""


def _http_url(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"must be an http:// or https:// URL, got {url!r}")
    return url


HttpURL = Annotated[str, Flag("--url", "URL"), AfterValidator(_http_url)]
"""An upstream server's URL."""


def model_table(value: Any) -> Any:
    """``models`` as a table of id -> spec: a list of names is a table of names
    without specs (None), as ``--model NAME`` gives."""
    if not isinstance(value, list):
        return value
    table: dict[Any, None] = {}
    for name in value:
        if name in table:
            raise ValueError(f"duplicate model id {name!r}")
        table[name] = None
    return table


def at_least_one(models: Mapping[str, Any]) -> Mapping[str, Any]:
    if not models:
        raise ValueError("must name at least one model")
    return models


ModelTable = BeforeValidator(model_table)
MODELS = Expect("a table of model id = settings, or a list of model ids")


class BackendSettings(Schema):
    """Base of the ``[backend]`` tables: what every backend has."""

    kind: str
    preload: bool = True
    """Load the first model at startup, so the first request does not pay the swap."""
    slots: Annotated[int | None, Flag("--slots", "N"), Field(ge=1, le=256)] = None
    """Sequences the device decodes at once (docs/design.md §2.3): an
    upstream's parallel streams (``llama-server -np N``, vLLM), the simulated
    device's batch, llama.cpp's batch. 1: one at a time. Unset: 1, but for
    llama-cpp as many as the machine's memory holds KV for, up to 8."""
    models: Mapping[str, Schema] = Field(default_factory=dict)
    """The models clients may name, by the id they send as ``model``."""

    capabilities: ClassVar[Capabilities] = Capabilities()
    default_embedder: ClassVar[str] = "none"
    """What ``/v1/embeddings`` serves when ``[embeddings]`` names no backend."""
    default_max_tokens: ClassVar[int | None] = None
    """``limits.default_max_tokens`` when ``[limits]`` does not set it (None:
    the gateway's own default)."""

    def summary(self) -> str:
        """The backend in a few words, for ``tierlm serve --check``."""
        return self.kind

    def model_ids(self) -> list[str]:
        """The configured model ids, in order (the first is preloaded)."""
        return list(self.models)

    def make_runner(self) -> Runner:
        """The runner these settings describe; optional packages are imported here."""
        raise NotImplementedError

    def device_slots(self) -> int:
        """``slots``, or the backend's default when unset (one at a time)."""
        return 1 if self.slots is None else self.slots

    def slots_summary(self) -> str:
        """The slots and where their number comes from, for the start-up lines."""
        slots = self.device_slots()
        said = "set" if self.slots is not None else "default"
        return f"{slots} ({said}{', one sequence at a time' if slots == 1 else ''})"

    @property
    def passthrough(self) -> bool:
        """Any model name goes upstream (no models configured, and the backend can)."""
        return self.capabilities.passes_model_names and not self.models

    def public(self, text: str) -> str:
        """``text`` (an error's message) as clients may see it: without what
        only the operator should know (an upstream's address)."""
        return text

    async def readiness(self, runner: Runner) -> str | None:
        """Why the backend cannot serve now (``/ready`` answers 503 with it), or
        None when it can. Here, always: a model not loaded is loaded by the next
        request (``preload = false``, an unload, ``keep_alive``); the gateway
        itself says when loading it failed (``Gateway.not_ready``)."""
        return None

    async def prompt_problem(self, runner: Runner, request: GenerationRequest) -> str | None:
        """Why ``request``'s prompt cannot run on its model (longer than the
        context), checked before it is queued; None when it can or the backend
        cannot tell (then the job itself fails, if it must)."""
        return None

    def runner_state(self, runner: Runner) -> Mapping[str, Any]:
        """What the runner reports about itself, JSON-ready (the state API, /health)."""
        return {}

    async def list_models(self, runner: Runner) -> list[str]:
        """What /v1/models lists: the configured models, or, for a passthrough
        backend, the upstream's (best effort: an unreachable upstream lists
        nothing, and requests still pass through)."""
        if self.passthrough and self.capabilities.lists_models and isinstance(runner, ModelLister):
            try:
                return await runner.list_models()
            except RunnerError as exc:
                logger.warning("%s", exc)
                return []
        return self.model_ids()
