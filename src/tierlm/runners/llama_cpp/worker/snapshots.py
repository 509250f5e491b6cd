"""Which tokens a generation runs from, and where their KV state comes from.

docs/design.md §4 zero-loss preemption. The text a model continues is the
prompt (or rendered chat) + ``resume_text``. Before a generation:

1. Its tokens. A resume whose prompt and partial output match a preempted
   snapshot takes that run's EXACT tokens (re-tokenizing the text can split
   it differently, and then a greedy continuation differs); otherwise the
   text is tokenized.
2. Their KV state. llama-cpp-python's ``generate`` reuses the context's KV
   for the prefix it shares with the previous generation. If a snapshot in
   the pool shares a longer prefix (the preempted run itself, or a long
   system prompt seen before), its state is restored instead, and only the
   rest is evaluated. A long context about to be overwritten is kept in the
   pool first (a "prefix" snapshot).

After a preempted generation, ``save_preempted`` stores its state and tokens.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from tierlm.runners.llama_cpp.worker.kv_pool import (
    KvPool,
    Snapshot,
    common_prefix,
    restore_state,
    save_state,
)

if TYPE_CHECKING:
    from tierlm.runners.llama_cpp.wire.faults import FaultInjection
    from tierlm.runners.llama_cpp.worker.loader import LoadedModel
    from tierlm.runners.requests import GenerationRequest

__all__ = [
    "MIN_GAIN",
    "MIN_STASH",
    "Plan",
    "TokenLog",
    "choose_tokens",
    "plan",
    "save_preempted",
]

logger = logging.getLogger("tierlm.runners.llama_cpp")

MIN_GAIN = 32
"""Restore a snapshot only if it spares at least this many tokens of prompt
evaluation over the context's own prefix (a restore copies the whole state)."""
MIN_STASH = 256
"""Keep the context in the pool before overwriting it when at least this many
of its tokens would be lost: a system prompt worth finding again."""


@dataclass(slots=True)
class Plan:
    """The tokens to generate from, and what the KV cache already holds of them."""

    tokens: list[int]
    prompt_tokens: int
    """Tokens of the prompt alone (before any resume text)."""
    prompt_text: str
    reused: int = 0
    """Leading tokens whose KV is in the context (not evaluated again)."""
    restored: int = 0
    """Of those, tokens restored from a snapshot."""
    resumed_from: Literal["", "snapshot", "tokens", "text"] = ""
    source: Snapshot | None = None
    """The preempted snapshot this resume continues."""
    carried: list[tuple[int, str, bool]] = field(default_factory=list)
    """The resume text's output segments (kept in the next snapshot)."""
    kv_seconds: float = 0.0
    """Spent keeping the context's state and restoring a snapshot's."""


def _tokens(model: LoadedModel, request: GenerationRequest, pool: KvPool | None) -> Plan:
    resume = request.resume_text
    text, prompt = model.text.prompt_tokens(request)
    found = pool.find_resume(model.key, text, resume) if pool is not None and resume else None
    if found is not None:
        source, n = found
        carried: list[tuple[int, str, bool]] = []
        total = source.n_prompt
        for segment in source.segments:
            if total >= n:
                break
            carried.append(segment)
            total += segment[0]
        return Plan(
            source.tokens[:n], source.n_prompt, text, resumed_from="tokens", source=source,
            carried=carried,
        )  # fmt: skip
    if not resume:
        return Plan(prompt, len(prompt), text)
    _, tokens = model.text.prompt_tokens(request, resume)
    segment = (len(tokens) - len(prompt), resume, True)
    return Plan(tokens, len(prompt), text, resumed_from="text", carried=[segment])


def choose_tokens(model: LoadedModel, request: GenerationRequest, pool: KvPool | None) -> Plan:
    """Step 1 alone (the batched decode finds their KV itself: ``batch.py``)."""
    return _tokens(model, request, pool)


