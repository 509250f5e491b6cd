"""The decode engine: every running generation decodes in ONE ``llama_batch`` per step.

docs/design.md §1.6. A runner with ``slots`` = k runs
up to k generations at once, k = 1 included (a batch of one: llama-server's
one slot loop for any ``-np``); in the worker each holds a KV slot of the
context (``kv_slots.py``: a llama.cpp sequence id, ``n_seq_max`` = k, a KV
stream each) and a ``Generation`` (its sampler, cancel, run-ahead:
``generation.py``). Each step:

1. generations whose runner asked them to stop end (a yield only once it has
   produced a token, docs/design.md §4.6);
2. one batch, as ``step_plan.plan_step`` plans it: the last sampled token of
   every running generation within its run-ahead bound, then at most
   ``PREFILL_CHUNK`` prompt tokens of the generations still evaluating their
   prompt, a person's first (chunked prefill: a long prompt delays the others
   by one chunk a step, never by all of it); with none decoding (always so
   with one slot), the whole ``n_batch``;
3. one ``llama_decode``; each generation with a row of logits samples its next
   token with its own chain and sends its piece.

Every step is abortable (``step_abort.py``): once every generation in it is
asked to stop (a yield excepted), llama.cpp gives up the decode between two
graph nodes and drops the ubatch it was computing from the KV cache, keeping
the ones it finished (the preemption's snapshot keeps them, docs/design.md
§4.9). So a person's chat that stops a full batch waits for no step in
flight, and a long prompt evaluation (a step of prompt chunks alone, always so
with one slot) is cut at once. A yield aborts nothing: it stops a generation
after its first token (docs/design.md §4.6).

KV reuse (``kv_slots.py``). A KV slot keeps the KV of what ran in it
last, and a new generation goes to the free slot sharing the longest prefix
with its tokens, so a generation paused by a yield or a preemption and
resumed evaluates one token, its last, and no prompt token again; what a
slot held before it is reused moves to the snapshot pool (``kv_pool.py``).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from tierlm.runners.errors import RunnerError
from tierlm.runners.llama_cpp.wire.messages import Failed, GenerationStats, Reply, Step
from tierlm.runners.llama_cpp.worker import snapshots
from tierlm.runners.llama_cpp.worker.engine.generation import Generation
from tierlm.runners.llama_cpp.worker.engine.kv_slots import KvSlots
from tierlm.runners.llama_cpp.worker.engine.step_abort import StepAbort
from tierlm.runners.llama_cpp.worker.engine.step_plan import SlotState, plan_step
from tierlm.runners.llama_cpp.worker.kv_pool import Snapshot
from tierlm.runners.llama_cpp.worker.sampling import build_sampler, resumed_tokens

if TYPE_CHECKING:
    from collections.abc import Callable

    from tierlm.runners.cancellation import CancelReason
    from tierlm.runners.llama_cpp.wire.control import ControlBlock
    from tierlm.runners.llama_cpp.wire.faults import FaultInjection, FaultPoint
    from tierlm.runners.llama_cpp.wire.messages import Ended, Event, Generate
    from tierlm.runners.llama_cpp.worker.kv_pool import KvPool
    from tierlm.runners.llama_cpp.worker.loader import LoadedModel

__all__ = ["PREFILL_CHUNK", "BatchEngine"]

logger = logging.getLogger("tierlm.runners.llama_cpp")

PREFILL_CHUNK = 64
"""Prompt tokens evaluated per step beside the running generations (chunked
prefill, docs/design.md §1.6). Small enough that a step with a chunk
costs a few plain decode steps on a small CPU, so running generations keep
streaming while a long background prompt is read; large enough that a
2 000-token prompt takes ~30 steps, not 2 000. With no generation decoding
(always so with one slot) a step reads a whole ``n_batch``: nothing waits on
it, and the abort bounds what a cancel waits for (module docstring)."""
_RUN_AHEAD_POLL = 0.001
_ABORTED = 2
"""``llama_decode``'s status when the abort callback stopped it (GGML_STATUS_ABORTED)."""


