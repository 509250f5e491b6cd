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

Both stop at the next token boundary once cancelled. A prompt evaluation is
aborted at once by a cancel that ``aborts_prompt`` (a person waiting, the
caller, shutdown), as llama.cpp's abort callback allows; a ``YIELD`` lets it
finish and stops after its first token (docs/design.md §4.6); with
``yields_at_chunks``, on one slot under ``restore``, it stops at the end of
the ``n_batch`` chunk under way, which the snapshot keeps (§4.9).

**Resuming** (docs/design.md §4.9). A request
with ``resume_text`` continues a preempted generation. What that costs depends
on what the runner can do, ``resume``:

- ``"re-evaluate"``: the prompt and the partial output are evaluated again,
  at the prefill speed (what llama.cpp without state save does); a prompt
  evaluation cut short is lost;
- ``"restore"``: a generation stopped by a preemption leaves a KV snapshot of
  its sequence in a bounded pool (``SimulatedKvPool``); resuming it costs
  ``restore_seconds`` instead of the evaluation. A prompt evaluation a
  preemption cuts short keeps the batches of ``n_batch`` tokens it finished
  (llama.cpp drops only the aborted batch), and the resume evaluates the
  rest; with ``slots`` > 1 it keeps all it evaluated (the batched engine
  reads a prompt a chunk a step and stops a sequence between steps). A
  snapshot whose state was evicted falls back to re-evaluation, as the real
  runner does.

**Slots** (docs/design.md §2.3). With ``slots`` > 1 up to that many
generations run at once, as one batch: a step with n sequences takes
``token_interval * (1 + batch_cost * (n - 1))`` and gives each one token
(a prompt evaluation is slowed alike). ``batch_cost`` 0 is a flat curve (a GPU
far from its limit); ``LLAMA_CPP_CPU_BATCH_COST`` is the curve measured on
these machines. ``step_cost`` tells the shell the curve (its chat latency
guard reads it, docs/design.md §4.7).

**Endings** (docs/design.md §2.7). ``generate`` returns a ``Stream`` that
says how it ended: its ``max_tokens`` (``LENGTH``), a cancel, a full context
(``contexts``: a model's context in tokens, prompt and resume text included)
or the model's end of answer (``answer_tokens``: each answer ends after that
many tokens, ``STOP``; by default it writes until ``max_tokens``).

Every call is reported to ``on_call`` (if set) as a ``SimulatedCall``: how its
prompt was made ready (fresh, re-evaluated, restored), at what cost, what of
that cost redid earlier work, and the tokens it produced. The simulator's
waste metric reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Mapping
from dataclasses import replace

from tierlm.runners.cancellation import CallToken, CancelReason, CancelToken
from tierlm.runners.endings import Ending, Finish, Stream
from tierlm.runners.errors import RunnerError, unknown_model
from tierlm.runners.protocol import Abilities
from tierlm.runners.requests import GenerationRequest
from tierlm.runners.simulated_calls import (
    PIECES,
    PromptReady,
    Ready,
    ResumeCapability,
    SimulatedCall,
    SimulatedOutcome,
    context_tokens,
    piece,
    resumed_tokens,
    state_key,
)
from tierlm.runners.simulated_defaults import (
    DEFAULT_KV_BYTES_PER_TOKEN,
    DEFAULT_N_BATCH,
    DEFAULT_RESTORE_SECONDS,
    DEFAULT_SNAPSHOT_POOL_BYTES,
    DEFAULT_SWAP_SECONDS,
    DEFAULT_TOKEN_INTERVAL,
    LLAMA_CPP_CPU_BATCH_COST,
)
from tierlm.runners.simulated_kv import SimulatedKvPool

