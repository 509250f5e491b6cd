"""Run one workload under one policy: the real Scheduler, a SimulatedRunner,
virtual time (docs/design.md §1.1). No second scheduler exists here.

Jobs spend device time through the runner's ``generate``, in a few timers per
call, not one per token ("do not schedule one event per token when nothing
observes them"; ``SimulatedRunner(per_token=False)``). The runner reports every
call (tokens, first token, how its prompt was made ready and at what cost) and
``tierlm.sim.context`` files it under its job's current run; the scheduler's
events give the rest (``recorder.Recorder``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tierlm.core.config import SchedulerConfig
from tierlm.shell.events import SchedulerEvent
from tierlm.shell.scheduler import Scheduler
from tierlm.sim.context import SimContext
from tierlm.sim.device import DeviceModel
from tierlm.sim.policies import column, make_policy
from tierlm.sim.recorder import Recorder
from tierlm.sim.records import SimRecords
from tierlm.sim.workload import Workload
from tierlm.testing.virtual import run_virtual

__all__ = ["ProgressFn", "SimContext", "simulate"]

ProgressFn = Callable[[float], None]
"""Called with the simulated time, every ``progress_step`` simulated seconds."""

# Progress reports per run: often enough for a smooth bar, rare enough to cost
# nothing next to the jobs.
PROGRESS_STEPS = 200


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
    column(policy)  # raises on an unknown name
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
    # A column whose jobs restart keeps nothing on the device either: its jobs
    # call the runner afresh, as the seed's do (tierlm.sim.policies).
    runner = device.runner(workload.initial_model, keeps=column(policy).resumes)
    sched = Scheduler(runner, config=config, policy=make_policy(policy, None, config))
    recorder = Recorder()
    sched.add_listener(recorder)
    async with sched:
        sim = SimContext(
            sched,
            runner,
            recorder.records,
            device=device,
            duration=horizon,
            seed=seed,
            workload=workload.name,
            resumes=column(policy).resumes,
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
        returns=list(recorder.returns),
        fair_classes=sorted(name for name, c in sched.classes.items() if c.fair),
        budget_caps={name: c.budget.share for name, c in sorted(sched.classes.items()) if c.budget},
        initial_model=workload.initial_model,
        chat_grace=config.chat_grace,
        chat_idle=_chat_idle(config),
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


def _chat_idle(config: SchedulerConfig) -> float | None:
    """How long an open chat page holds a model after its last chat
    (docs/design.md §4.8), if the policy limits that hold: the metrics'
    notion of work the policy could have run needs it."""
    chat_idle: float | None = getattr(config, "chat_idle", None)
    return None if chat_idle is None else max(config.chat_grace, chat_idle)
