"""``kind = "sim"``: a simulated device, for trying the API, the scheduling and
the dashboard without a model (``tierlm.runners.SimulatedRunner``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, model_validator

from tierlm.runners.protocol import Runner
from tierlm.runners.simulated import (
    DEFAULT_SWAP_SECONDS,
    DEFAULT_TOKEN_INTERVAL,
    LLAMA_CPP_CPU_BATCH_COST,
)
from tierlm.server.settings.backends.base import MODELS, BackendSettings, ModelTable, at_least_one
from tierlm.server.settings.duration import Duration
from tierlm.server.settings.schema import Flag, Schema

__all__ = ["SimBackend", "SimModel"]

# Two simulated models, so swaps can be tried without a model file.
DEFAULT_SIM_MODELS = ("sim-a", "sim-b")


class SimModel(Schema):
    """A simulated model: it has no file, only an idle time to live."""

    keep_alive: Duration = None
    """Unload the model after this long idle (``"10m"``; unset: keep it until a swap)."""
    context: Annotated[int | None, Field(ge=1)] = None
    """Its context window in tokens, prompt included: an answer that fills it
    ends there (``finish_reason: "length"``); unset: unbounded."""

    @model_validator(mode="before")
    @classmethod
    def _no_settings(cls, value: Any) -> Any:
        if value is None:  # `--model ID`, or an id in a list
            return {}
        if isinstance(value, str):
            raise ValueError(
                f"a simulated model has no file or upstream name, got {value!r}: give its id alone"
            )
        return value


class SimBackend(BackendSettings):
    """A simulated device producing ``w0 w1 w2 ...``."""

    kind: Literal["sim"] = "sim"
    models: Annotated[Mapping[str, SimModel], ModelTable, AfterValidator(at_least_one), MODELS] = (
        Field(default_factory=lambda: {name: SimModel() for name in DEFAULT_SIM_MODELS})
    )
    """The simulated models' ids (default ``sim-a``, ``sim-b``)."""
    token_interval: Annotated[float, Flag("--token-interval", "S"), Field(gt=0)] = (
        DEFAULT_TOKEN_INTERVAL
    )
    """Seconds per token (SimulatedRunner's default: a phone-class device)."""
    prefill_per_token: Annotated[float, Field(ge=0)] = 0.0
    """Seconds per prompt token before the first token (default: none)."""
    swap_seconds: Annotated[float, Flag("--swap-seconds", "S"), Field(ge=0)] = DEFAULT_SWAP_SECONDS
    """Seconds per swap (SimulatedRunner's default: the seed's ~10 s)."""
    batch_cost: Annotated[float, Field(ge=0)] = LLAMA_CPP_CPU_BATCH_COST
    """With ``slots`` > 1, a step of n sequences costs ``1 + batch_cost (n - 1)``
    of one's (default: the llama.cpp curve measured on 2 CPU cores)."""
    answer_tokens: Annotated[int | None, Field(ge=0)] = None
    """The simulated model ends each answer after this many tokens, as a model
    ends on its end-of-sequence token (``finish_reason: "stop"``); unset: it
    writes until ``max_tokens`` (``"length"``)."""

    default_embedder: ClassVar[str] = "sim"
    # A request without max_tokens gets a short answer: 256 simulated tokens
    # at the default 0.05 s each kept a newcomer's first "hello" busy for 13 s.
    default_max_tokens: ClassVar[int | None] = 16

    def make_runner(self) -> Runner:
        from tierlm.runners.simulated import SimulatedRunner

        models = self.model_ids()
        return SimulatedRunner(
            token_interval=self.token_interval,
            prefill_per_token=self.prefill_per_token,
            swap_seconds=self.swap_seconds,
            # The simulated device starts holding the first model (a preload for free).
            initial_model=models[0] if self.preload else None,
            models=models,
            slots=self.device_slots(),
            batch_cost=self.batch_cost,
            contexts={m: s.context for m, s in self.models.items() if s.context is not None},
            answer_tokens=self.answer_tokens,
        )
