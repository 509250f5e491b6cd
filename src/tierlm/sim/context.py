"""What a workload's producers see of a simulation: ``SimContext``.

Its own module so that workloads (``tierlm.sim.workload``) and the engine that
runs them (``tierlm.sim.engine``) both import it and not each other.

Jobs do their work through the same entry points as any caller's
(docs/design.md §2): a generation through ``Scheduler.submit_generation``, a
closure job through ``ctx.generate`` (so its journal replays after a
preemption). A column whose jobs RESTART (``tierlm.sim.policies``) submits
every job as a closure that calls the runner directly, without a journal:
a preempted run is redone from scratch, as the seed's jobs are.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import cast

from tierlm.core.jobs import Subject
from tierlm.runners.cancellation import Cancelled
from tierlm.runners.protocol import aclosing_stream
from tierlm.runners.requests import GenerationRequest
from tierlm.runners.simulated import SimulatedCall, SimulatedRunner
from tierlm.shell.handles import JobContext, JobHandle
from tierlm.shell.scheduler import Scheduler
from tierlm.sim.device import DeviceModel
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.records import JobRecord

__all__ = ["SimContext"]


class SimContext:
    """What a workload's producers use: time, random streams, job submission."""

    def __init__(
        self,
        sched: Scheduler,
        runner: SimulatedRunner,
        records: Mapping[int, JobRecord],
        *,
        device: DeviceModel,
        duration: float,
        seed: int,
        workload: str,
        resumes: bool,
    ) -> None:
        self.sched = sched
        self.runner = runner
        self.device = device
        self.duration = duration
        self.seed = seed
        self._workload = workload
        self._records = records
        self.resumes = resumes and device.resume != "restart"
        self._loop = asyncio.get_running_loop()
        self._serial = itertools.count(1)
        self._by_prompt: dict[str, JobRecord] = {}
        runner.on_call = self._on_call

    # -- time and randomness ----------------------------------------------------

    def now(self) -> float:
        return self._loop.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, when: float) -> None:
        await asyncio.sleep(max(0.0, when - self._loop.time()))

    @staticmethod
    def random_stream(workload: str, seed: int, name: str) -> random.Random:
        """The random stream ``name`` of ``workload`` under ``seed``.

        Seeding a Random with a str hashes it with SHA-512: the same across
        processes and runs, whatever PYTHONHASHSEED says.
        """
        return random.Random(f"{workload}/{seed}/{name}")

    def rng(self, name: str) -> random.Random:
        """A random stream of its own for one producer, fixed by the seed."""
        return self.random_stream(self._workload, self.seed, name)

    # -- the surface the person looks at ----------------------------------------

    def set_foreground(self, class_name: str | None, subject: Subject | None = None) -> None:
        """Also how ``two-lane`` learns that the chat surface is open."""
        self.sched.set_foreground(class_name, subject)

    # -- jobs -------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> JobHandle[None] | JobHandle[str]:
        """Submit one job (open loop: returns at once)."""
        serial = next(self._serial)
        prompts = [f"job {serial} call {k}" for k in range(spec.calls)]
        handle: JobHandle[None] | JobHandle[str]
        if spec.generation and self.resumes:
            request = GenerationRequest(
                spec.model_id,
                prompt=prompts[0],
                max_tokens=spec.output_tokens,
                prompt_tokens=spec.prompt_tokens,
            )
            handle = self.sched.submit_generation(
                spec.class_name,
                request,
                _ignore,
                producer=spec.producer,
                subject=spec.subject,
                deadline=spec.deadline,
            )
        else:
            handle = self.sched.submit(
                spec.class_name,
                spec.model_id,
                self._closure(spec, prompts),
                producer=spec.producer,
                subject=spec.subject,
                deadline=spec.deadline,
            )
        # The recorder filed the job's record at JobSubmitted; its shape is
        # known only here.
        record = self._records[handle.id]
        record.prompt_tokens = spec.prompt_tokens
        record.output_tokens = spec.output_tokens
        record.calls = spec.calls
        record.generation = spec.generation
        record.restarts = not self.resumes
        record.ideal_seconds = self.device.job_seconds(
            spec.prompt_tokens, spec.output_tokens, spec.calls
        )
        for prompt in prompts:
            self._by_prompt[prompt] = record
        return handle

    async def run(self, spec: JobSpec) -> bool:
        """Submit one job and wait for it (a sequential producer); True if it completed."""
        handle = self.submit(spec)
        try:
            await handle
        except Cancelled:
            return False
        return True

    def _closure(
        self, spec: JobSpec, prompts: list[str]
    ) -> Callable[[JobContext], Awaitable[None]]:
        calls = list(zip(prompts, spec.call_outputs(), strict=True))
        tokens = spec.prompt_tokens
        if self.resumes:

            async def replayed(ctx: JobContext) -> None:
                for prompt, output in calls:
                    stream = ctx.generate(prompt=prompt, max_tokens=output, prompt_tokens=tokens)
                    async with aclosing_stream(stream):
                        async for _piece in stream:
                            pass

            return replayed

        async def restarted(ctx: JobContext) -> None:
            runner = cast("SimulatedRunner", ctx.runner)  # direct: it starts over
            # No journal: the runner directly, every call again on every run.
            # ``complete`` spends what ``generate`` would and returns counts:
            # nobody reads these pieces, and a day's simulation would spend
            # most of its time making them.
            for prompt, output in calls:
                request = GenerationRequest(
                    ctx.model_id, prompt=prompt, max_tokens=output, prompt_tokens=tokens
                )
                outcome = await runner.complete(request, ctx.cancel)
                if outcome.stopped:  # a call that finished is kept, as the seed's are
                    ctx.checkpoint()  # raises Cancelled: the shell re-queues or ends it

        return restarted

    def _on_call(self, call: SimulatedCall) -> None:
        """The runner finished a call: account it to its job's current run."""
        prompt = call.request.prompt
        record = self._by_prompt.get(prompt) if prompt is not None else None
        if record is None or not record.runs:
            return
        record.runs[-1].account(call)
        if call.first_token_at is not None and record.first_token is None:
            record.first_token = call.first_token_at


def _ignore(_piece: str) -> None:
    return None
