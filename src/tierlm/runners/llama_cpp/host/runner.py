"""``LlamaCppRunner``: GGUF models through llama-cpp-python, in a worker process.

The direct analogue of the seed's on-device runner: one model (one GGUF, one
context) at a time. The model lives in a worker process (docs/design.md §1.2) that the runner talks
to over a pipe; a native crash there (a
segfault in llama.cpp, an abort, the OOM killer) fails only the generation it
interrupted, with an error that says so, and the runner starts a new worker
and loads the model again. ``isolation="thread"`` runs the same worker code in
this process instead (no isolation; for comparison).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import weakref
from dataclasses import replace
from typing import TYPE_CHECKING

from tierlm.runners.cancellation import CancelReason, CancelToken
from tierlm.runners.endings import Ending, Finish, Stream
from tierlm.runners.errors import DeviceCrashed, RunnerError, unknown_model
from tierlm.runners.llama_cpp.host.calls import WorkerCrashed
from tierlm.runners.llama_cpp.host.slots import Slots
from tierlm.runners.llama_cpp.host.supervisor import ISOLATIONS, Isolation, WorkerSupervisor
from tierlm.runners.llama_cpp.model.capacity import CPU_STEP_COST, DEFAULT_KV_POOL_BYTES
from tierlm.runners.llama_cpp.model.cpu_flags import extra_bufts_for_slots
from tierlm.runners.llama_cpp.model.spec import LlamaModelSpec, cpu_has_amx
from tierlm.runners.llama_cpp.prompt.grammar_bounds import check_request_bounds
from tierlm.runners.llama_cpp.wire.control import DEFAULT_STALL_TIMEOUT, MAX_SLOTS
from tierlm.runners.llama_cpp.wire.messages import (
    Configure,
    Detokenize,
    Ended,
    Generate,
    GenerationStats,
    InjectFault,
    Load,
    LoadInfo,
    PoolStats,
    RenderPrompt,
    Shutdown,
    Tokenize,
    Unload,
)
from tierlm.runners.protocol import Abilities
from tierlm.runners.requests import GenerationRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence
    from os import PathLike

    from tierlm.runners.llama_cpp.host.transport import Worker
    from tierlm.runners.llama_cpp.wire.faults import FaultInjection

__all__ = ["ISOLATIONS", "Isolation", "LlamaCppRunner"]

logger = logging.getLogger("tierlm.runners.llama_cpp")


_FINISH: Mapping[Ended, Finish] = {
    "max_tokens": Finish.LENGTH,
    "eos": Finish.STOP,
    "stop": Finish.STOP,
    "cancelled": Finish.CANCELLED,
    "prefill_aborted": Finish.CANCELLED,
    "context_full": Finish.CONTEXT,
}
"""The worker's outcome as the runner's stream ends (docs/design.md §2.7)."""


def _stop_worker(worker: Worker) -> None:
    """The runner was garbage-collected without ``aclose``: let its worker go."""
    if worker.exit_code is None:
        worker.send(Shutdown())


async def _check_grammar_bounds(request: GenerationRequest) -> None:
    """docs/design.md §1.8: a grammar over its bounds is refused here, before the
    worker is asked to build it (off the event loop: a raw grammar is read whole)."""
    if any(request.extra.get(k) for k in ("grammar", "response_format", "tools")):
        await asyncio.to_thread(check_request_bounds, request.extra, request.model_id)


class LlamaCppRunner:
    """Run GGUF models with llama-cpp-python in a crash-isolated worker.

    ``models`` maps model ids to a ``LlamaModelSpec`` or just a path (default
    options)::

        runner = LlamaCppRunner({
            "qwen": LlamaModelSpec("qwen2.5-0.5b.gguf", n_ctx=4096),
            "qwen-8k": LlamaModelSpec("qwen2.5-0.5b.gguf", n_ctx=8192),
        })
        await runner.load("qwen")

    ``slots=k`` > 1 decodes up to k concurrent ``generate`` calls together,
    one ``llama_batch`` per step (``batch.py``; ``DEFAULT_SLOTS`` is the
    measured choice for a batched deployment); 1 runs one at a time.

    ``stall_timeout``: seconds without a heartbeat from the worker process
    before its watchdog kills it and a new one starts (``transport.py``).

    What a gateway can show: ``worker_pid``, ``restarts``, ``last_crash``,
    ``worker_problem()`` (a silent or restarting worker),
    ``loaded_model``, ``last_load`` (the options llama.cpp really applied),
    ``extra_bufts_off`` (models loaded without weight repacking on this CPU),
    ``kv_pool`` (the KV snapshot pool); and per request
    ``await count_prompt_tokens(request)`` (exact, from the model's tokenizer)
    and ``last_stats``; ``tokenize`` and ``detokenize`` (``Tokenizer``).
    """

    def __init__(
        self,
        models: Mapping[str, LlamaModelSpec | str | PathLike[str]],
        *,
        isolation: Isolation = "process",
        probe: bool = True,
        kv_pool_bytes: int = DEFAULT_KV_POOL_BYTES,
        slots: int = 1,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    ) -> None:
        if not stall_timeout > 0:
            raise ValueError(f"stall_timeout: must be seconds > 0, got {stall_timeout!r}")
        if not isinstance(slots, int) or isinstance(slots, bool) or not 1 <= slots <= MAX_SLOTS:
            raise ValueError(f"slots: must be an int from 1 to {MAX_SLOTS}, got {slots!r}")
        if not isinstance(kv_pool_bytes, int) or kv_pool_bytes < 0:
            raise ValueError(f"kv_pool_bytes: must be an int >= 0, got {kv_pool_bytes!r}")
        if isolation not in ISOLATIONS:
            raise ValueError(
                f"isolation: must be one of {', '.join(ISOLATIONS)}, got {isolation!r}"
            )
        self.models: dict[str, LlamaModelSpec] = {
            model_id: spec if isinstance(spec, LlamaModelSpec) else LlamaModelSpec(spec)
            for model_id, spec in models.items()
        }
        self.isolation: Isolation = isolation
        self.stall_timeout = float(stall_timeout)
        self.slots = slots
        """Sequences decoded at once (docs/design.md §1.6):
        up to ``slots`` concurrent ``generate`` calls decode together, one
        ``llama_batch`` per step; 1 = one generation at a time."""
        self._slot_table = Slots(slots)
        self.step_cost = CPU_STEP_COST[:slots]
        """A step's time with n sequences relative to one, for the shell's chat
        latency guard (docs/design.md §4.7): the curve measured on these CPUs."""
        self.kv_pool_bytes = kv_pool_bytes
        """Bytes of KV state the worker keeps for preempted generations and long
        prefixes (docs/design.md §4.9); 0 keeps none (resumes
        then re-evaluate the exact tokens)."""
        self.kv_pool: PoolStats | None = None
        """The KV snapshot pool, as of the last generation."""
        self.probe = probe
        """Run the start-up probe after each load (process isolation only: in a
        thread, a crash would end this process)."""
        self.loaded_model: str | None = None
        self.loads = 0
        """How many times ``load`` switched the model."""
        self.last_load_seconds: float | None = None
        self.last_load: LoadInfo | None = None
        self.last_stats: GenerationStats | None = None
        """What the last generation did (set when its stream ends)."""
        self.probe_crashes = 0
        """Start-up probes that crashed with ``use_extra_bufts`` on, after
        which the model loaded with it off (a known llama.cpp crash on some
        CPUs, not a fault of this machine: the worker is replaced, uncounted)."""
        self.amx = cpu_has_amx()
        """This CPU has AMX: specs that leave ``use_extra_bufts`` open load with
        it off, before any crash (``LlamaModelSpec.use_extra_bufts``)."""
        self.extra_bufts_off: set[str] = set()
        """Models loaded with ``use_extra_bufts`` off by the runner's choice:
        their spec left it open on a CPU with AMX, or their start-up probe
        crashed with it on."""
        self.fault_injection: FaultInjection | None = None
        """TESTS ONLY: a fault armed in every new worker (see ``inject_fault``)."""
        self._supervisor = WorkerSupervisor(
            isolation, self.stall_timeout, on_spawn=self._on_spawn, reload=self._reload
        )
        self._ids = itertools.count(1)

    # -- state --------------------------------------------------------------

    @property
    def restores_kv(self) -> bool:
        """A preempted generation resumes from its KV snapshot, not by
        re-evaluating (the shell's slices read it: docs/design.md §4.6)."""
        return self.kv_pool_bytes > 0

    @property
    def abilities(self) -> Abilities:
        """Its slots, the CPU's step-cost curve, KV restore, and each model's
        context: the one llama.cpp applied once the model is loaded, else its
        spec's. (No swap estimate: the shell measures the first load.)"""
        contexts = {model_id: spec.n_ctx for model_id, spec in self.models.items()}
        load = self.last_load
        if load is not None and load.model_id == self.loaded_model:
            contexts[load.model_id] = load.n_ctx
        return Abilities(
            self.slots, tuple(self.step_cost), restores_kv=self.restores_kv, contexts=contexts
        )

    @property
    def worker_pid(self) -> int | None:
        """The worker process's pid (this process's with ``isolation="thread"``);
        None before the first load and while no worker runs."""
        return self._supervisor.pid

    @property
    def restarts(self) -> int:
        """Workers started again after a crash or a stall (not after the
        start-up probe's expected crash with ``use_extra_bufts`` on:
        ``probe_crashes``)."""
        return self._supervisor.restarts

    @property
    def last_crash(self) -> str | None:
        """What the worker last crashed on (or the watchdog killed it for)."""
        return self._supervisor.last_crash

    @last_crash.setter
    def last_crash(self, said: str | None) -> None:
        self._supervisor.last_crash = said

    def spec(self, model_id: str) -> LlamaModelSpec:
        try:
            return self.models[model_id]
        except KeyError:
            raise unknown_model(model_id, self.models) from None

    def _effective_spec(self, model_id: str) -> LlamaModelSpec:
        spec = self.spec(model_id)
        if model_id in self.extra_bufts_off or (spec.use_extra_bufts is None and self.amx):
            return replace(spec, use_extra_bufts=False)
        # Every step of a batch is a batched decode: the AMX crash (cpu_flags.py).
        extra_bufts = extra_bufts_for_slots(spec.use_extra_bufts, self.slots)
        if extra_bufts != spec.use_extra_bufts:
            return replace(spec, use_extra_bufts=extra_bufts)
        return spec

    # -- the worker (supervisor.py) ------------------------------------------

    def worker_problem(self) -> str | None:
        """Why the worker cannot serve now (for ``/ready``), None if it can."""
        return self._supervisor.problem()

    def _on_spawn(self, worker: Worker) -> None:
        weakref.finalize(self, _stop_worker, worker)
        worker.send(Configure(next(self._ids), self.kv_pool_bytes, self.slots))
        fault = self.fault_injection
        if fault is not None and fault.every_worker:
            worker.send(InjectFault(next(self._ids), fault))

    async def _reload(self) -> str:
        model_id = self.loaded_model
        if model_id is None:
            return "restarted"
        try:
            await self._open(model_id)
        except RunnerError as exc:
            self.loaded_model = None
            return f"restarted, but loading model {model_id!r} again failed: {exc}"
        return "restarted"

    # -- load ----------------------------------------------------------------

    async def load(self, model_id: str) -> None:
        self.spec(model_id)  # unknown ids fail here, before anything changes
        # Shielded: a swap is not interruptible; if our caller is cancelled,
        # the swap completes.
        await asyncio.shield(self._swap(model_id))

    async def _swap(self, model_id: str) -> None:
        await self._supervisor.live()  # a crashed worker comes back holding its model
        if model_id == self.loaded_model:
            return
        self.loaded_model = None
        started = time.perf_counter()
        await self._open(model_id)
        self.loaded_model = model_id
        self.loads += 1
        self.last_load_seconds = time.perf_counter() - started

    async def unload(self) -> None:
        """Free the model (its weights and context); the worker stays up for
        the next load. Not interruptible, like a load."""
        await asyncio.shield(self._unload())

    async def _unload(self) -> None:
        if self.loaded_model is None:
            return
        self.loaded_model = None
        worker = self._supervisor.worker
        if worker is not None and worker.exit_code is None:
            _, call = await self._supervisor.call(Unload(next(self._ids)))
            with contextlib.suppress(WorkerCrashed):  # nothing left to free
                await call.result()

    def describe(self, model_id: str) -> dict[str, object]:
        """A model's load options, and what llama.cpp applied when it was loaded
        (``GET /v1/models``)."""
        options = self._effective_spec(model_id).options_summary()
        load = self.last_load
        if model_id == self.loaded_model and load is not None and load.model_id == model_id:
            options["applied"] = load.summary()
        return options

    async def _open(self, model_id: str) -> LoadInfo:
        """Load ``model_id`` in the worker, with the start-up probe: if the
        probe crashes the worker with ``use_extra_bufts`` on, load it once more
        with it off. A worker that died before the load (idle, unnoticed) is
        restarted and the load tried once more."""
        if self.amx and self.spec(model_id).use_extra_bufts is None:
            if model_id not in self.extra_bufts_off:
                logger.info(
                    "model %r: AMX repacking disabled on this CPU (use_extra_bufts=False; "
                    "llama.cpp issues #16315, #20824)",
                    model_id,
                )
            self.extra_bufts_off.add(model_id)
        spec = self._effective_spec(model_id)
        probe = self.probe and self.isolation == "process"
        retried = False
        while True:
            worker, call = await self._supervisor.call(Load(next(self._ids), model_id, spec, probe))
            try:
                info: LoadInfo = await call.result()
            except WorkerCrashed as crash:
                probing = call.stage == "probing"
                if probing and spec.use_extra_bufts is not False:
                    # Expected on some CPUs: said calmly, and no restart counted;
                    # a warning when the user asked for it on (their choice is undone).
                    self._supervisor.restart(worker, counted=False)
                    self.probe_crashes += 1
                    logger.log(
                        logging.WARNING if spec.use_extra_bufts else logging.INFO,
                        "model %r: AMX repacking disabled on this CPU: the start-up probe "
                        "crashed (%s) with use_extra_bufts on (llama.cpp issues #16315, "
                        "#20824); loading it with use_extra_bufts=False",
                        model_id,
                        crash,
                    )
                    self.extra_bufts_off.add(model_id)
                    spec = replace(spec, use_extra_bufts=False)
                    continue
                self._supervisor.restart(worker)
                if not probing and not retried:
                    retried = True
                    continue
                where = "in its start-up probe" if probing else "while loading it"
                self.last_crash = f"model {model_id!r}: crashed ({crash}) {where}"
                raise RunnerError(
                    f"model {model_id!r}: the llama.cpp worker crashed ({crash}) {where}; "
                    "restarted",
                    model_id=model_id,
                ) from None
            self.last_load = info
            return info

    async def aclose(self) -> None:
        """Stop the worker and free the model (waiting for a stopping generation)."""
        calls = self._supervisor.calls
        worker = self._supervisor.detach()
        self.loaded_model = None
        if worker is not None:
            for call_id in calls.generations():
                slot = self._slot_table.held.get(call_id, 0)
                worker.control.cancel(call_id, CancelReason.SHUTDOWN, slot)
            await asyncio.to_thread(worker.shutdown)

    # -- tokens --------------------------------------------------------------

    async def count_prompt_tokens(self, request: GenerationRequest) -> int:
        """The exact number of tokens of ``request``'s prompt (the prompt, or the
        chat rendered with the model's template, + ``resume_text``), from the
        model's own tokenizer: a response's ``usage.prompt_tokens``. The model
        need not be loaded; a running generation does not delay it."""
        _, tokens = await self._render(request)
        return tokens

    async def prompt_text(self, request: GenerationRequest) -> str:
        """The text the model continues for ``request``: the prompt, or the chat
        rendered with the model's template, + ``resume_text``."""
        text, _ = await self._render(request)
        return text

    async def _render(self, request: GenerationRequest) -> tuple[str, int]:
        spec = self.spec(request.model_id)
        await _check_grammar_bounds(request)
        rendered: tuple[str, int] = await self._supervisor.ask(
            lambda: RenderPrompt(next(self._ids), request.model_id, spec, request),
            request.model_id,
            "rendering its prompt",
        )
        return rendered

    async def tokenize(
        self, model_id: str, text: str, *, add_special: bool = False, parse_special: bool = True
    ) -> list[tuple[int, bytes]]:
        """``Tokenizer.tokenize``: served as ``count_prompt_tokens`` is."""
        spec = self.spec(model_id)
        tokens: list[tuple[int, bytes]] = await self._supervisor.ask(
            lambda: Tokenize(next(self._ids), model_id, spec, text, add_special, parse_special),
            model_id,
            "tokenizing",
        )
        return tokens

    async def detokenize(self, model_id: str, tokens: Sequence[int]) -> str:
        """``Tokenizer.detokenize``: served as ``count_prompt_tokens`` is."""
        text: str = await self._supervisor.ask(
            lambda: Detokenize(next(self._ids), model_id, self.spec(model_id), tuple(tokens)),
            model_id,
            "detokenizing",
        )
        return text

    # -- generate ------------------------------------------------------------

    def generate(self, request: GenerationRequest, cancel: CancelToken) -> Stream:
        return Stream(self._generate(request, cancel))

    async def _generate(
        self, request: GenerationRequest, cancel: CancelToken
    ) -> AsyncIterator[str | Ending]:
        # Checked on the first iteration, like every error of a generation.
        if request.model_id != self.loaded_model:
            raise RunnerError(
                f"model {request.model_id!r}: not loaded (loaded: {self.loaded_model!r})",
                model_id=request.model_id,
            )
        if cancel.cancelled:  # cancelled before it began: nothing starts
            yield Ending(Finish.CANCELLED, 0)
            return
        await _check_grammar_bounds(request)
        taken = yielded = 0
        stop = cancel.for_call(lambda: yielded)  # a yield: after the first token
        label = f"job {request.job_id}" if request.job_id is not None else "a request"
        call_id = next(self._ids)  # the generation's id, in the control block too
        slot = await self._slot_table.acquire(call_id)
        try:
            worker, call = await self._supervisor.call(
                Generate(call_id, request, label, slot), stream=True
            )
        except BaseException:
            self._slot_table.release(call_id)
            raise
        control = worker.control

        def on_cancel(token: CancelToken) -> None:
            # Called again when a stronger reason replaces the first (a yield
            # cut short by a person's preemption): the worker reads the latest.
            control.cancel(call_id, token.reason or CancelReason.CALLER, slot)

        remove = cancel.add_callback(on_cancel)
        assert call.pieces is not None
        try:
            while (text := await call.pieces.get()) is not None:
                taken += 1
                control.set_consumed(call_id, taken, slot)
                if stop.cancelled:
                    yield Ending(Finish.CANCELLED, yielded)
                    return
                yielded += 1
                yield text
            stats: GenerationStats = await call.result()  # raises the generation's error
            yield Ending(
                _FINISH.get(stats.ended, Finish.STOP), yielded, stats.prompt_tokens, stats.ended
            )
        except WorkerCrashed as crash:
            outcome = await self._supervisor.recover(worker)
            self.last_crash = f"{label} (model {request.model_id!r}): crashed ({crash})"
            raise DeviceCrashed(
                f"the llama.cpp worker crashed ({crash}) while generating for {label} "
                f"(model {request.model_id!r}); {outcome}",
                model_id=request.model_id,
            ) from None
        finally:
            remove()
            control.cancel(call_id, CancelReason.READER_LEFT, slot)  # no-op if it has ended
            # Return only once the device is free: the worker is at most one
            # token (or one aborted prompt batch) away from its reply.
            with contextlib.suppress(Exception):
                await call.result()
            self._slot_table.release(call_id)
            if call.done.done() and call.done.exception() is None:
                self.last_stats = call.done.result()
                self.kv_pool = self.last_stats.pool

    # -- tests ---------------------------------------------------------------

    async def inject_fault(self, fault: FaultInjection) -> None:
        """FAULT INJECTION, tests only: arm ``fault`` in the worker (and in every
        later one if ``fault.every_worker``)."""
        if fault.every_worker:
            self.fault_injection = fault
        _, call = await self._supervisor.call(InjectFault(next(self._ids), fault))
        await call.result()
