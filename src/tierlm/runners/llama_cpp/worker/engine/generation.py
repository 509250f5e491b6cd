"""One running generation of the decode engine: its tokens to evaluate, its
sampler, its output (it runs in one KV slot of the context, ``kv_slot``).

docs/design.md §1.6. Per generation: its own sampler chain
(grammar, ``logit_bias``, seed, temperature... ``sampling.py``), log-probabilities,
stop strings, the text held back for them, one piece per token, its cancel
and its run-ahead bound (its slot of the control block). ``batch.py`` decides
what each step evaluates; this only turns a sampled token into a piece.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from tierlm.runners.llama_cpp.wire.messages import GenerationStats, Piece
from tierlm.runners.llama_cpp.worker.engine.pieces import RUN_AHEAD, Pieces
from tierlm.runners.llama_cpp.worker.logprobs import Logprobs
from tierlm.runners.llama_cpp.worker.snapshots import TokenLog

if TYPE_CHECKING:
    from collections.abc import Callable

    from tierlm.runners.cancellation import CancelReason
    from tierlm.runners.llama_cpp.wire.control import ControlBlock
    from tierlm.runners.llama_cpp.wire.messages import Ended, Generate
    from tierlm.runners.llama_cpp.worker.snapshots import Plan

__all__ = ["Generation"]


class Generation:
    """A generation running in the batch, in KV slot ``kv_slot``."""

    def __init__(
        self, command: Generate, plan: Plan, kv_slot: int, reused: int, sampler: Any, llm: Any
    ) -> None:
        self.command = command
        self.request = command.request
        self.plan = plan
        self.kv_slot = kv_slot
        """Its KV slot (``kv_slots.py``), the worker's choice; its words in the
        control block are the runner's slot, ``command.slot``."""
        self.sampler = sampler
        """Its own chain (``sampling.build_sampler``): kept alive as long as it runs."""
        self.pending: list[int] = plan.tokens[reused:]
        """Tokens to evaluate before the next sample: the prompt's rest (in
        chunks), then each sampled token."""
        self.n_past = reused
        """Tokens of its KV slot in the KV cache (its next position)."""
        self.stats = GenerationStats(
            prompt_tokens=len(plan.tokens),
            evaluated_tokens=len(plan.tokens) - reused,
            restored_tokens=plan.restored,
            resumed_from=plan.resumed_from,
            restore_seconds=plan.kv_seconds,
        )
        self.journal = TokenLog()
        self.logprobs = Logprobs.of(self.request, llm)
        self._llm = llm
        self._pieces = Pieces(llm, self.request.stop, self.journal)
        self.started = time.perf_counter()
        self.first_at: float | None = None

    @property
    def prefilling(self) -> bool:
        """Still evaluating its prompt (no token sampled yet)."""
        return self.first_at is None

    def stop_reason(self, control: ControlBlock) -> CancelReason | None:
        """Why the runner wants it stopped now, if it does (a yield waits for
        the first token: docs/design.md §4.6)."""
        reason = control.stop_reason(self.command.call_id, self.command.slot)
        return reason if reason is not None and reason.stops(self.stats.tokens) else None

    def may_step(self, control: ControlBlock) -> bool:
        """Within its run-ahead bound: its reader has taken all but < RUN_AHEAD
        of its pieces (``pieces.RUN_AHEAD``). A generation ahead of its reader
        sits out a step instead of holding up the others."""
        consumed = control.consumed(self.command.call_id, self.command.slot)
        return self.prefilling or self.stats.tokens - consumed < RUN_AHEAD

    def take(self, token: int, index: int, send: Callable[[Piece], None]) -> Ended | None:
        """A token sampled at the batch's row ``index``: send its piece; how the
        generation ended if this ended it, else None (``token`` is evaluated
        at the next step)."""
        import llama_cpp

        if self.first_at is None:
            self.first_at = time.perf_counter()
            self.stats.prefill_seconds = self.first_at - self.started
        llm = self._llm
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
            return "eos"
        scores = self.logprobs.of_token(token, index) if self.logprobs is not None else None
        last = self.stats.tokens == self.request.max_tokens - 1
        piece, stopped = self._pieces.of(token, last=last)
        self._send(piece, scores, send)
        if stopped:
            return "stop"
        if last:
            return "max_tokens"
        self.pending = [token]
        return None

    def _send(self, text: str, scores: Any, send: Callable[[Piece], None]) -> None:
        self.stats.tokens += 1
        send(Piece(self.command.call_id, text, scores))

    def finish(self, ended: Ended, send: Callable[[Piece], None]) -> GenerationStats:
        """Its stats, once it has ended; text held back for a stop string that
        never came goes out with an end token (after a cancel it is dropped,
        so a resume regenerates it: nothing is duplicated, ``Pieces.release``)."""
        held = self._pieces.release() if ended in ("eos", "context_full") else ""
        if held:
            send(Piece(self.command.call_id, held))
            self.stats.tokens += 1
        self.stats.ended = ended
        if self.first_at is not None:
            self.stats.decode_seconds = time.perf_counter() - self.first_at
        else:
            self.stats.prefill_seconds = time.perf_counter() - self.started
        return self.stats