__all__ = [
    "DEFAULT_KV_BYTES_PER_TOKEN",
    "DEFAULT_N_BATCH",
    "DEFAULT_RESTORE_SECONDS",
    "DEFAULT_SNAPSHOT_POOL_BYTES",
    "DEFAULT_SWAP_SECONDS",
    "DEFAULT_TOKEN_INTERVAL",
    "LLAMA_CPP_CPU_BATCH_COST",
    "PromptReady",
    "ResumeCapability",
    "SimulatedCall",
    "SimulatedOutcome",
    "SimulatedRunner",
]


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
        n_batch: int = DEFAULT_N_BATCH,
        per_token: bool = True,
        slots: int = 1,
        batch_cost: float = 0.0,
        contexts: Mapping[str, int] | None = None,
        answer_tokens: int | None = None,
        yields_at_chunks: bool = False,
    ) -> None:
        for name, value in (
            ("token_interval", token_interval),
            ("prefill_per_token", prefill_per_token),
            ("swap_seconds", swap_seconds),
            ("restore_seconds", restore_seconds),
            ("snapshot_pool_bytes", snapshot_pool_bytes),
            ("kv_bytes_per_token", kv_bytes_per_token),
            ("batch_cost", batch_cost),
        ):
            if not isinstance(value, int | float) or value < 0 or math.isnan(value):
                raise ValueError(f"{name}: must be a number >= 0, got {value!r}")
        if token_interval == 0:
            raise ValueError("token_interval: must be > 0")
        if not isinstance(n_batch, int) or isinstance(n_batch, bool) or n_batch < 1:
            raise ValueError(f"n_batch: must be an int >= 1, got {n_batch!r}")
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
            raise ValueError(f"slots: must be an int >= 1, got {slots!r}")
        if resume not in ("re-evaluate", "restore"):
            raise ValueError(f"resume: must be 're-evaluate' or 'restore', got {resume!r}")
        self.token_interval = float(token_interval)
        self.prefill_per_token = float(prefill_per_token)
        self.swap_seconds = float(swap_seconds)
        self.resume: ResumeCapability = resume
        self.restore_seconds = float(restore_seconds)
        self.kv_bytes_per_token = int(kv_bytes_per_token)
        self.n_batch = n_batch
        self.snapshots = SimulatedKvPool(int(snapshot_pool_bytes), self.kv_bytes_per_token)
        self.per_token = per_token
        self.yields_at_chunks = yields_at_chunks
        """A yield stops a prompt evaluation at its chunk's end (``_chunk_end``)."""
        self.slots = slots
        self.batch_cost = float(batch_cost)
        self.active = 0
        """Generations running now: the batch's size."""
        self.contexts = dict(contexts or {})
        """Each model's context in tokens: a generation ends where it is full."""
        self.answer_tokens = answer_tokens
        """The model's answers end (its end of sequence) after this many
        tokens; None: each writes until its ``max_tokens``."""
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

    @property
    def restores_kv(self) -> bool:
        """A preempted generation resumes from its snapshot (``resume="restore"``)
        rather than re-evaluating (docs/design.md §4.6 (a slice worth its resume))."""
        return self.resume == "restore"

    @property
    def swap_estimate(self) -> float:
        """A swap's seconds, known before any (docs/design.md §4.8 (ski rental))."""
        return self.swap_seconds

    @property
    def step_cost(self) -> tuple[float, ...]:
        """A step's time with n sequences, relative to one (n = 1..slots)."""
        return tuple(1.0 + self.batch_cost * (n - 1) for n in range(1, self.slots + 1))

    @property
    def abilities(self) -> Abilities:
        return Abilities(
            self.slots, self.step_cost, self.swap_estimate, self.restores_kv, self.contexts
        )

    def _slowdown(self) -> float:
        """Each sequence's step time now, relative to running alone."""
        return 1.0 + self.batch_cost * (max(1, self.active) - 1)

    def _join(self, request: GenerationRequest) -> None:
        if self.active >= self.slots:
            raise RunnerError(
                f"model {request.model_id!r}: {self.active + 1} generations at once on "
                f"{self.slots} slot(s)",
                model_id=request.model_id,
            )
        self.active += 1

    def prefill_seconds(self, request: GenerationRequest) -> float:
        """Evaluating the prompt and any partial output (``resume_text``)."""
        return self.prefill_per_token * context_tokens(request)

    def _check_request(self, request: GenerationRequest) -> None:
        if request.model_id != self.loaded_model:
            raise RunnerError(
                f"model {request.model_id!r}: not loaded (loaded: {self.loaded_model!r})",
                model_id=request.model_id,
            )

    def _ready(self, request: GenerationRequest) -> Ready:
        """How this request's prompt gets ready, and what that costs."""
        context = context_tokens(request)
        per_token = self.prefill_per_token
        entry = self.snapshots.get(state_key(request)) if self.resume == "restore" else None
        if entry is not None and entry.state:
            held = min(entry.tokens, context)
            cost = self.restore_seconds + (context - held) * per_token
            redo = max(held, min(entry.done, context))
            return Ready("restore", cost, self.restore_seconds, held, redo)
        if entry is not None:
            redo = min(entry.done, context)  # its state was evicted
        else:
            # Without a snapshot, a resume evaluates again prompt + output,
            # which its earlier runs had evaluated.
            redo = context if request.resume_text else 0
        how: PromptReady = "re-evaluate" if redo else "fresh"
        return Ready(how, context * per_token, 0.0, 0, redo)

    def _prefill_done(self, request: GenerationRequest, ready: Ready) -> None:
        if ready.how != "fresh":
            self.snapshots.take(state_key(request))  # in the context again

    def _prefill_cut(
        self, request: GenerationRequest, cancel: CancelToken, ready: Ready, spent: float
    ) -> float:
        """A cancel cut the prompt evaluation after ``spent`` seconds: if it was
        a preemption, keep its finished batches (``restore`` only: llama.cpp
        drops the aborted batch); returns the seconds of first-time evaluation
        kept."""
        if self.resume != "restore" or self.prefill_per_token == 0:
            return 0.0
        if not cancel.reason or not cancel.reason.preempts:
            return 0.0  # the job ends: nobody resumes it (nor does the worker save it)
        evaluating = max(0.0, spent - ready.restore)
        done = math.floor(evaluating / self.prefill_per_token + 1e-9)
        unit = self.n_batch if self.slots == 1 else 1  # batched: stops between steps
        kept = ready.held + done // unit * unit
        if kept > 0:
            self.snapshots.save(state_key(request), kept)
        first_time = max(0, kept - max(ready.held, ready.redo))
        return first_time * self.prefill_per_token

    def _chunk_end(self, ready: Ready, elapsed: float) -> float | None:
        """Where a yield at ``elapsed`` seconds into making the prompt ready
        stops it on one slot: the end of the ``n_batch`` chunk under way (at
        least one chunk evaluated), if that comes before the evaluation's end
        and a KV snapshot keeps the chunks (docs/design.md §4.9); None: the
        evaluation finishes and the yield waits for the first token (§4.6)."""
        chunked = self.yields_at_chunks and self.slots == 1 and self.resume == "restore"
        if not chunked or self.prefill_per_token == 0:
            return None
        chunk = self.n_batch * self.prefill_per_token
        chunks = max(1, math.ceil((elapsed - ready.restore) / chunk - 1e-9))
        end = ready.restore + chunks * chunk
        return end if end < ready.cost - 1e-9 else None

    def _stopped(self, request: GenerationRequest, cancel: CancelToken, tokens: int) -> None:
        """A generation stopped early: keep its sequence's state if it was
        preempted (either kind: docs/design.md §4.9)."""
        if self.resume != "restore" or tokens == 0:
            return
        if cancel.reason not in (CancelReason.PREEMPTED, CancelReason.YIELD):
            return
        produced = "".join(piece(resumed_tokens(request) + i) for i in range(tokens))
        resumed = replace(request, resume_text=request.resume_text + produced)
        self.snapshots.save(state_key(resumed), context_tokens(resumed))

    def _report(
        self,
        request: GenerationRequest,
        ready: Ready,
        spent: float,
        tokens: int,
        first: float | None,
        stopped: bool,
        kept: float = 0.0,
    ) -> None:
        if self.on_call is not None:
            redo = ready.restore + (ready.redo - ready.held) * self.prefill_per_token
            resume = min(spent, redo)
            self.on_call(
                SimulatedCall(request, ready.how, spent, tokens, first, stopped, resume, kept)
            )

    async def _prefill(
        self, request: GenerationRequest, call: CallToken, ready: Ready
    ) -> tuple[float, float] | None:
        """Make the prompt ready; None once done, else (spent, kept) if a
        cancel that aborts prompts cut it (``call``: a yield lets it finish,
        or on one slot stops it at a chunk's end, ``_chunk_end``)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        if self.slots == 1:
            return await self._prefill_one(request, call, ready, started)
        # With slots, the evaluation follows the batch's size as it changes, a
        # step's time at a time (the guard may cut the batch around a person's
        # prompt: docs/design.md §4.7).
        remaining = ready.cost
        while remaining > 1e-12:
            piece = min(remaining, self.token_interval)
            if await call.wait(piece * self._slowdown()):
                spent = loop.time() - started
                return spent, self._prefill_cut(request, call.token, ready, spent)
            remaining -= piece
        self._prefill_done(request, ready)
        return None

    async def _prefill_one(
        self, request: GenerationRequest, call: CallToken, ready: Ready, started: float
    ) -> tuple[float, float] | None:
        """``_prefill`` on one slot: one timer, unless a yield comes while
        the chunks a snapshot keeps are evaluated: then the evaluation stops
        at the end of the chunk under way (docs/design.md §4.6, §4.9)."""
        loop = asyncio.get_running_loop()
        token = call.token
        if self._chunk_end(ready, 0.0) is None:
            # One chunk or none kept: only a cancel that aborts prompts cuts it.
            if ready.cost > 1e-12 and await call.wait(ready.cost):
                spent = loop.time() - started
                return spent, self._prefill_cut(request, token, ready, spent)
            self._prefill_done(request, ready)
            return None
        if not await token.wait(ready.cost):
            self._prefill_done(request, ready)
            return None
        # A yield evaluates to its chunk's end, or the evaluation's (the first
        # token stops it); a person's cancel cuts it at once.
        end = self._chunk_end(ready, loop.time() - started) or ready.cost
        if not call.cancelled:
            await call.wait(max(0.0, started + end - loop.time()))
        if call.cancelled or end < ready.cost:
            spent = loop.time() - started
            return spent, self._prefill_cut(request, token, ready, spent)
        self._prefill_done(request, ready)
        return None

    def generate(self, request: GenerationRequest, cancel: CancelToken) -> Stream:
        return Stream(self._generate(request, cancel))

    def _end(self, request: GenerationRequest) -> tuple[int, Finish]:
        """Where a generation ends by itself, and how: its ``max_tokens``, a
        full context, the model's end of answer (the first of them)."""
        ends = [(request.max_tokens, Finish.LENGTH)]
        if (context := self.contexts.get(request.model_id)) is not None:
            ends.append((max(0, context - context_tokens(request)), Finish.CONTEXT))
        if self.answer_tokens is not None:
            ends.append((max(0, self.answer_tokens - resumed_tokens(request)), Finish.STOP))
        return min(ends, key=lambda end: end[0])

    async def _generate(
        self, request: GenerationRequest, cancel: CancelToken
    ) -> AsyncIterator[str | Ending]:
        self._check_request(request)
        ready = self._ready(request)
        limit, finish = self._end(request)
        tokens = 0
        # A yield stops it once it has produced a token; a call that begins
        # cancelled starts nothing (CallToken).
        call = cancel.for_call(lambda: tokens)
        if cancel.cancelled:
            self._report(request, ready, 0.0, 0, None, stopped=True)
            yield Ending(Finish.CANCELLED, 0, context_tokens(request))
            return
        self._join(request)
        try:
            cut = await self._prefill(request, call, ready)
        except BaseException:
            self.active -= 1
            raise
        if cut is not None:
            self.active -= 1
            self._report(request, ready, cut[0], 0, None, stopped=True, kept=cut[1])
            yield Ending(Finish.CANCELLED, 0, context_tokens(request))
            return
        offset = resumed_tokens(request)
        first: float | None = None
        try:
            async with contextlib.aclosing(self._decode(limit, call, self.per_token)) as runs:
                async for done, at in runs:
                    first = at if first is None else first
                    tokens += done
                    piece(offset + tokens)  # grow the cache once, not per piece
                    for text in PIECES[offset + tokens - done : offset + tokens]:
                        yield text
            finish = finish if tokens >= limit else Finish.CANCELLED
            yield Ending(finish, tokens, context_tokens(request))
        finally:
            self.active -= 1
            stopped = tokens < limit
            if stopped:
                self._stopped(request, cancel, tokens)
            self._report(request, ready, ready.cost, tokens, first, stopped)

    async def _decode(
        self, limit: int, call: CallToken, each: bool
    ) -> AsyncGenerator[tuple[int, float], None]:
        """The decode, for any slot count: yields each run of tokens done and
        its first token's time, until ``limit`` tokens or the token boundary
        after ``call`` is cancelled. A step a timer when ``each`` token is
        watched or the batch's size may change a step's time (slots > 1,
        docs/design.md §2.3); else the rest in one timer, which a cancel cuts
        after the token in progress (at least one: the prompt is evaluated, so
        a yield too waits for the first token)."""
        loop = asyncio.get_running_loop()
        done = 0
        while done < limit and not call.cancelled:
            start = loop.time()
            step = self.token_interval * self._slowdown()
            if each or self.slots > 1:
                await asyncio.sleep(step)
                tokens, at = 1, loop.time()
            else:
                tokens, at = limit - done, start + step
                if await call.token.wait(tokens * step):
                    elapsed = math.floor((loop.time() - start) / step + 1e-9) + 1
                    tokens = min(tokens, elapsed)
                    await asyncio.sleep(max(0.0, start + tokens * step - loop.time()))
            done += tokens
            yield tokens, at

    async def complete(self, request: GenerationRequest, cancel: CancelToken) -> SimulatedOutcome:
        """Spend what ``generate`` would, in at most three timers; return counts."""
        self._check_request(request)
        loop = asyncio.get_running_loop()
        ready = self._ready(request)
        if cancel.cancelled:  # cancelled before it began: nothing starts
            self._report(request, ready, 0.0, 0, None, stopped=True)
            return SimulatedOutcome(0, None, 0.0, stopped=True)
        tokens = 0
        call = cancel.for_call(lambda: tokens)
        self._join(request)
        try:
            cut = await self._prefill(request, call, ready)
            if cut is not None:
                self._report(request, ready, cut[0], 0, None, stopped=True, kept=cut[1])
                return SimulatedOutcome(0, None, cut[0], stopped=True)
            decode_start = loop.time()
            limit, _ = self._end(request)
            async with contextlib.aclosing(self._decode(limit, call, each=False)) as runs:
                async for done, _ in runs:
                    tokens += done
        finally:
            self.active -= 1
        stopped = tokens < limit
        if stopped:
            self._stopped(request, cancel, tokens)
        first = decode_start + self.token_interval
        self._report(request, ready, ready.cost, tokens, first, stopped)
        return SimulatedOutcome(tokens, first, ready.cost, stopped=stopped)
