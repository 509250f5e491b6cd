"""Run one workload under one policy: the real Scheduler, a SimulatedRunner,
virtual time (docs/design.md §1 sim). No second scheduler exists here.

Jobs spend device time through ``SimulatedRunner.complete`` (a few timers per
run, not one per token: "do not schedule one event per token when
nothing observes them"). Each job accounts its own work: tokens, first token,
and what a preemption threw away (``records.account_run``); the scheduler's
events give the rest (``recorder.Recorder``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from tierlm.core.config import SchedulerConfig
from tierlm.core.jobs import Subject
from tierlm.handles import JobContext, JobHandle
from tierlm.runners.protocol import Cancelled, CancelReason, GenerationRequest
from tierlm.runners.simulated import SimulatedRunner
from tierlm.scheduler import Scheduler
from tierlm.sim.device import DeviceModel
from tierlm.sim.jobspec import JobSpec
from tierlm.sim.policies import POLICIES, make_policy
from tierlm.sim.recorder import Recorder
from tierlm.sim.records import JobRecord, SimRecords, account_run
from tierlm.sim.workload import Workload
from tierlm.snapshot import SchedulerEvent
from tierlm.testing.virtual import run_virtual

__all__ = ["ProgressFn", "SimContext", "simulate"]

ProgressFn = Callable[[float], None]
"""Called with the simulated time, every ``progress_step`` simulated seconds."""

# Progress reports per run: often enough for a smooth bar, rare enough to cost
# nothing next to the jobs.
PROGRESS_STEPS = 200


class SimContext:
    """What a workload's producers use: time, random streams, job submission."""

    def __init__(
        self,
        sched: Scheduler,
        runner: SimulatedRunner,
        recorder: Recorder,
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
        self._recorder = recorder
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
        device = self.device
        record = JobRecord(
            id=0,
            class_name=spec.class_name,
            producer=spec.producer or spec.class_name,
            model_id=spec.model_id,
            subject=spec.subject,
            deadline=spec.deadline,
            submitted=self.now(),
            prompt_tokens=spec.prompt_tokens,
            output_tokens=spec.output_tokens,
            resumable=spec.resumable,
            ideal_seconds=device.job_seconds(spec.prompt_tokens, spec.output_tokens),
        )
        work = self._work(spec, record, resume=spec.resumable and self._resumes)
        self._recorder.pending = record
        return self.sched.submit(
            spec.class_name,
            spec.model_id,
            work,
            producer=spec.producer,
            subject=spec.subject,
            deadline=spec.deadline,
        )

    async def run(self, spec: JobSpec) -> bool:
        """Submit one job and wait for it (a sequential producer); True if it completed."""
        handle = self.submit(spec)
        try:
            await handle
        except Cancelled:
            return False
        return True

    def _work(
        self, spec: JobSpec, record: JobRecord, *, resume: bool
    ) -> Callable[[JobContext], Awaitable[None]]:
        runner = self.runner
        loop = self._loop

        async def work(ctx: JobContext) -> None:
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


def simulate(
    workload: Workload,
    policy: str,
    *,
    seed: int = 1,
    duration: float | None = None,
    device: DeviceModel | None = None,
    config: SchedulerConfig | None = None,
    progress: ProgressFn | None = None,
) -> SimRecords:
    """Run ``workload`` under ``policy`` for ``duration`` simulated seconds.

    Deterministic: the same arguments give the same records.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy: unknown {policy!r}; known: {', '.join(POLICIES)}")
    horizon = float(duration if duration is not None else workload.default_duration)
    if horizon <= 0:
        raise ValueError(f"duration: must be > 0 simulated seconds, got {horizon}")
    return run_virtual(
        _simulate(
            workload,
            policy,
            seed=seed,
            horizon=horizon,
            device=device or DeviceModel(),
            config=config or SchedulerConfig(),
            progress=progress,
        )
    )


async def _simulate(
    workload: Workload,
    policy: str,
    *,
    seed: int,
    horizon: float,
    device: DeviceModel,
    config: SchedulerConfig,
    progress: ProgressFn | None,
) -> SimRecords:
    runner = device.runner(workload.initial_model)
    sched = Scheduler(runner, config=config, policy=make_policy(policy, None, config))
    recorder = Recorder()
    sched.add_listener(recorder)
    async with sched:
        sim = SimContext(
            sched,
            runner,
            recorder,
            device=device,
            duration=horizon,
            seed=seed,
            workload=workload.name,
            resumes=POLICIES[policy].resumes,
        )
        if progress is not None:
            sched.add_listener(_Progress(progress, horizon / PROGRESS_STEPS))
        tasks = [asyncio.create_task(coro) for coro in workload.producers(sim)]
        await asyncio.sleep(horizon)
        failed = [t.exception() for t in tasks if t.done() and not t.cancelled()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        errors = [e for e in failed if e is not None]
        if errors:
            raise RuntimeError(f"workload {workload.name!r}: a producer failed") from errors[0]
    # aclose() (leaving the block) ended every job: queued ones cancelled, the
    # running one stopped at its next token boundary.
    if progress is not None:
        progress(horizon)
    return SimRecords(
        policy=policy,
        workload=workload.name,
        seed=seed,
        horizon=horizon,
        token_interval=device.token_interval,
        prefill_per_token=device.prefill_per_token,
        swap_seconds=device.swap_seconds,
        jobs=[recorder.records[i] for i in sorted(recorder.records)],
        foreground=list(recorder.foreground),
        fair_classes=sorted(name for name, c in sched.classes.items() if c.fair),
        budget_caps={name: c.budget.share for name, c in sorted(sched.classes.items()) if c.budget},
        hints=workload.hints(horizon),
    )


class _Progress:
    """Reports progress from the scheduler's events, never from a timer of its
    own: an extra timer would reorder events that fall on the same instant
    (asyncio breaks ties between timers by heap position), so showing a
    progress bar would change the results."""

    def __init__(self, progress: ProgressFn, step: float) -> None:
        self.progress = progress
        self.step = step
        self.next = 0.0

    def __call__(self, event: SchedulerEvent) -> None:
        if event.time >= self.next:
            self.progress(event.time)
            self.next = event.time + self.step