class BatchEngine:
    """The running generations of one loaded model, stepped by the decode thread."""

    def __init__(
        self,
        model: LoadedModel,
        slots: int,
        control: ControlBlock,
        send: Callable[[Event], None],
        pool: KvPool,
        fault: Callable[[FaultPoint], FaultInjection | None],
    ) -> None:
        import llama_cpp

        self.model = model
        self.control = control
        self._send = send
        self._pool = pool
        self._fault = fault
        llm = model.llm
        self._ctx = llm._ctx.ctx
        llm.n_tokens = 0
        self.n_ctx_seq = llama_cpp.llama_n_ctx_seq(self._ctx)
        self._n_batch = llama_cpp.llama_n_batch(self._ctx)
        self._chunk = PREFILL_CHUNK if slots > 1 else self._n_batch
        self._batch = llama_cpp.llama_batch_init(self._n_batch, 0, 1)
        self._abort = StepAbort(self._ctx, lambda gen: gen.stop_reason(control))
        self._kv_slots = KvSlots(self._ctx, model.key, slots, pool, lambda: fault("restore"))
        self._running: list[Generation] = []
        self._out: list[Any] | None = None
        """While a step runs: what it sends, sent as one ``Step`` at its end."""
        self.steps = 0
        self.evaluated = 0
        """Tokens fed to llama_decode since the load (tests count re-evaluation)."""

    @property
    def busy(self) -> bool:
        return bool(self._running)

    def drain(self) -> None:
        """Step until every running generation has ended."""
        while self._running:
            self.step()

    def close(self) -> None:
        import llama_cpp

        self._abort.close()
        llama_cpp.llama_batch_free(self._batch)

    # -- admission ----------------------------------------------------------------

    def admit(self, command: Generate) -> None:
        """Start ``command`` (a free KV slot exists: the runner runs at most
        ``slots`` generations). Raises what the generation fails with."""
        request = command.request
        if self.control.stop_reason(command.call_id, command.slot) is not None:
            self._send(Reply(command.call_id, GenerationStats(ended="cancelled")))
            return
        plan = snapshots.choose_tokens(self.model, request, self._pool)
        if len(plan.tokens) >= self.n_ctx_seq:
            raise RunnerError(
                f"model {request.model_id!r}: prompt of {len(plan.tokens)} tokens does not fit "
                f"the context of {self.n_ctx_seq} tokens",
                model_id=request.model_id,
            )
        llm = self.model.llm
        seed = int(request.extra.get("seed", llm._seed)) & 0xFFFFFFFF
        sampler = build_sampler(llm, request, resumed_tokens(llm, request, plan), seed)
        placing = time.perf_counter()
        kv_slot, reused = self._kv_slots.place(plan)
        plan.kv_seconds = time.perf_counter() - placing
        self._running.append(Generation(command, plan, kv_slot, reused, sampler, llm))

    # -- a step ---------------------------------------------------------------------

    def step(self) -> None:
        """One decode step of every running generation; a failure fails them all."""
        self._out = []
        try:
            self._step()
        except Exception as exc:
            logger.exception("the batched decode failed")
            self.fail_all(f"generation failed: {exc}")
        finally:
            out, self._out = self._out, None
            if out:
                self._send(Step(tuple(out)))

    def _emit(self, event: Any) -> None:
        if self._out is not None:
            self._out.append(event)
        else:
            self._send(event)

    def _step(self) -> None:
        import llama_cpp

        control = self.control
        for gen in list(self._running):
            reason = gen.stop_reason(control)
            if reason is not None:
                self._end(gen, "prefill_aborted" if gen.prefilling else "cancelled", reason)
        fault = self._fault("token") or self._fault("marked")
        batch, n = self._batch, 0
        fed: list[tuple[Generation, list[int], int]] = []  # (generation, tokens, logits row)
        # docs/design.md §4.7 (the step plan): decode rows in KV slot order,
        # then the prompt budget, a person's prompts first (step_plan.py).
        plan = plan_step(
            (
                SlotState(
                    slot=gen.kv_slot,
                    admitted=i,
                    person=gen.request.person,
                    pending=len(gen.pending) if gen.prefilling else 0,
                    may_step=not gen.prefilling and gen.may_step(control),
                    n_past=gen.n_past,
                )
                for i, gen in enumerate(self._running)
            ),
            n_batch=self._n_batch,
            chunk=self._chunk,
            n_ctx=self.n_ctx_seq,
        )
        by_slot = {gen.kv_slot: gen for gen in self._running}
        for slot in plan.context_full:
            self._end(by_slot[slot], "context_full")
        for slot in plan.decode:
            gen = by_slot[slot]
            if fault is not None and fault.due(gen.stats.tokens, gen.request):
                fault.fire()
            self._add(n, gen.pending[0], gen.n_past, gen.kv_slot, logits=True)
            fed.append((gen, gen.pending[:1], n))
            n += 1
        for slot, count in plan.prefill:
            gen = by_slot[slot]
            chunk = gen.pending[:count]
            last = len(chunk) == len(gen.pending)
            if fault is not None and last and fault.due(gen.stats.tokens, gen.request):
                fault.fire()
            for i, token in enumerate(chunk):
                self._add(
                    n, token, gen.n_past + i, gen.kv_slot, logits=last and i == len(chunk) - 1
                )
                n += 1
            fed.append((gen, chunk, n - 1 if last else -1))
        if n == 0:
            time.sleep(_RUN_AHEAD_POLL)  # every generation is ahead of its reader
            return
        batch.n_tokens = n
        reused = llama_cpp.llama_perf_context(self._ctx).n_reused
        status = self._abort.decode(batch, [gen for gen, _tokens, _row in fed])
        if status == _ABORTED:
            self._aborted(fed)
            return
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        one_pass = llama_cpp.llama_perf_context(self._ctx).n_reused > reused
        self.steps += 1
        self.evaluated += n
        for gen, tokens, row in fed:
            if not gen.prefilling:
                gen.stats.decode_steps += 1
                gen.stats.one_pass_steps += one_pass
            self._kv_slots[gen.kv_slot].tokens.extend(tokens)
            gen.n_past += len(tokens)
            del gen.pending[: len(tokens)]
            if row < 0:
                continue
            token = llama_cpp.llama_sampler_sample(gen.sampler.sampler, self._ctx, row)
            ended = gen.take(token, row, self._emit)
            if ended is not None:
                self._end(gen, ended)

    def _aborted(self, fed: list[tuple[Generation, list[int], int]]) -> None:
        """An aborted step: each generation keeps what llama.cpp kept of its
        tokens (the ubatches it finished; a decode row's token, not evaluated,
        stays pending as between two steps), and those asked to stop end
        (all of them, unless one was admitted to the step after the abort)."""
        import llama_cpp

        memory = llama_cpp.llama_get_memory(self._ctx)
        for gen, tokens, _row in fed:
            kept = llama_cpp.llama_memory_seq_pos_max(memory, gen.kv_slot) + 1 - gen.n_past
            kept = max(0, min(kept, len(tokens)))
            self._kv_slots[gen.kv_slot].tokens.extend(tokens[:kept])
            gen.n_past += kept
            del gen.pending[:kept]
            reason = gen.stop_reason(self.control)
            if reason is not None:
                self._end(gen, "prefill_aborted" if gen.prefilling else "cancelled", reason)

    def _add(self, i: int, token: int, pos: int, slot: int, *, logits: bool) -> None:
        batch = self._batch
        batch.token[i] = token
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = slot  # llama.cpp's seq_id: the KV slot
        batch.logits[i] = logits

    # -- the end of a generation ---------------------------------------------------

    def _end(self, gen: Generation, ended: Ended, reason: CancelReason | None = None) -> None:
        self._running.remove(gen)
        stats = gen.finish(ended, self._emit)
        source = gen.plan.source
        if source is not None:
            self._pool.remove(source)  # resumed: its old snapshot is out of date
        paused = None
        if reason is not None and reason.preempts:
            # docs/design.md §4.9: the KV stays in its slot;
            # the pool keeps its exact tokens (and its KV, once the slot is needed).
            plan, log = gen.plan, gen.journal
            segments = plan.carried + [
                (1, piece, clean) for piece, clean in zip(log.pieces, log.clean, strict=True)
            ]
            paused = Snapshot(
                self.model.key, "preempted", plan.tokens + log.tokens, plan.prompt_tokens,
                plan.prompt_text, segments,
            )  # fmt: skip
            self._pool.add(paused)
        self._kv_slots.release(gen.kv_slot, self.steps, paused, forget=ended == "context_full")
        if paused is not None:
            saving = time.perf_counter()
            stats.saved_state_bytes = self._kv_slots.save_paused(gen.kv_slot)
            stats.save_seconds = time.perf_counter() - saving
        stats.pool = self._pool.stats()
        self._emit(Reply(gen.command.call_id, stats))

    def fail_all(self, message: str) -> None:
        """Fail every running generation and forget every KV slot's KV."""
        running, self._running = self._running, []
        for gen in running:
            model_id = gen.request.model_id
            self._emit(Failed(gen.command.call_id, f"model {model_id!r}: {message}", model_id))
        self._kv_slots.clear()

    def stats(self) -> dict[str, Any]:
        return {"steps": self.steps, "evaluated": self.evaluated}
