"""What a workload's producers see of a simulation: ``SimContext``.

Its own module so that workloads (``tierlm.sim.workload``) and the engine that
runs them (``tierlm.sim.engine``) both import it and not each other.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping

from tierlm.core.jobs import Subject
from tierlm.handles import JobContext, JobHandle
from tierlm.runners.protocol import Cancelled, CancelReason, GenerationRequest
from tierlm.runners.simulated import SimulatedRunner
from tierlm.scheduler import Scheduler
from tierlm.sim.device import DeviceModel
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.records import JobRecord, account_run

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
        self._resumes = resumes
        self._loop = asyncio.get_running_loop()

    # -- time and randomness ----------------------------------------------------

    def now(self) -> float:
        return self._loop.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, when: float) -> None:
        await asyncio.sleep(max(0.0, when - self._loop.time()))

    def rng(self, name: str) -> random.Random:
        """A random stream of its own for one producer, fixed by the seed.

        Seeding a Random with a str hashes it with SHA-512: the same across
        processes and runs, whatever PYTHONHASHSEED says.
        """
        return random.Random(f"{self._workload}/{self.seed}/{name}")

    # -- the surface the person looks at ----------------------------------------

    def set_foreground(self, class_name: str | None, subject: Subject | None = None) -> None:
        """Also how ``two-lane`` learns that the chat surface is open."""
        self.sched.set_foreground(class_name, subject)

    # -- jobs -------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> JobHandle[None]:
        """Submit one job (open loop: returns at once)."""
        work = self._work(spec, resume=spec.resumable and self._resumes)
        handle = self.sched.submit(
            spec.class_name,
            spec.model_id,
            work,
            producer=spec.producer,
            subject=spec.subject,
            deadline=spec.deadline,
        )
        # The recorder filed the job's record at JobSubmitted; its shape is
        # known only here.
        record = self._records[handle.id]
        record.prompt_tokens = spec.prompt_tokens
        record.output_tokens = spec.output_tokens
        record.resumable = spec.resumable
        record.ideal_seconds = self.device.job_seconds(spec.prompt_tokens, spec.output_tokens)
        return handle

    async def run(self, spec: JobSpec) -> bool:
        """Submit one job and wait for it (a sequential producer); True if it completed."""
        handle = self.submit(spec)
        try:
            await handle
        except Cancelled:
            return False
        return True

    def _work(self, spec: JobSpec, *, resume: bool) -> Callable[[JobContext], Awaitable[None]]:
        runner = self.runner
        loop = self._loop
        records = self._records

        async def work(ctx: JobContext) -> None:
            record = records[ctx.job_id]
            kept = record.tokens_kept if resume else 0
            left = spec.output_tokens - kept
            if left <= 0:
                return
            # Resume: the next run prefills prompt + the partial output again
            # (docs/design.md §4 re-queue); restart: the prompt alone, every token again.
            request = GenerationRequest(
                ctx.model_id,
                prompt="simulated",
                max_tokens=left,
                prompt_tokens=spec.prompt_tokens + kept,
            )
            started = loop.time()
            outcome = await runner.complete(request, ctx.cancel)
            elapsed = loop.time() - started
            if outcome.tokens and record.first_token is None:
                record.first_token = outcome.first_token_at
            preempted = outcome.stopped and ctx.cancel.reason is CancelReason.PREEMPTED
            account_run(
                record,
                resume=resume,
                elapsed=elapsed,
                prefill=outcome.prefill_seconds,
                tokens=outcome.tokens,
                preempted=preempted,
            )
            if record.runs:
                record.runs[-1].tokens = outcome.tokens
            if outcome.stopped:
                ctx.checkpoint()  # raises Cancelled: the shell re-queues or ends it

        return work