def _stash(model: LoadedModel, pool: KvPool, context: list[int]) -> None:
    """Keep the context's state before it is overwritten (a "prefix" snapshot)."""
    if pool.limit_bytes == 0 or pool.covers(model.key, context):
        return
    state = save_state(model.llm)
    pool.add(
        Snapshot(model.key, "prefix", context, len(context), state=state, n_state=len(context))
    )
    _log_saved(pool, "prefix", model.model_id, len(context), len(state))


def plan(
    model: LoadedModel,
    request: GenerationRequest,
    pool: KvPool | None,
    fault: FaultInjection | None = None,
) -> Plan:
    """Choose the tokens and put as much of their KV state in the context as
    the context and the pool allow."""
    chosen = _tokens(model, request, pool)
    started = time.perf_counter()
    tokens = chosen.tokens
    llm = model.llm
    context: list[int] = llm.input_ids[: llm.n_tokens].tolist()
    in_context = common_prefix(context, tokens)
    if pool is not None:
        best = pool.best_prefix(model.key, tokens)
        lost = len(context) - in_context
        if best is not None and best[1] >= in_context + MIN_GAIN:
            snapshot, n = best
            if lost >= MIN_STASH:
                _stash(model, pool, context)
            if fault is not None and fault.at == "restore":
                fault.fire()
            if restore_state(llm, snapshot):
                pool.touch(snapshot)
                pool.note_restored()
                in_context = chosen.restored = n
                if snapshot is chosen.source:
                    chosen.resumed_from = "snapshot"
            else:
                logger.warning(
                    "model %r: restoring a KV snapshot of %d tokens failed; evaluating the "
                    "prompt again",
                    model.model_id,
                    snapshot.n_state,
                )
                pool.remove(snapshot)
                in_context = 0
        elif lost >= MIN_STASH:
            _stash(model, pool, context)
        chosen.kv_seconds = time.perf_counter() - started
    # All of them cached: generate() evaluates the last one again, for its logits.
    chosen.reused = in_context - 1 if in_context == len(tokens) and in_context > 0 else in_context
    chosen.restored = min(chosen.restored, chosen.reused)
    return chosen


class TokenLog:
    """The tokens a generation produced and what it sent for each: the exact
    tokens a resume continues from (save_preempted, below)."""

    __slots__ = ("clean", "pieces", "tokens")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.pieces: list[str] = []
        self.clean: list[bool] = []
        """After token i, was everything it decoded sent? (False while text is
        held back for a possible stop string or an unfinished UTF-8 character.)"""


def save_preempted(model: LoadedModel, pool: KvPool, chosen: Plan, journal: TokenLog) -> int:
    """Keep a preempted generation's exact tokens and its KV state; returns the
    state's size in bytes (0 if the pool keeps none)."""
    llm = model.llm
    tokens = chosen.tokens + journal.tokens
    segments = chosen.carried + [
        (1, piece, clean) for piece, clean in zip(journal.pieces, journal.clean, strict=True)
    ]
    n_state = llm.n_tokens
    state = None
    # The context holds what was evaluated: the prompt (or the batches of it that
    # completed before an abort), then all output tokens but the last sampled.
    if (
        pool.limit_bytes > 0
        and n_state > 0
        and llm.input_ids[:n_state].tolist() == tokens[:n_state]
    ):
        state = save_state(llm)
    else:
        n_state = 0
    snapshot = Snapshot(
        model.key, "preempted", tokens, chosen.prompt_tokens, chosen.prompt_text, segments,
        state, n_state,
    )  # fmt: skip
    if chosen.source is not None:
        pool.remove(chosen.source)  # this one continues it
    pool.add(snapshot)
    size = len(snapshot.state) if snapshot.state is not None else 0
    _log_saved(pool, "preempted", model.model_id, snapshot.n_state, size)
    return size


def _log_saved(pool: KvPool, kind: str, model_id: str, tokens: int, size: int) -> None:
    stats = pool.stats()
    logger.info(
        "KV snapshot (%s) of model %r: %d tokens, %.1f MiB; pool: %d states, %.1f of %.0f MiB",
        kind,
        model_id,
        tokens,
        size / 2**20,
        stats.states,
        stats.state_bytes / 2**20,
        stats.limit_bytes / 2**20,
    )
