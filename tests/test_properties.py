"""Invariants of docs/design.md §7, checked by Hypothesis over random histories.

A rule-based state machine drives a real Scheduler on a virtual-time loop with
random submits (every class, two models, deadlines, subjects, failing work),
cancels, foreground changes, pauses and time advances, and checks:

- every submitted job ends exactly once (result, error or cancelled);
- a chat never waits behind lower tiers for more than one token boundary plus
  at most one swap, and nothing else starts while a chat waits;
- the fair pool dispatches the smallest-vruntime producer (so none starves);
- chat is never re-queued.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.helpers import SWAP, TOKEN, runner, work_for
from tierlm import (
    JobContext,
    JobEnded,
    JobEvent,
    JobHandle,
    JobStarted,
    Requeued,
    RunEnded,
    Scheduler,
    SchedulerEvent,
)
from tierlm.testing import VirtualTimeLoop

CLASSES = ["chat", "extract", "nataraj", "gana"]


async def _failing(ctx: JobContext) -> None:
    await asyncio.sleep(0.3)
    raise RuntimeError("work failed")


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = VirtualTimeLoop()
        self.sched = Scheduler(runner("m1"))
        self.loop.run_until_complete(self.sched.__aenter__())
        self.handles: list[JobHandle[Any]] = []
        self.ends: Counter[int] = Counter()
        self.violations: list[str] = []
        self.submitted_at: dict[int, float] = {}
        self.chat_ids: set[int] = set()
        self.runs: list[tuple[int, str, float, float | None]] = []  # id, class, start, end
        self.open_runs: dict[int, int] = {}
        self.first_start: dict[int, float] = {}
        self.ended_at: dict[int, float] = {}
        self.sched.add_listener(self._on_event)

    # -- observation -------------------------------------------------------

    def _on_event(self, event: SchedulerEvent) -> None:
        if not isinstance(event, JobEvent):
            return
        job = event.job
        if isinstance(event, JobEnded):
            self.ended_at.setdefault(job.id, event.time)
            self.ends[job.id] += 1
            if self.ends[job.id] > 1:
                self.violations.append(f"job {job.id} ended twice")
        if isinstance(event, Requeued) and job.class_name == "chat":
            self.violations.append(f"chat {job.id} was re-queued")
        if isinstance(event, JobStarted):
            self.open_runs[job.id] = len(self.runs)
            self.runs.append((job.id, job.class_name, event.time, None))
            self.first_start.setdefault(job.id, event.time)
            self._check_fair_pick(job.id, event.time)
        if isinstance(event, RunEnded):
            index = self.open_runs.pop(job.id, None)
            if index is not None:
                job_id, cls, start, _ = self.runs[index]
                self.runs[index] = (job_id, cls, start, event.time)

    def _check_fair_pick(self, job_id: int, now: float) -> None:
        snap = self.sched.snapshot()
        running = snap.running
        if running is None or running.id != job_id or running.tier != 4:
            return
        same_model = [j for j in snap.queued[4] if j.model_id == running.model_id]
        mine = snap.vruntime.get(running.producer, 0.0)
        for other in same_model:
            if snap.vruntime.get(other.producer, 0.0) < mine - 1e-9:
                self.violations.append(
                    f"t={now}: fair pool ran {running.producer} (vruntime {mine}) "
                    f"before {other.producer} ({snap.vruntime[other.producer]})"
                )

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    # -- rules ---------------------------------------------------------------

    @rule(
        class_name=st.sampled_from(CLASSES),
        model=st.sampled_from(["m1", "m1", "m2"]),
        seconds=st.floats(min_value=0.05, max_value=20),
        producer=st.integers(0, 3),
        deadline=st.none() | st.floats(min_value=-10, max_value=60),
        subject=st.none() | st.sampled_from(["s1", "s2"]),
        fails=st.booleans(),
    )
    def submit(
        self,
        class_name: str,
        model: str,
        seconds: float,
        producer: int,
        deadline: float | None,
        subject: str | None,
        fails: bool,
    ) -> None:
        async def go() -> None:
            now = self.sched.now()
            work = _failing if fails and class_name != "chat" else work_for(seconds)
            handle = self.sched.submit(
                class_name,
                model,
                work,
                producer=f"{class_name}:{producer}",
                subject=subject,
                deadline=None if deadline is None else now + deadline,
            )
            self.handles.append(handle)
            self.submitted_at[handle.id] = now
            if class_name == "chat":
                self.chat_ids.add(handle.id)

        self._run(go())

    @precondition(lambda self: bool(self.handles))
    @rule(index=st.integers(0, 10_000))
    def cancel(self, index: int) -> None:
        handle = self.handles[index % len(self.handles)]

        async def go() -> None:
            handle.cancel()

        self._run(go())

    @rule(
        class_name=st.none() | st.sampled_from(CLASSES[1:]),
        subject=st.none() | st.sampled_from(["s1", "s2"]),
    )
    def foreground(self, class_name: str | None, subject: str | None) -> None:
        async def go() -> None:
            self.sched.set_foreground(class_name, subject if class_name else None)

        self._run(go())

    @rule()
    def pause(self) -> None:
        self._run(self.sched.pause())

    @rule()
    def resume(self) -> None:
        async def go() -> None:
            self.sched.resume()

        self._run(go())

    @rule(seconds=st.floats(min_value=0.01, max_value=120))
    def advance(self, seconds: float) -> None:
        self._run(asyncio.sleep(seconds))

    # -- invariants ------------------------------------------------------------

    @invariant()
    def no_violation(self) -> None:
        assert not self.violations, self.violations

    @invariant()
    def chat_never_waits_behind_lower_tiers(self) -> None:
        if self.sched.paused:
            return
        now = self.loop.time()
        for chat_id in self.chat_ids:
            arrived = self.submitted_at[chat_id]
            waited_until = self.first_start.get(chat_id, self.ended_at.get(chat_id, now))
            behind = 0.0
            for job_id, cls, start, end in self.runs:
                if cls == "chat":
                    continue
                overlap = min(end if end is not None else now, waited_until) - max(start, arrived)
                if overlap > 0:
                    behind += overlap
                    assert start <= arrived, (
                        f"job {job_id} ({cls}) started while chat {chat_id} waited"
                    )
            # One token boundary, plus at most the rest of a swap in progress.
            assert behind <= TOKEN + SWAP + 1e-6, (chat_id, behind)

    def teardown(self) -> None:
        try:
            self._run(self.sched.aclose())
            assert all(h.done() for h in self.handles)
            for handle in self.handles:
                assert self.ends[handle.id] == 1, (handle, self.ends[handle.id])
            assert not self.violations, self.violations
        finally:
            self.loop.close()


SchedulerMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_scheduler_invariants = SchedulerMachine.TestCase
