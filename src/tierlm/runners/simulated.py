"""A deterministic runner that spends loop time instead of computing tokens.

It is the device of the tests and the simulator (docs/design.md §2): a swap costs
``swap_seconds``; a generation costs ``prefill_per_token`` for each prompt token,
then ``token_interval`` for each generated token. On the virtual-time loop
(`tierlm.testing.run_virtual`) those costs take no wall time.

Two ways to generate:

- ``generate`` yields one piece per token. By default one timer per token, for
  callers that watch the tokens arrive (a chat stream, the gateway's ``sim``
  backend). With ``per_token=False`` it spends the same time in at most three
  timers and yields a run's pieces together when it ends: the simulator runs
  days of background work and needs the pieces (journals record them) but not
  one event per token ("do not schedule one event per token when nothing
  observes them"). Either way it stops at the same token boundary.
- ``complete`` spends what ``generate`` would and returns only counts.

Both stop at the next token boundary once cancelled; a prefill is aborted at
once, as llama.cpp's abort callback allows.

**Resuming** (docs/design.md §4 re-queue and zero-loss preemption). A request
with ``resume_text`` continues a preempted generation. What that costs depends
on what the runner can do, ``resume``:

- ``"re-evaluate"``: the prompt and the partial output are evaluated again,
  at the prefill speed (what llama.cpp without state save does);
- ``"restore"``: a generation stopped by a preemption leaves a KV snapshot of
  its sequence in a bounded pool (LRU, ``snapshot_pool_bytes``, each snapshot
  ``kv_bytes_per_token`` x its context); resuming it costs ``restore_seconds``
  instead of the evaluation. A snapshot evicted from the pool, or a resume
  that finds none, falls back to re-evaluation, as the real runner does.

Every call is reported to ``on_call`` (if set) as a ``SimulatedCall``: how its
prompt was made ready (fresh, re-evaluated, restored), at what cost, and the
tokens it produced. The simulator's waste metric reads them.
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from typing import Literal

from tierlm.runners.protocol import (
    CancelReason,
    CancelToken,
    GenerationRequest,
    RunnerError,
    unknown_model,
)

__all__ = [
    "DEFAULT_KV_BYTES_PER_TOKEN",
    "DEFAULT_RESTORE_SECONDS",
    "DEFAULT_SNAPSHOT_POOL_BYTES",
    "PromptReady",
    "ResumeCapability",
    "SimulatedCall",
    "SimulatedOutcome",
    "SimulatedRunner",
]

# Defaults: a phone-class device of the seed (~20 tokens/s decode, ~10 s swap,
# "~10 s to unload + load on flutter_gemma 1.1.x").
DEFAULT_TOKEN_INTERVAL = 0.05
DEFAULT_SWAP_SECONDS = 10.0

ResumeCapability = Literal["re-evaluate", "restore"]
PromptReady = Literal["fresh", "re-evaluate", "restore"]

# KV state per token of context: ~23 KB for SmolLM2-135M (bench/results/
# real_model.json, section "resume": 35 039 784 bytes for a 1 512-token
# context; /work/shared/FACTS.md, "KV state"). Sizes the snapshots, and so how
# many fit the pool.
DEFAULT_KV_BYTES_PER_TOKEN = 23_000
# The KV snapshot pool of the llama.cpp runner: 512 MiB by default (its
# config; docs/design.md §4 zero-loss preemption). ~23 000 tokens of context.
DEFAULT_SNAPSHOT_POOL_BYTES = 512 << 20
# Save + restore of one snapshot, measured on the llama.cpp worker with
# SmolLM2-135M on these machines (bench/results/real_model.json, section
# "resume", "kv restore", p50 of a 1 512-token context): save 25.1 ms +
# restore 4.6 ms. The resumed generation then evaluates one token, the step
# that produces its next token anyway, so nothing else is redone. For
# contrast, re-evaluating that context took 1.10x a fresh prompt evaluation
# (the same section, "re-evaluation"): what ``re-evaluate`` charges.
DEFAULT_RESTORE_SECONDS = 0.03


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


@dataclass(frozen=True, slots=True)
class SimulatedCall:
    """One generation call, reported to ``SimulatedRunner.on_call`` when it ends."""

    request: GenerationRequest
    ready: PromptReady
    """How the prompt was made ready: evaluated fresh, re-evaluated with the
    partial output of an earlier run (``resume_text``), or restored from a KV
    snapshot."""
    prompt_seconds: float
    """Device time spent making it ready (less than its cost if cut short)."""
    tokens: int
    first_token_at: float | None
    stopped: bool
    """Stopped by its cancel token before ``max_tokens``."""


class _SnapshotPool:
    """KV snapshots of preempted sequences, least recently saved evicted first."""

    __slots__ = ("_states", "capacity", "used")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._states: OrderedDict[tuple[str, str, str], int] = OrderedDict()

    def save(self, key: tuple[str, str, str], size: int) -> None:
        if size > self.capacity:
            return
        self.take(key)
        while self.used + size > self.capacity:
            _key, evicted = self._states.popitem(last=False)
            self.used -= evicted
        self._states[key] = size
        self.used += size

    def __contains__(self, key: tuple[str, str, str]) -> bool:
        return key in self._states

    def take(self, key: tuple[str, str, str]) -> None:
        size = self._states.pop(key, None)
        if size is not None:
            self.used -= size


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
        resume: ResumeCapability = "re-evaluate",
        restore_seconds: float = DEFAULT_RESTORE_SECONDS,
        snapshot_pool_bytes: int = DEFAULT_SNAPSHOT_POOL_BYTES,
        kv_bytes_per_token: int = DEFAULT_KV_BYTES_PER_TOKEN,
        per_token: bool = True,
    ) -> None:
        for name, value in (
            ("token_interval", token_interval),
            ("prefill_per_token", prefill_per_token),
            ("swap_seconds", swap_seconds),
            ("restore_seconds", restore_seconds),
            ("snapshot_pool_bytes", snapshot_pool_bytes),
            ("kv_bytes_per_token", kv_bytes_per_token),
        ):
            if not isinstance(value, int | float) or value < 0 or math.isnan(value):
                raise ValueError(f"{name}: must be a number >= 0, got {value!r}")
        if token_interval == 0:
            raise ValueError("token_interval: must be > 0")
        if resume not in ("re-evaluate", "restore"):
            raise ValueError(f"resume: must be 're-evaluate' or 'restore', got {resume!r}")
        self.token_interval = float(token_interval)
        self.prefill_per_token = float(prefill_per_token)
        self.swap_seconds = float(swap_seconds)
        self.resume: ResumeCapability = resume
        self.restore_seconds = float(restore_seconds)
        self.kv_bytes_per_token = int(kv_bytes_per_token)
        self.snapshots = _SnapshotPool(int(snapshot_pool_bytes))
        self.per_token = per_token
        self.models = frozenset(models) if models is not None else None
        if initial_model is not None:
            self._check_model(initial_model)
        self.loaded_model: str | None = initial_model
        self.loads = 0
        """How many times ``load`` switched the model."""
        self.on_call: Callable[[SimulatedCall], None] | None = None

    def _check_model(self, model_id: str) -> None:
        if self.models is not None and model_id not in self.models:
            raise unknown_model(model_id, self.models)

    async def load(self, model_id: str) -> None:
        if model_id == self.loaded_model:
            return
        self._check_model(model_id)
        # The device holds nothing while it swaps. Snapshots are per model and
        # stay in the pool (docs/design.md §4: a swap keeps the pool).
        self.loaded_model = None
        await asyncio.sleep(self.swap_seconds)
        self.loaded_model = model_id
        self.loads += 1

    async def unload(self) -> None:
        """Free the simulated device (instant: nothing is held)."""
        self.loaded_model = None

    def prefill_seconds(self, request: GenerationRequest) -> float:
        """Evaluating the prompt and any partial output (``resume_text``)."""
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

    def _ready(self, request: GenerationRequest) -> tuple[PromptReady, float]:
        """How this request's prompt gets ready, and what that costs."""
        if not request.resume_text:
            return "fresh", self.prefill_seconds(request)
        if self.resume == "restore" and _state_key(request) in self.snapshots:
            return "restore", self.restore_seconds
        return "re-evaluate", self.prefill_seconds(request)

    def _stopped(self, request: GenerationRequest, cancel: CancelToken, tokens: int) -> None:
        """A generation stopped early: keep its sequence's state if it was preempted."""
        if self.resume != "restore" or tokens == 0 or cancel.reason is not CancelReason.PREEMPTED:
            return
        produced = "".join(_piece(_resumed_tokens(request) + i) for i in range(tokens))
        context = request.approx_prompt_tokens() + _resumed_tokens(request) + tokens
        key = _state_key(request, request.resume_text + produced)
        self.snapshots.save(key, context * self.kv_bytes_per_token)

    def _report(
        self,
        request: GenerationRequest,
        ready: PromptReady,
        spent: float,
        tokens: int,
        first: float | None,
        stopped: bool,
    ) -> None:
        if self.on_call is not None:
            self.on_call(SimulatedCall(request, ready, spent, tokens, first, stopped))

    async def generate(self, request: GenerationRequest, cancel: CancelToken) -> AsyncIterator[str]:
        self._check_request(request)
        loop = asyncio.get_running_loop()
        ready, cost = self._ready(request)
        started = loop.time()
        if await cancel.wait(cost):
            # A restore cut short leaves the snapshot where it was.
            self._report(request, ready, loop.time() - started, 0, None, stopped=True)
            return
        if ready == "restore":
            self.snapshots.take(_state_key(request))
        offset = _resumed_tokens(request)
        interval = self.token_interval
        tokens = 0
        first: float | None = None
        try:
            if self.per_token:
                for i in range(request.max_tokens):
                    if cancel.cancelled:
                        return
                    await asyncio.sleep(interval)
                    tokens += 1
                    if first is None:
                        first = loop.time()
                    yield _piece(offset + i)
                return
            tokens = await self._decode(request, cancel)
            if tokens:
                first = started + cost + interval
            _piece(offset + tokens)  # grow the cache once, not per piece
            for piece in _PIECES[offset : offset + tokens]:
                yield piece
        finally:
            stopped = tokens < request.max_tokens
            if stopped:
                self._stopped(request, cancel, tokens)
            self._report(request, ready, cost, tokens, first, stopped)

    async def _decode(self, request: GenerationRequest, cancel: CancelToken) -> int:
        """Spend the decode in one or two timers; the tokens done by its end or
        by the token boundary after a cancel."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        interval = self.token_interval
        if not await cancel.wait(request.max_tokens * interval):
            return request.max_tokens
        # Cancelled mid-decode: finish the token in progress (the token boundary).
        tokens = min(request.max_tokens, math.floor((loop.time() - start) / interval + 1e-9) + 1)
        await asyncio.sleep(max(0.0, start + tokens * interval - loop.time()))
        return tokens

    async def complete(self, request: GenerationRequest, cancel: CancelToken) -> SimulatedOutcome:
        """Spend what ``generate`` would, in at most three timers; return counts."""
        self._check_request(request)
        loop = asyncio.get_running_loop()
        ready, prefill = self._ready(request)
        if await cancel.wait(prefill):
            return SimulatedOutcome(0, None, prefill, stopped=True)
        if ready == "restore":
            self.snapshots.take(_state_key(request))
        decode_start = loop.time()
        tokens = await self._decode(request, cancel)
        stopped = tokens < request.max_tokens
        if stopped:
            self._stopped(request, cancel, tokens)
        first = decode_start + self.token_interval
        self._report(request, ready, prefill, tokens, first, stopped)
        return SimulatedOutcome(tokens, first, prefill, stopped=stopped)


_PIECES: list[str] = []


def _piece(n: int) -> str:
    """The simulated text of token ``n``: "w<n> " (made once, reused: the
    simulator produces millions)."""
    pieces = _PIECES
    while len(pieces) <= n:
        pieces.append(f"w{len(pieces)} ")
    return pieces[n]


def _resumed_tokens(request: GenerationRequest) -> int:
    # Simulated pieces are "w<n> ": one space per token already produced.
    return request.resume_text.count(" ")


def _state_key(request: GenerationRequest, context: str | None = None) -> tuple[str, str, str]:
    """A sequence's identity: model, prompt, and the output it holds so far."""
    prompt = request.prompt if request.prompt is not None else repr(request.messages)
    return request.model_id, prompt, request.resume_text if context is None else context
