"""One generation on a loaded model: evaluate the prompt, sample token by token.

Runs on the worker's one decode thread (docs/design.md §1 runners). Stopping:

- between tokens, the loop reads the control block before every decode, so a
  generation stops within one token of a cancel;
- during a prompt evaluation (one ``llama_decode`` per ``n_batch`` tokens,
  seconds for a long prompt on a small device), llama.cpp's abort callback
  (``llama_set_abort_callback``) polls the same word between graph nodes and
  aborts the decode; llama.cpp then removes the aborted batch from the KV cache
  (the batches it finished stay, and a preemption's snapshot keeps them) and
  the context keeps working. The callback is installed only while a prompt
  is evaluated: it costs a Python call per graph node, and a single-token decode
  is short enough to wait for.

A yield (``CancelReason.YIELD``) aborts nothing: the generation finishes its
prompt evaluation, produces its first token and stops at the next boundary
(docs/design.md §4 preemption kinds).

Where the tokens come from (prompt + resume text, a KV snapshot, the cached
prefix) is ``snapshots.py``'s job; this module only runs them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tierlm.runners.llama_cpp.wire.messages import GenerationStats, Piece
from tierlm.runners.llama_cpp.worker.engine.pieces import RUN_AHEAD, Pieces
from tierlm.runners.llama_cpp.worker.logprobs import Logprobs
from tierlm.runners.llama_cpp.worker.sampling import build_sampler, resumed_tokens

if TYPE_CHECKING:
    from collections.abc import Callable

    from tierlm.runners.llama_cpp.wire.control import ControlBlock
    from tierlm.runners.llama_cpp.wire.faults import FaultInjection
    from tierlm.runners.llama_cpp.wire.messages import TokenLogprobs
    from tierlm.runners.llama_cpp.worker.loader import LoadedModel
    from tierlm.runners.llama_cpp.worker.snapshots import Plan, TokenLog
    from tierlm.runners.requests import GenerationRequest

__all__ = ["decode"]

# How often a loop that is RUN_AHEAD tokens ahead checks its reader again.
_RUN_AHEAD_POLL = 0.001


def decode(
    model: LoadedModel,
    request: GenerationRequest,
    plan: Plan,
    *,
    gen_id: int,
    control: ControlBlock,
    send: Callable[[Piece], None],
    stats: GenerationStats,
    journal: TokenLog,
    fault: FaultInjection | None = None,
) -> None:
    """Generate from ``plan.tokens`` (already partly in the KV cache, as the
    plan arranged), sending one ``Piece`` per token; fill ``stats``."""
    import llama_cpp

    llm = model.llm
    started = time.perf_counter()

    def stop() -> bool:
        reason = control.stop_reason(gen_id)
        return reason is not None and reason.stops(stats.tokens)

    def emit(text: str, scores: TokenLogprobs | None = None) -> bool:
        index = stats.tokens
        while index - control.consumed(gen_id) >= RUN_AHEAD:  # bounded run-ahead
            if stop():
                return False
            time.sleep(_RUN_AHEAD_POLL)
        stats.tokens += 1
        send(Piece(gen_id, text, scores))
        return True

    # llama.cpp's seeds are 32-bit; OpenAI's are any integer.
    seed = int(request.extra.get("seed", llm._seed)) & 0xFFFFFFFF
    sampler = build_sampler(llm, request, resumed_tokens(llm, request, plan), seed)
    logprobs = Logprobs.of(request, llm)
    vocab = llm._model.vocab
    pieces = Pieces(llm, request.stop, journal)
    ctx = llm._ctx.ctx
    null_cb = llama_cpp.ggml_abort_callback()
    n_ctx = llm.n_ctx()

    # Llama.generate keeps its KV-cache reuse; the sampler chain is ours (sampling.py).
    llm._init_sampler = lambda **_: sampler
    generator = llm.generate(plan.tokens, reset=True)
    first_at: float | None = None
    try:
        for i in range(request.max_tokens):
            if stop():
                stats.ended = "cancelled"
                break
            # Only once the prompt is in: before that, n_tokens is what the last
            # generation left (a full context, after one that filled it), and
            # the generator's reset=True has not yet cut it to the shared prefix.
            # (The worker refuses a prompt that does not fit.)
            if first_at is not None and llm.n_tokens >= n_ctx:
                stats.ended = "context_full"
                break
            if fault is not None and fault.due(i, request):
                fault.fire()
            if first_at is None:
                # The prompt evaluation: abortable between graph nodes.
                model.abort_check = stop
                llama_cpp.llama_set_abort_callback(ctx, model.abort_cb, None)
                try:
                    token = next(generator)
                except RuntimeError as exc:
                    if stop() and "returned 2" in str(exc):  # GGML_STATUS_ABORTED
                        stats.ended = "prefill_aborted"
                        stats.prefill_seconds = time.perf_counter() - started
                        # n_tokens counts only the batches that completed; the
                        # next eval drops the rest from the KV cache.
                        return
                    raise
                finally:
                    llama_cpp.llama_set_abort_callback(ctx, null_cb, None)
                    model.abort_check = None
                first_at = time.perf_counter()
                stats.prefill_seconds = first_at - started
            else:
                token = next(generator)
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                stats.ended = "eos"
                break
            scores = logprobs.of_token(token) if logprobs is not None else None
            piece, stopped = pieces.of(token, last=i == request.max_tokens - 1)
            if stopped:
                emit(piece, scores)
                stats.ended = "stop"
                break
            if not emit(piece, scores):
                stats.ended = "cancelled"
                break
        else:
            stats.ended = "max_tokens"
        if stats.ended in ("eos", "context_full"):
            held = pieces.release()  # the end token's piece
            if held:
                emit(held)
    finally:
        generator.close()
        del llm._init_sampler
        if first_at is not None:
            stats.decode_seconds = time.perf_counter() - first_at
