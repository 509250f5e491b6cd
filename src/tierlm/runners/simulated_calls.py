"""What a simulated generation reports: ``SimulatedCall`` (each call, to
``SimulatedRunner.on_call``), ``SimulatedOutcome`` (``complete``'s counts),
and how a call's prompt gets ready (docs/design.md §8.2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tierlm.runners.requests import GenerationRequest
from tierlm.runners.simulated_kv import SequenceKey

__all__ = [
    "PIECES",
    "PromptReady",
    "Ready",
    "ResumeCapability",
    "SimulatedCall",
    "SimulatedOutcome",
    "context_tokens",
    "piece",
    "resumed_tokens",
    "state_key",
]

ResumeCapability = Literal["re-evaluate", "restore"]
PromptReady = Literal["fresh", "re-evaluate", "restore"]


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
    """How the prompt was made ready: evaluated fresh, evaluated again (all or
    part of it had been evaluated before), or restored from a KV snapshot."""
    prompt_seconds: float
    """Device time spent making it ready (less than its cost if cut short)."""
    tokens: int
    first_token_at: float | None
    stopped: bool
    """Stopped by its cancel token before ``max_tokens``."""
    resume_seconds: float = 0.0
    """Of ``prompt_seconds``, what redid or restored the work of an earlier
    run: the restore, and evaluating again what had been evaluated and kept
    (docs/design.md §8.2)."""
    kept_seconds: float = 0.0
    """Of a prompt evaluation cut before its first token, the first-time
    evaluation a KV snapshot keeps (its finished batches): not redone."""


@dataclass(frozen=True, slots=True)
class Ready:
    """How a call's prompt gets ready, and what of it is already done."""

    how: PromptReady
    cost: float
    """Device seconds to make it ready: a restore, then the evaluation."""
    restore: float
    """Of ``cost``, the restore (first)."""
    held: int
    """Context tokens already evaluated (restored): the evaluation starts here."""
    redo: int
    """The evaluation redoes context tokens ``held`` up to here: earlier runs
    had evaluated and kept them (their state was lost)."""


PIECES: list[str] = []
"""Token n's simulated text, made once (``piece``)."""


def piece(n: int) -> str:
    """The simulated text of token ``n``: "w<n> " (made once, reused: the
    simulator produces millions)."""
    pieces = PIECES
    while len(pieces) <= n:
        pieces.append(f"w{len(pieces)} ")
    return pieces[n]


def resumed_tokens(request: GenerationRequest) -> int:
    # Simulated pieces are "w<n> ": one space per token already produced.
    return request.resume_text.count(" ")


def context_tokens(request: GenerationRequest) -> int:
    """Prompt + partial output, in tokens."""
    tokens = request.approx_prompt_tokens()
    if request.prompt_tokens is not None:
        tokens += resumed_tokens(request)
    return tokens


def state_key(request: GenerationRequest, context: str | None = None) -> SequenceKey:
    """A sequence's identity: model, prompt, and the output it holds so far."""
    prompt = request.prompt if request.prompt is not None else repr(request.messages)
    return request.model_id, prompt, request.resume_text if context is None else context
