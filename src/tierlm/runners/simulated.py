"""A deterministic runner that spends loop time instead of computing tokens.

It is the device of the tests and the simulator (docs/design.md §2): a swap costs
``swap_seconds``; a generation costs ``prefill_per_token`` for each prompt token,
then ``token_interval`` for each generated token. On the virtual-time loop
(`tierlm.testing.run_virtual`) those costs take no wall time.

Two ways to generate:

- ``generate`` yields one piece per token, one timer each: for callers that
  watch the tokens (a chat stream, the gateway's ``sim`` backend).
- ``complete`` spends the same time in one or two timers and returns a summary:
  for the simulator, which runs days of background work and needs only counts
  (do not schedule one event per token when nothing observes them).

Both stop at the next token boundary once cancelled; a prefill is aborted at
once, as llama.cpp's abort callback allows.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass

from tierlm.runners.protocol import CancelToken, GenerationRequest, RunnerError, unknown_model

__all__ = ["SimulatedOutcome", "SimulatedRunner"]

# Defaults: a phone-class device of the seed (~20 tokens/s decode, ~10 s swap,
# "~10 s to unload + load on flutter_gemma 1.1.x").
DEFAULT_TOKEN_INTERVAL = 0.05
DEFAULT_SWAP_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class SimulatedOutcome:
    """What ``SimulatedRunner.complete`` did."""

    tokens: int
    """Tokens generated (the one in progress at a cancel is finished and counted)."""
    first_token_at: float | None
    """Loop time of the first token, None if none was produced."""
    prefill_seconds: float
    stopped: bool
    """True if the cancel token stopped it before ``max_tokens``."""


class SimulatedRunner:
    """The deterministic runner of the tests and the simulator."""

    def __init__(
        self,
        token_interval: float = DEFAULT_TOKEN_INTERVAL,
        prefill_per_token: float = 0.0,
        swap_seconds: float = DEFAULT_SWAP_SECONDS,
        initial_model: str | None = None,
        *,
        models: Collection[str] | None = None,
    ) -> None:
        for name, value in (
            ("token_interval", token_interval),
            ("prefill_per_token", prefill_per_token),
            ("swap_seconds", swap_seconds),
        ):
            if not isinstance(value, int | float) or value < 0 or math.isnan(value):
                raise ValueError(f"{name}: must be a number >= 0, got {value!r}")
        if token_interval == 0:
            raise ValueError("token_interval: must be > 0")
        self.token_interval = float(token_interval)
        self.prefill_per_token = float(prefill_per_token)
        self.swap_seconds = float(swap_seconds)
        self.models = frozenset(models) if models is not None else None
        if initial_model is not None:
            self._check_model(initial_model)
        self.loaded_model: str | None = initial_model
        self.loads = 0
        """How many times ``load`` switched the model."""

    def _check_model(self, model_id: str) -> None:
        if self.models is not None and model_id not in self.models:
            raise unknown_model(model_id, self.models)

    async def load(self, model_id: str) -> None:
        if model_id == self.loaded_model:
            return
        self._check_model(model_id)
        # The device holds nothing while it swaps.
        self.loaded_model = None
        await asyncio.sleep(self.swap_seconds)
        self.loaded_model = model_id
        self.loads += 1

    def prefill_seconds(self, request: GenerationRequest) -> float:
        tokens = request.approx_prompt_tokens()
        if request.prompt_tokens is not None:
            tokens += _resumed_tokens(request)
        return self.prefill_per_token * tokens

    def _check_request(self, request: GenerationRequest) -> None:
        if request.model_id != self.loaded_model:
            raise RunnerError(
                f"model {request.model_id!r}: not loaded (loaded: {self.loaded_model!r})",
                model_id=request.model_id,
            )

    async def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]:
        self._check_request(request)
        if await cancel.wait(self.prefill_seconds(request)):
            return
        offset = _resumed_tokens(request)
        for i in range(request.max_tokens):
            if cancel.cancelled:
                return
            await asyncio.sleep(self.token_interval)
            yield f"w{offset + i} "

    async def complete(self, request: GenerationRequest, cancel: CancelToken) -> SimulatedOutcome:
        """Spend what ``generate`` would, in at most three timers; return counts."""
        self._check_request(request)
        loop = asyncio.get_running_loop()
        prefill = self.prefill_seconds(request)
        if await cancel.wait(prefill):
            return SimulatedOutcome(0, None, prefill, stopped=True)
        decode_start = loop.time()
        interval = self.token_interval
        if not await cancel.wait(request.max_tokens * interval):
            return SimulatedOutcome(
                request.max_tokens, decode_start + interval, prefill, stopped=False
            )
        # Cancelled mid-decode: finish the token in progress (the token boundary).
        elapsed = loop.time() - decode_start
        tokens = min(request.max_tokens, math.floor(elapsed / interval + 1e-9) + 1)
        await asyncio.sleep(max(0.0, decode_start + tokens * interval - loop.time()))
        return SimulatedOutcome(
            tokens, decode_start + interval, prefill, stopped=tokens < request.max_tokens
        )


def _resumed_tokens(request: GenerationRequest) -> int:
    # Simulated pieces are "w<n> ": one space per token already produced.
    return request.resume_text.count(" ")
